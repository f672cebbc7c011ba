#include "conduit/api/transfer.h"

namespace conduit::api {

using json = nlohmann::json;

json TransferRequest::to_json() const {
  json out_targets = json::array();
  for (const auto& t : targets) {
    json target{{"grant", t.key},
                {"offset", t.offset},
                {"url", t.url},
                {"region", t.region},
                {"regionOffset", t.region_offset},
                {"resumeOffset", t.resume_offset}};
    if (!t.grant_id.empty()) target["grantId"] = t.grant_id;
    if (t.ring_bytes > 0) target["ringBytes"] = t.ring_bytes;
    if (t.save) target["save"] = true;
    if (t.release_grant) target["releaseGrant"] = true;
    out_targets.push_back(std::move(target));
  }
  json source{{"offset", offset}, {"length", length}};
  if (source_file.empty()) {
    source["region"] = source_region;
  } else {
    source["file"] = source_file;
  }
  if (!follow_grant.empty()) source["followGrant"] = follow_grant;
  if (!source_pod.empty()) source["pod"] = source_pod;
  json body{{"source", std::move(source)},
            {"targets", std::move(out_targets)},
            {"op", op},
            {"chunkBytes", chunk_bytes},
            {"window", window},
            {"verify", verify ? "crc32c" : "none"},
            {"deadlineSeconds", deadline_seconds},
            {"maxBytesPerSecond", max_bytes_per_second}};
  if (chain) body["strategy"] = "chain";
  if (!ns.empty()) body["namespace"] = ns;
  if (!ops.empty()) {
    json list = json::array();
    for (const auto& op : ops)
      list.push_back(
          {{"sourceOffset", op.source_offset}, {"targetOffset", op.target_offset}, {"length", op.length}});
    body["ops"] = std::move(list);
  }
  return body;
}

namespace {

std::optional<std::string> time_or_null(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

TransferStatus TransferStatus::from_json(const json& body) {
  TransferStatus t;
  if (!body.is_object()) return t;
  t.id = body.value("id", "");
  t.state = body.value("state", "");
  t.bytes_total = body.value("bytesTotal", std::uint64_t{0});
  t.bytes_done = body.value("bytesDone", std::uint64_t{0});
  t.throughput = body.value("throughputBytesPerSecond", 0.0);
  t.retries = body.value("retries", 0U);
  t.slices_resent = body.value("slicesResent", 0U);
  t.verified = body.value("verified", false);
  t.reason = body.value("reason", "");
  t.message = body.value("message", "");
  // Only the values the spec (and the TransferJob CRD) allows: the status schema would refuse anything
  // else, and the field is a statement about the path, not free text.
  const std::string gpu_path =
      body.contains("gpuPath") && body["gpuPath"].is_string() ? body["gpuPath"].get<std::string>() : "";
  if (gpu_path == "none" || gpu_path == "dmabuf" || gpu_path == "peermem" || gpu_path == "staged") {
    t.gpu_path = gpu_path;
  }
  if (body.contains("sourceNics") && body["sourceNics"].is_array()) {
    for (const auto& nic : body["sourceNics"]) {
      if (nic.is_string()) t.source_nics.push_back(nic.get<std::string>());
    }
  }
  if (body.contains("targets") && body["targets"].is_array()) {
    for (const auto& target : body["targets"]) {
      if (!target.is_object()) {
        t.targets.emplace_back();  // keeps the others at their spec.targets index
        continue;
      }
      t.targets.push_back({target.value("state", ""), target.value("bytesDone", std::uint64_t{0}),
                           target.value("lastError", ""), target.value("committedBytes", std::uint64_t{0}),
                           target.value("staged", false)});
    }
  }
  if (const auto it = body.find("stages"); it != body.end() && it->is_object()) {
    t.stages.read = it->value("readSeconds", 0.0);
    t.stages.wire = it->value("wireSeconds", 0.0);
    t.stages.land = it->value("landSeconds", 0.0);
    t.stages.commit = it->value("commitSeconds", 0.0);
  }
  t.created_at = body.value("createdAt", "");
  t.started_at = time_or_null(body, "startedAt");
  t.finished_at = time_or_null(body, "finishedAt");
  return t;
}

json TransferStatus::to_json() const {
  json out_targets = json::array();
  for (const auto& target : targets) {
    out_targets.push_back({{"state", target.state},
                           {"bytesDone", target.bytes_done},
                           {"committedBytes", target.committed_bytes},
                           {"lastError", target.last_error},
                           {"staged", target.staged}});
  }
  json out{{"id", id},
           {"state", state},
           {"bytesTotal", bytes_total},
           {"bytesDone", bytes_done},
           {"throughputBytesPerSecond", throughput},
           {"retries", retries},
           {"slicesResent", slices_resent},
           {"verified", verified},
           {"sourceNics", source_nics},
           {"reason", reason},
           {"message", message},
           {"targets", std::move(out_targets)},
           {"stages",
            {{"readSeconds", stages.read},
             {"wireSeconds", stages.wire},
             {"landSeconds", stages.land},
             {"commitSeconds", stages.commit}}},
           {"createdAt", created_at},
           {"startedAt", started_at ? json(*started_at) : json(nullptr)},
           {"finishedAt", finished_at ? json(*finished_at) : json(nullptr)}};
  if (!gpu_path.empty()) out["gpuPath"] = gpu_path;
  return out;
}

bool TransferStatus::any_staged() const {
  if (gpu_path == "staged") return true;
  for (const auto& target : targets) {
    if (target.staged) return true;
  }
  return false;
}

}  // namespace conduit::api
