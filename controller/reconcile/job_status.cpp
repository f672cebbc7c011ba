#include "job_status.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "conduit/api/reasons.h"

namespace conduit::controller {

using json = nlohmann::json;

bool is_terminal_phase(std::string_view p) { return p == phase::kSucceeded || p == phase::kFailed; }

json target_entry(const TargetSpec& target) {
  json entry{{"node", target.node}, {"region", target.region}};
  if (!target.file.empty()) entry["file"] = target.file;
  if (target.pod) entry["pod"] = target.pod->name;
  return entry;
}

std::optional<Waiting> waiting_of(const json& status) {
  if (status.value("phase", "") != phase::kPending) return std::nullopt;
  const json* running = find_condition(status, "Running");
  if (running == nullptr || running->value("status", "") != "False") return std::nullopt;
  const std::string why = running->value("reason", "");
  if (why != reason::kPeerUnreachable && why != reason::kNoReadyPods) return std::nullopt;
  return Waiting{why, running->value("message", "")};
}

std::string outcome_summary(const json& status) {
  if (status.value("phase", "") == phase::kSucceeded) {
    const json* complete = find_condition(status, "Complete");
    return "Succeeded: " + std::to_string(status.value("bytesTransferred", std::uint64_t{0})) + " bytes, " +
           format_throughput(status.value("throughputBytesPerSecond", 0.0)) + ", " +
           (complete ? complete->value("message", "") : "");
  }
  const json* failed = find_condition(status, "Failed");
  return "Failed: " + (failed ? failed->value("reason", "") + ": " + failed->value("message", "") : "");
}

std::string format_progress(std::uint64_t done, std::uint64_t total) {
  if (total == 0) return "0%";
  if (done >= total) return "100%";
  const double tenths = std::floor(static_cast<double>(done) * 1000.0 / static_cast<double>(total));
  char text[16];
  if (static_cast<std::uint64_t>(tenths) % 10 == 0) {
    std::snprintf(text, sizeof text, "%.0f%%", tenths / 10);
  } else {
    std::snprintf(text, sizeof text, "%.1f%%", tenths / 10);
  }
  return text;
}

std::string format_throughput(double bytes_per_second) {
  if (!(bytes_per_second > 0)) return "";
  const char* units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (bytes_per_second >= 1000 && u < 4) {
    bytes_per_second /= 1000;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, bytes_per_second >= 100 || u == 0 ? "%.0f %s" : "%.1f %s",
                bytes_per_second, units[u]);
  return text;
}

json merge_diff(const json& from, const json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  json patch = json::object();
  for (const auto& [key, value] : from.items()) {
    if (!to.contains(key)) patch[key] = nullptr;
  }
  for (const auto& [key, value] : to.items()) {
    if (!from.contains(key)) {
      patch[key] = value;
    } else if (from[key] != value) {
      patch[key] = (from[key].is_object() && value.is_object()) ? merge_diff(from[key], value) : value;
    }
  }
  return patch;
}

bool is_transition(const json& from, const json& to) {
  auto field = [](const json& s, const char* key) {
    return s.is_object() && s.contains(key) ? s[key] : json();
  };
  // A target that changed state (one hop of a Chain with every byte, one of a Fanout failed) is news too.
  auto states = [&field](const json& s) {
    std::vector<std::string> out;
    const json targets = field(s, "targets");
    if (targets.is_array()) {
      for (const auto& t : targets) out.push_back(t.is_object() ? t.value("state", "") : "");
    }
    return out;
  };
  return field(from, "phase") != field(to, "phase") || field(from, "conditions") != field(to, "conditions") ||
         states(from) != states(to);
}

void set_gpu_path(nlohmann::json& entry, const api::TransferStatus& t, std::size_t target) {
  if (!t.gpu_path.empty()) entry["gpuPath"] = t.gpu_path;
  if (target < t.targets.size()) entry["staged"] = t.targets[target].staged;
}

nlohmann::json path_status(const api::TransferPath& path) {
  api::TransferPath cut = path;
  if (cut.nics.size() > 64) cut.nics.resize(64);
  cut.message = cut.message.substr(0, 4096);
  for (auto& n : cut.nics) {
    n.message = n.message.substr(0, 1024);
    n.nic = n.nic.substr(0, 64);
  }
  return cut.to_json();
}

std::string staged_summary(const api::TransferStatus& t, const TransferJobSpec& spec) {
  std::string ends;
  if (t.gpu_path == "staged") {
    ends = "source " + spec.source.node + "/" +
           (spec.source.region.empty() ? spec.source.file : spec.source.region);
  }
  for (std::size_t i = 0; i < t.targets.size() && i < spec.targets.size(); ++i) {
    if (!t.targets[i].staged) continue;
    ends += (ends.empty() ? "" : ", ") + std::string("target ") + spec.targets[i].node + "/" +
            spec.targets[i].region;
  }
  if (ends.empty()) return {};
  return "CUDA memory went through host memory (staged), not GPU-direct: " + ends;
}

bool status_shows_staged(const nlohmann::json& status) {
  if (!status.is_object() || !status.contains("targets") || !status["targets"].is_array()) return false;
  for (const auto& entry : status["targets"]) {
    if (!entry.is_object()) continue;
    if (entry.value("gpuPath", std::string()) == "staged") return true;
    if (entry.contains("staged") && entry["staged"].is_boolean() && entry["staged"].get<bool>()) return true;
  }
  return false;
}

void set_stages(nlohmann::json& status, const api::TransferStatus& t) {
  // The CRD refuses a negative value, and one refused field would leave the whole status unwritten: an
  // agent's clock slip is not worth a job that never finishes.
  auto st = t.stages;
  for (double* v : {&st.read, &st.wire, &st.land, &st.commit})
    *v = std::isfinite(*v) ? std::max(0.0, *v) : 0.0;
  const std::pair<const char*, double> stages[] = {
      {"read", st.read}, {"wire", st.wire}, {"land", st.land}, {"commit", st.commit}};
  const auto slowest = std::max_element(stages, std::end(stages),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
  if (slowest->second <= 0) return;
  status["stages"] = {{"readSeconds", st.read},
                      {"wireSeconds", st.wire},
                      {"landSeconds", st.land},
                      {"commitSeconds", st.commit}};
  char text[32];
  std::snprintf(text, sizeof text, "%s %.2f s", slowest->first, slowest->second);
  status["slowestStage"] = text;
}

}  // namespace conduit::controller
