// The wire forms of a transfer: the strict reader of POST /v1/transfers bodies (the agent's), its writer
// (every client's) and the status every transfer route answers.
#include "conduit/api/transfer.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "conduit/api/names.h"
#include "conduit/common/base64.h"
#include "conduit/common/json_fields.h"
#include "conduit/common/little_endian.h"

namespace conduit::api {

using json = nlohmann::json;

namespace {

constexpr std::uint64_t kMinChunk = 4ULL << 10;
constexpr std::uint64_t kMaxChunk = 64ULL << 20;
constexpr std::uint32_t kMaxWindow = 256;
constexpr std::size_t kMaxTargets = 16;
constexpr std::uint64_t kMaxDeadlineSeconds = 7 * 24 * 3600;

Error bad(const std::string& path, const std::string& why) {
  return make_error(ErrorCode::InvalidArgument, path + ": " + why);
}

// The limits both forms of the op list share, worded alike.
Error op_count_error(const std::string& field, std::size_t got) {
  return bad(field, "must hold 1 to " + std::to_string(kMaxScatterOps) + " ops, got " + std::to_string(got));
}
Error total_error(std::size_t i) {
  return bad("ops", "more than " + std::to_string(kMaxScatterBytes) + " bytes in all (up to ops[" +
                        std::to_string(i) + "]): split the request");
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
  // What a key holds is the transport's to read (the agent does, resolving the request); here only its shape.
  if (!j["grant"].is_object()) return bad(path + ".grant", "must be a JSON object");
  t.grant = j["grant"];
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
    if (t.offset != 0 || t.resume_offset != 0)
      return bad(path, "a ring target takes the whole stream: offset and resumeOffset must be 0");
  }
  if (t.save && t.resume_offset != 0) {
    return bad(path + ".resumeOffset", "a target that saves a file as bytes land starts at 0");
  }
  return t;
}

}  // namespace

Result<TransferRequest> TransferRequest::from_json(const json& body) {
  if (!body.is_object()) return make_error(ErrorCode::InvalidArgument, "the body must be a JSON object");
  JsonFields fields(body, "");
  fields.only({"source", "targets", "op", "strategy", "chunkBytes", "window", "verify", "deadlineSeconds",
               "maxBytesPerSecond", "ops", "opsPacked", "namespace", "manifest"});
  TransferRequest r;
  r.ns = parse_namespace(fields);

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

  r.deadline_seconds = fields.u64("deadlineSeconds", Need::Optional, 0, kMaxDeadlineSeconds).value_or(0);
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
    // A grantId to release the grant at the end, or to ask its agent for the sum of the ops' ranges
    // (verify crc32c): an op list takes no landing reports.
    if (t.offset != 0 || t.resume_offset != 0 || t.ring_bytes > 0 || t.save ||
        (!t.grant_id.empty() && !t.release_grant && r.verify == Verify::None))
      return bad("ops",
                 "the target takes only grant and url (and grantId with releaseGrant or verify crc32c): "
                 "offsets are the ops' own, and an op list is neither reported, resumed, ringed nor saved");
    if (r.chain || !r.follow_grant.empty()) return bad("ops", "are not forwarded along a chain");
    if (r.verify == Verify::Crc32c && t.grant_id.empty())
      return bad("targets[0].grantId",
                 "is required when ops are verified: the grant's agent sums the ops' ranges of that grant");
    if (r.max_bytes_per_second != 0) return bad("ops", "are not paced: leave out maxBytesPerSecond");
  }
  if (body.contains("manifest")) {
    if (!r.ops.empty()) return bad("manifest", "a scatter write keeps the target's manifest: leave it out");
    if (r.op != OpKind::Write) return bad("manifest", "goes with a write: op must be \"write\"");
    // Region offsets: whether it fits is each target's to say, against its region, at the commit.
    auto manifest = Manifest::from_json(body["manifest"], static_cast<std::uint64_t>(INT64_MAX));
    if (!manifest) return bad("manifest", manifest.error().message);
    r.manifest = std::move(*manifest);
  }
  return r;
}

Status check_scatter_op_limits(std::span<const ScatterOp> ops) {
  std::uint64_t runs = 0, total = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ScatterOp& op = ops[i];
    const std::string name = "ops[" + std::to_string(i) + "]";
    if (op.length == 0) return bad(name + ".length", "must be at least 1");
    if (op.count == 0) return bad(name + ".count", "must be at least 1");
    if (op.count > 1) {
      for (const auto& [field, stride] :
           {std::pair{".sourceStride", op.source_stride}, std::pair{".targetStride", op.target_stride}}) {
        if (stride < op.length) {
          return bad(name + field, "must be at least the op's length (" + std::to_string(op.length) +
                                       ") when count is above 1, got " + std::to_string(stride));
        }
      }
    }
    if (op.count > kMaxScatterRuns - runs) {
      return bad("ops", "more than " + std::to_string(kMaxScatterRuns) + " runs in all (up to " + name +
                            ", count " + std::to_string(op.count) + "): split the request");
    }
    runs += op.count;
    // length * count in 128 bits: both are client values, and the product may pass 2^64.
    const unsigned __int128 bytes = static_cast<unsigned __int128>(op.length) * op.count;
    if (bytes > kMaxScatterBytes - total) return total_error(i);
    total += static_cast<std::uint64_t>(bytes);
  }
  return {};
}

Result<std::vector<ScatterOp>> parse_scatter_ops(const nlohmann::json& ops) {
  if (!ops.is_array()) return bad("ops", "must be an array");
  if (ops.empty() || ops.size() > kMaxScatterOps) return op_count_error("ops", ops.size());
  std::vector<ScatterOp> out;
  out.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    // Thousands per request: the common, well-formed op is read directly; anything else goes through the
    // strict reader, which names the field and what is wrong with it. The limits of the list are checked
    // once at the end, alike for both.
    const nlohmann::json& j = ops[i];
    if (j.is_object() && j.size() == 3) {
      const auto s = j.find("sourceOffset"), t = j.find("targetOffset"), n = j.find("length");
      if (s != j.end() && t != j.end() && n != j.end() && s->is_number_unsigned() &&
          t->is_number_unsigned() && n->is_number_unsigned()) {
        out.push_back({s->get<std::uint64_t>(), t->get<std::uint64_t>(), n->get<std::uint64_t>()});
        continue;
      }
    }
    JsonFields f(ops[i], "ops[" + std::to_string(i) + "]");
    f.only({"sourceOffset", "targetOffset", "length", "count", "sourceStride", "targetStride"});
    ScatterOp op;
    op.source_offset = f.u64("sourceOffset", Need::Required).value_or(0);
    op.target_offset = f.u64("targetOffset", Need::Required).value_or(0);
    op.length = f.u64("length", Need::Required, 1, kMaxScatterBytes).value_or(0);
    op.count = f.u64("count", Need::Optional, 1, kMaxScatterRuns).value_or(1);
    const Need strides = op.count > 1 ? Need::Required : Need::Optional;
    op.source_stride = f.u64("sourceStride", strides).value_or(0);
    op.target_stride = f.u64("targetStride", strides).value_or(0);
    if (!f.ok()) return f.status().error();
    out.push_back(op);
  }
  if (auto ok = check_scatter_op_limits(out); !ok) return ok.error();
  return out;
}

namespace {

constexpr std::size_t kPackedV1Op = 3 * sizeof(std::uint64_t);
constexpr std::size_t kPackedV2Op = 6 * sizeof(std::uint64_t);
constexpr char kPackedV2Header[8] = {'C', 'O', 'P', 'S', 2, 0, 0, 0};  // "COPS", little-endian uint32 2

}  // namespace

Result<std::vector<ScatterOp>> parse_packed_scatter_ops(const nlohmann::json& packed) {
  if (!packed.is_string()) return bad("opsPacked", "must be a base64 string");
  auto bytes = base64_decode(packed.get_ref<const std::string&>());
  if (!bytes) return bad("opsPacked", bytes.error().message);
  // v2 is 8 bytes past a multiple of 24 (the header, then 48-byte ops), v1 a multiple of 24: the length
  // alone says which.
  const bool v2 = bytes->size() % kPackedV1Op == sizeof kPackedV2Header;
  const std::size_t header = v2 ? sizeof kPackedV2Header : 0;
  const std::size_t op_bytes = v2 ? kPackedV2Op : kPackedV1Op;
  if (v2 && std::string_view(bytes->data(), header) != std::string_view(kPackedV2Header, header)) {
    return bad("opsPacked",
               "a layout of 8 bytes past whole 24-byte ops must start with the v2 header \"COPS\" and the "
               "little-endian uint32 2");
  }
  if (bytes->size() == header || (bytes->size() - header) % op_bytes != 0) {
    return bad("opsPacked",
               "must decode to whole ops of 24 bytes (three little-endian uint64: sourceOffset, "
               "targetOffset, length), or the v2 header and whole ops of 48 bytes (six: sourceOffset, "
               "targetOffset, length, count, sourceStride, targetStride), got " +
                   std::to_string(bytes->size()) + " bytes");
  }
  const std::size_t count = (bytes->size() - header) / op_bytes;
  if (count > kMaxScatterOps) return op_count_error("opsPacked", count);
  const auto* in = reinterpret_cast<const unsigned char*>(bytes->data()) + header;
  auto u64 = [&in] {
    const std::uint64_t v = load_le64(in);
    in += sizeof(std::uint64_t);
    return v;
  };
  std::vector<ScatterOp> out(count);
  for (ScatterOp& op : out) {
    op.source_offset = u64();
    op.target_offset = u64();
    op.length = u64();
    if (v2) {
      op.count = u64();
      op.source_stride = u64();
      op.target_stride = u64();
    }
  }
  if (auto ok = check_scatter_op_limits(out); !ok) return ok.error();
  return out;
}

std::string pack_scatter_ops(std::span<const ScatterOp> ops) {
  const bool v2 = std::any_of(ops.begin(), ops.end(), [](const ScatterOp& op) { return op.count != 1; });
  std::string bytes;
  bytes.reserve((v2 ? sizeof kPackedV2Header : 0) + ops.size() * (v2 ? kPackedV2Op : kPackedV1Op));
  if (v2) bytes.append(kPackedV2Header, sizeof kPackedV2Header);
  const auto put = [&bytes](std::uint64_t v) {
    for (int b = 0; b < 8; ++b, v >>= 8) bytes.push_back(static_cast<char>(v & 0xff));  // little-endian
  };
  for (const ScatterOp& op : ops) {
    put(op.source_offset);
    put(op.target_offset);
    put(op.length);
    if (v2) {
      put(op.count);
      put(op.source_stride);
      put(op.target_stride);
    }
  }
  return base64_encode(bytes);
}

json TransferRequest::to_json() const {
  json out_targets = json::array();
  for (const auto& t : targets) {
    json target{{"grant", t.grant},
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
  // An op list carries its own offsets: the agent refuses a range beside it.
  json source = ops.empty() ? json{{"offset", offset}, {"length", length}} : json::object();
  if (source_file.empty()) {
    source["region"] = source_region;
  } else {
    source["file"] = source_file;
  }
  if (!follow_grant.empty()) source["followGrant"] = follow_grant;
  if (!source_pod.empty()) source["pod"] = source_pod;
  json body{{"source", std::move(source)},
            {"targets", std::move(out_targets)},
            {"op", op == OpKind::Read ? "read" : "write"},
            {"chunkBytes", chunk_bytes},
            {"window", window},
            {"verify", verify == Verify::Crc32c ? "crc32c" : "none"},
            {"deadlineSeconds", deadline_seconds},
            {"maxBytesPerSecond", max_bytes_per_second}};
  if (chain) body["strategy"] = "chain";
  if (!ns.empty()) body["namespace"] = ns;
  if (manifest) body["manifest"] = manifest->to_json();
  if (!ops.empty()) {
    json list = json::array();
    for (const auto& op : ops) {
      json j{{"sourceOffset", op.source_offset}, {"targetOffset", op.target_offset}, {"length", op.length}};
      if (op.count != 1) {
        j["count"] = op.count;
        j["sourceStride"] = op.source_stride;
        j["targetStride"] = op.target_stride;
      }
      list.push_back(std::move(j));
    }
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
  if (const auto it = body.find("path"); it != body.end() && it->is_object()) {
    t.path = TransferPath::from_json(*it);
  }
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
  if (path) out["path"] = path->to_json();
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
