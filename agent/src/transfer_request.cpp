// The wire forms of a transfer: the strict parser of POST /v1/transfers bodies and the status JSON.
#include <ctime>
#include <set>

#include "transfers.h"

namespace conduit::agent {

namespace {

using nlohmann::json;

constexpr std::uint64_t kMinChunk = 4ULL << 10;
constexpr std::uint64_t kMaxChunk = 64ULL << 20;
constexpr std::uint32_t kMaxWindow = 256;
constexpr std::size_t kMaxTargets = 16;
constexpr std::uint64_t kMaxDeadlineSeconds = 7 * 24 * 3600;

Error bad(const std::string& path, const std::string& why) {
  return make_error(ErrorCode::InvalidArgument, path + ": " + why);
}

Status only_fields(const json& object, const std::string& path,
                   std::initializer_list<std::string_view> known) {
  for (const auto& [name, _] : object.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return bad(path.empty() ? name : path + "." + name, "unknown field");
    }
  }
  return {};
}

// Absent fields keep `out` as it was (the default). nlohmann keeps small non-negative numbers built in C++
// as signed integers, so any integer >= 0 counts as unsigned.
Status read_u64(const json& object, const char* field, const std::string& path, std::uint64_t& out,
                std::uint64_t min = 0, std::uint64_t max = UINT64_MAX) {
  auto it = object.find(field);
  if (it == object.end()) return {};
  if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<std::int64_t>() < 0)) {
    return bad(path, "must be a non-negative integer");
  }
  const std::uint64_t v = it->get<std::uint64_t>();
  if (v < min || v > max) {
    return bad(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                         std::to_string(v));
  }
  out = v;
  return {};
}

Status read_string(const json& object, const char* field, const std::string& path, std::string& out) {
  auto it = object.find(field);
  if (it == object.end()) return {};
  if (!it->is_string()) return bad(path, "must be a string");
  out = it->get<std::string>();
  return {};
}

Status read_region_name(const json& object, const char* field, const std::string& path, std::string& out) {
  if (auto s = read_string(object, field, path, out); !s) return s;
  if (out.empty()) return {};
  if (auto valid = validate_name(out); !valid) return bad(path, valid.error().message);
  return {};
}

Result<TransferTarget> parse_target(const json& j, const std::string& path) {
  if (!j.is_object()) return bad(path, "must be an object");
  if (auto s = only_fields(j, path, {"grant", "offset", "url", "region", "regionOffset", "resumeOffset"}); !s)
    return s.error();
  TransferTarget t;
  if (!j.contains("grant")) return bad(path + ".grant", "is required");
  auto key = RemoteKey::from_json(j["grant"]);
  if (!key) return bad(path + ".grant", key.error().message);
  t.grant = std::move(*key);
  if (auto s = read_u64(j, "offset", path + ".offset", t.offset); !s) return s.error();
  if (auto s = read_string(j, "url", path + ".url", t.url); !s) return s.error();
  if (!t.url.empty() && !t.url.starts_with("http://") && !t.url.starts_with("https://")) {
    return bad(path + ".url", "must start with http:// or https://");
  }
  if (auto s = read_region_name(j, "region", path + ".region", t.region); !s) return s.error();
  if (auto s = read_u64(j, "regionOffset", path + ".regionOffset", t.region_offset); !s) return s.error();
  if (auto s = read_u64(j, "resumeOffset", path + ".resumeOffset", t.resume_offset); !s) return s.error();
  return t;
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof(text) - n, ".%03dZ", static_cast<int>(ms % 1000));
  return text;
}

json optional_time(const std::optional<std::chrono::system_clock::time_point>& t) {
  return t ? json(rfc3339(*t)) : json(nullptr);
}

}  // namespace

std::string_view to_string(TransferState state) {
  switch (state) {
    case TransferState::Queued:
      return "Queued";
    case TransferState::Running:
      return "Running";
    case TransferState::Succeeded:
      return "Succeeded";
    case TransferState::Failed:
      return "Failed";
    case TransferState::Cancelled:
      return "Cancelled";
  }
  return "Unknown";
}

Result<TransferRequest> TransferRequest::from_json(const json& body) {
  if (!body.is_object()) return make_error(ErrorCode::InvalidArgument, "the body must be a JSON object");
  if (auto s = only_fields(body, "",
                           {"source", "targets", "op", "chunkBytes", "window", "verify", "deadlineSeconds",
                            "maxBytesPerSecond"});
      !s) {
    return s.error();
  }
  TransferRequest r;

  if (!body.contains("source")) return bad("source", "is required");
  const json& source = body["source"];
  if (!source.is_object()) return bad("source", "must be an object");
  if (auto s = only_fields(source, "source", {"region", "offset", "length"}); !s) return s.error();
  if (!source.contains("region")) return bad("source.region", "is required");
  if (auto s = read_region_name(source, "region", "source.region", r.source_region); !s) return s.error();
  if (r.source_region.empty()) return bad("source.region", "must not be empty");
  if (auto s = read_u64(source, "offset", "source.offset", r.offset); !s) return s.error();
  if (auto s = read_u64(source, "length", "source.length", r.length); !s) return s.error();

  if (!body.contains("targets")) return bad("targets", "is required");
  const json& targets = body["targets"];
  if (!targets.is_array()) return bad("targets", "must be an array");
  if (targets.empty() || targets.size() > kMaxTargets) {
    return bad("targets", "must hold 1 to " + std::to_string(kMaxTargets) + " targets, got " +
                              std::to_string(targets.size()));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto t = parse_target(targets[i], "targets[" + std::to_string(i) + "]");
    if (!t) return t.error();
    r.targets.push_back(std::move(*t));
  }

  std::string op = "write";
  if (auto s = read_string(body, "op", "op", op); !s) return s.error();
  if (op == "read") {
    r.op = OpKind::Read;
    if (r.targets.size() != 1) return bad("targets", "a read takes exactly one target");
  } else if (op != "write") {
    return bad("op", "must be \"write\" or \"read\", got \"" + op + "\"");
  }

  if (auto s = read_u64(body, "chunkBytes", "chunkBytes", r.chunk_bytes, kMinChunk, kMaxChunk); !s) {
    return s.error();
  }
  std::uint64_t window = r.window;
  if (auto s = read_u64(body, "window", "window", window, 1, kMaxWindow); !s) return s.error();
  r.window = static_cast<std::uint32_t>(window);

  std::string verify = "none";
  if (auto s = read_string(body, "verify", "verify", verify); !s) return s.error();
  if (verify == "crc32c") {
    r.verify = Verify::Crc32c;
    for (std::size_t i = 0; i < r.targets.size(); ++i) {
      const std::string path = "targets[" + std::to_string(i) + "]";
      if (r.targets[i].url.empty()) return bad(path + ".url", "is required when verify is crc32c");
      if (r.targets[i].region.empty()) return bad(path + ".region", "is required when verify is crc32c");
    }
  } else if (verify != "none") {
    return bad("verify", "must be \"none\" or \"crc32c\", got \"" + verify + "\"");
  }

  std::uint64_t deadline = 0;
  if (auto s = read_u64(body, "deadlineSeconds", "deadlineSeconds", deadline, 0, kMaxDeadlineSeconds); !s) {
    return s.error();
  }
  r.deadline = std::chrono::seconds(deadline);
  if (auto s =
          read_u64(body, "maxBytesPerSecond", "maxBytesPerSecond", r.max_bytes_per_second, 0, 1ULL << 40);
      !s) {
    return s.error();
  }
  return r;
}

json TransferStatus::to_json() const {
  json target_list = json::array();
  for (const TargetStatus& t : targets) {
    target_list.push_back({{"state", to_string(t.state)},
                           {"bytesDone", t.bytes_done},
                           {"committedBytes", t.committed_bytes},
                           {"lastError", t.last_error},
                           {"staged", t.staged}});
  }
  return {{"id", id},
          {"state", to_string(state)},
          {"bytesTotal", bytes_total},
          {"bytesDone", bytes_done},
          {"throughputBytesPerSecond", throughput_bytes_per_second},
          {"retries", retries},
          {"slicesResent", slices_resent},
          {"verified", verified},
          {"gpuPath", gpu_path},
          {"sourceNics", source_nics},
          {"reason", reason},
          {"message", message},
          {"targets", std::move(target_list)},
          {"createdAt", rfc3339(created_at)},
          {"startedAt", optional_time(started_at)},
          {"finishedAt", optional_time(finished_at)}};
}

}  // namespace conduit::agent
