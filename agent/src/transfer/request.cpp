// The wire forms of a transfer: the strict parser of POST /v1/transfers bodies and the status JSON.
#include <ctime>
#include <set>

#include "conduit/common/json_fields.h"
#include "conduit/common/time.h"
#include "tenancy.h"
#include "transfer/manager.h"

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

// A region name field: absent or empty reads as "", anything else must be a valid name.
std::string region_name(JsonFields& fields, const char* key) {
  std::string name = fields.string(key).value_or("");
  if (fields.ok() && !name.empty()) {
    if (auto valid = validate_name(name); !valid) fields.fail(key, valid.error().message);
  }
  return name;
}

Result<TransferTarget> parse_target(const json& j, const std::string& path) {
  JsonFields fields(j, path);
  fields.only({"grant", "offset", "url", "region", "regionOffset", "resumeOffset", "grantId", "ringBytes",
               "save", "releaseGrant"});
  TransferTarget t;
  if (fields.ok() && !fields.has("grant")) fields.fail("grant", "is required");
  if (!fields.ok()) return fields.status().error();
  auto key = RemoteKey::from_json(j["grant"]);
  if (!key) return bad(path + ".grant", key.error().message);
  t.grant = std::move(*key);
  t.offset = fields.u64("offset").value_or(t.offset);
  t.url = fields.string("url").value_or("");
  if (fields.ok() && !t.url.empty() && !t.url.starts_with("http://") && !t.url.starts_with("https://")) {
    fields.fail("url", "must start with http:// or https://");
  }
  // Agents authenticate to each other with certificates or the token, never with a URL's user:password@,
  // which would otherwise reach every log line and error that names the target.
  if (const auto authority = t.url.substr(0, t.url.find('/', t.url.find("://") + 3));
      fields.ok() && authority.find('@') != std::string::npos) {
    fields.fail("url", "must not carry user:password@ (agents authenticate with certificates or the token)");
  }
  t.region = region_name(fields, "region");
  t.region_offset = fields.u64("regionOffset").value_or(t.region_offset);
  t.resume_offset = fields.u64("resumeOffset").value_or(t.resume_offset);
  t.grant_id = fields.string("grantId").value_or("");
  t.ring_bytes = fields.u64("ringBytes").value_or(0);
  t.save = fields.boolean("save").value_or(false);
  t.release_grant = fields.boolean("releaseGrant").value_or(false);
  if (!fields.ok()) return fields.status().error();
  if (t.release_grant && (t.grant_id.empty() || t.url.empty())) {
    return bad(path + ".releaseGrant", "needs grantId and url: the grant to revoke, and where");
  }
  if ((t.save || t.ring_bytes > 0) && (t.grant_id.empty() || t.url.empty())) {
    return bad(path, "grantId and url are needed for a target that saves a file or is a ring");
  }
  if (t.ring_bytes > 0) {
    if (t.ring_bytes > t.grant.length) return bad(path + ".ringBytes", "is larger than the grant");
    if (t.offset != 0 || t.resume_offset != 0)
      return bad(path, "a ring target takes the whole stream: offset and resumeOffset must be 0");
  }
  if (t.save && t.resume_offset != 0) {
    return bad(path + ".resumeOffset", "a target that saves a file as bytes land starts at 0");
  }
  return t;
}

json optional_time(const std::optional<std::chrono::system_clock::time_point>& t) {
  return t ? json(format_rfc3339(*t, TimePrecision::Millis)) : json(nullptr);
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
  JsonFields fields(body, "");
  fields.only({"source", "targets", "op", "strategy", "chunkBytes", "window", "verify", "deadlineSeconds",
               "maxBytesPerSecond", "ops", "opsPacked", "namespace"});
  TransferRequest r;
  r.job_namespace = parse_job_namespace(fields);

  const json* source = fields.object("source", Need::Required);
  if (!fields.ok()) return fields.status().error();
  JsonFields src(*source, "source");
  src.only({"region", "file", "offset", "length", "followGrant", "pod"});
  r.source_pod = parse_pod(src);
  if (src.ok() && src.has("region") == src.has("file"))
    src.fail("region", "give exactly one of region or file");
  r.source_region = region_name(src, "region");
  r.source_file = src.string("file").value_or("");
  if (src.ok() && r.source_region.empty() && r.source_file.empty()) src.fail("region", "must not be empty");
  const bool src_has_range = src.has("offset") || src.has("length");
  r.offset = src.u64("offset").value_or(r.offset);
  r.length = src.u64("length").value_or(r.length);
  r.follow_grant = src.string("followGrant").value_or("");
  if (src.ok() && !r.follow_grant.empty() && (r.source_region.empty() || r.length == 0))
    src.fail("followGrant", "forwards what lands in a region: give source.region and source.length");
  if (!src.ok()) return src.status().error();

  const json* targets = fields.array("targets", Need::Required);
  if (!fields.ok()) return fields.status().error();
  if (targets->empty() || targets->size() > kMaxTargets) {
    return bad("targets", "must hold 1 to " + std::to_string(kMaxTargets) + " targets, got " +
                              std::to_string(targets->size()));
  }
  for (std::size_t i = 0; i < targets->size(); ++i) {
    auto t = parse_target((*targets)[i], "targets[" + std::to_string(i) + "]");
    if (!t) return t.error();
    r.targets.push_back(std::move(*t));
  }

  const std::string op = fields.string("op").value_or("write");
  if (!fields.ok()) return fields.status().error();
  if (op == "read") {
    r.op = OpKind::Read;
    if (r.targets.size() != 1) return bad("targets", "a read takes exactly one target");
    if (!r.source_file.empty()) return bad("source.file", "a read lands in a region, not a file");
    if (r.targets[0].save || r.targets[0].ring_bytes > 0)
      return bad("targets[0]", "a read cannot save or ring its target");
  } else if (op != "write") {
    return bad("op", "must be \"write\" or \"read\", got \"" + op + "\"");
  }

  const std::string strategy = fields.string("strategy").value_or("fanout");
  if (!fields.ok()) return fields.status().error();
  if (strategy == "chain") {
    r.chain = true;
    if (r.op != OpKind::Write) return bad("strategy", "a chain writes: op must be \"write\"");
    // Each hop forwards from its region what landed there, told so by landing reports to its grant.
    for (std::size_t i = 0; i < r.targets.size(); ++i) {
      const auto& t = r.targets[i];
      const std::string path = "targets[" + std::to_string(i) + "]";
      if (t.url.empty() || t.grant_id.empty() || t.region.empty())
        return bad(path, "a chain hop needs url, grantId and region: the next hop is fed from that region");
      if (t.ring_bytes > 0 || t.offset != 0 || t.region_offset != 0)
        return bad(path, "a chain hop takes the whole range into its region from offset 0 (no ring)");
      if (t.grant.staged) return bad(path, "a chain hop's region must be host memory (the grant is staged)");
    }
  } else if (strategy != "fanout") {
    return bad("strategy", "must be \"fanout\" or \"chain\", got \"" + strategy + "\"");
  }
  if (!r.follow_grant.empty() && r.op != OpKind::Write) return bad("source.followGrant", "forwarding writes");

  r.chunk_bytes = fields.u64("chunkBytes", Need::Optional, kMinChunk, kMaxChunk).value_or(r.chunk_bytes);
  r.window =
      static_cast<std::uint32_t>(fields.u64("window", Need::Optional, 1, kMaxWindow).value_or(r.window));
  const std::string verify = fields.string("verify").value_or("none");
  if (!fields.ok()) return fields.status().error();
  if (verify == "crc32c") {
    r.verify = Verify::Crc32c;
    for (std::size_t i = 0; i < r.targets.size(); ++i) {
      const std::string path = "targets[" + std::to_string(i) + "]";
      if (r.targets[i].url.empty()) return bad(path + ".url", "is required when verify is crc32c");
      // Verified as it lands (grantId), or afterwards by comparing the region's checksums.
      if (r.targets[i].region.empty() && r.targets[i].grant_id.empty())
        return bad(path + ".region", "is required when verify is crc32c (or grantId)");
    }
  } else if (verify != "none") {
    return bad("verify", "must be \"none\" or \"crc32c\", got \"" + verify + "\"");
  }

  r.deadline =
      std::chrono::seconds(fields.u64("deadlineSeconds", Need::Optional, 0, kMaxDeadlineSeconds).value_or(0));
  r.max_bytes_per_second =
      fields.u64("maxBytesPerSecond", Need::Optional, 0, 1ULL << 40).value_or(r.max_bytes_per_second);
  if (!fields.ok()) return fields.status().error();

  if (body.contains("ops") && body.contains("opsPacked"))
    return bad("opsPacked", "give ops or opsPacked, not both");
  if (body.contains("ops") || body.contains("opsPacked")) {
    auto ops =
        body.contains("ops") ? parse_scatter_ops(body["ops"]) : parse_packed_scatter_ops(body["opsPacked"]);
    if (!ops) return ops.error();
    r.ops = std::move(*ops);
    // One batch between the region and one grant: nothing else of a range transfer applies.
    if (r.source_region.empty())
      return bad("ops", "need source.region (a file is read in order, not scattered)");
    if (src_has_range) return bad("ops", "give the ranges in ops, not source.offset or source.length");
    if (r.targets.size() != 1) return bad("ops", "go to exactly one target");
    const TransferTarget& t = r.targets[0];
    // A grantId only to release the grant at the end: an op list takes no landing reports.
    if (t.offset != 0 || t.resume_offset != 0 || t.ring_bytes > 0 || t.save ||
        (!t.grant_id.empty() && !t.release_grant))
      return bad("ops",
                 "the target takes only grant and url (and grantId with releaseGrant): offsets are the "
                 "ops' own, and an op list is neither reported, resumed, ringed nor saved");
    if (r.chain || !r.follow_grant.empty()) return bad("ops", "are not forwarded along a chain");
    if (r.verify != Verify::None)
      return bad("ops", "take verify none (compare the regions' checksums after)");
    if (r.max_bytes_per_second != 0) return bad("ops", "are not paced: leave out maxBytesPerSecond");
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
  const json stage_seconds{{"readSeconds", stages.read},
                           {"wireSeconds", stages.wire},
                           {"landSeconds", stages.land},
                           {"commitSeconds", stages.commit}};
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
          {"stages", stage_seconds},
          {"createdAt", format_rfc3339(created_at, TimePrecision::Millis)},
          {"startedAt", optional_time(started_at)},
          {"finishedAt", optional_time(finished_at)}};
}

}  // namespace conduit::agent
