// The wire forms of grants: the strict readers of the bodies the agent is sent (its own), their writers
// (every client's) and the answers as clients read them.
#include "conduit/api/grant.h"

#include <algorithm>
#include <string_view>

#include "conduit/api/names.h"
#include "conduit/common/base64.h"
#include "conduit/common/json_fields.h"
#include "conduit/common/little_endian.h"

namespace conduit::api {

using json = nlohmann::json;

namespace {

constexpr std::uint64_t kMaxTtlSeconds = 24 * 3600;
// A file a grant saves, and so a stream through a grant, is at most 16 TiB.
constexpr std::uint64_t kMaxStreamBytes = std::uint64_t{1} << 44;
constexpr std::uint64_t kMaxReportBytes = std::uint64_t{1} << 40;
constexpr std::size_t kMaxReportSlices = 65536;

// A grant's "peer": a Kubernetes node name (a DNS subdomain: at most 253 characters).
std::string parse_peer(JsonFields& f) {
  auto peer = f.string("peer");
  if (!peer) return {};
  if (peer->empty() || peer->size() > 253) f.fail("peer", "must be a node name of 1 to 253 characters");
  return std::move(*peer);
}

// "ttlSeconds" of a new grant: absent keeps `ttl`.
std::uint64_t parse_ttl(JsonFields& f, std::uint64_t ttl) {
  if (auto seconds = f.u64("ttlSeconds")) {
    if (*seconds == 0 || *seconds > kMaxTtlSeconds) f.fail("ttlSeconds", "must be 1 to 86400");
    ttl = std::min(*seconds, kMaxTtlSeconds);
  }
  return ttl;
}

std::string string_or_empty(const json& body, const char* key) {
  const auto it = body.find(key);
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<GrantRequest> GrantRequest::from_json(const json& body) {
  JsonProblems problems;
  JsonFields f(body, "", problems);
  f.only(
      {"offset", "length", "access", "ttlSeconds", "provider", "save", "writer", "peer", "namespace", "pod"});
  GrantRequest request;
  request.pod = parse_pod(f);
  request.peer = parse_peer(f);
  request.ns = parse_namespace(f);
  if (auto writer = f.string("writer")) {
    if (writer->size() > 253) f.fail("writer", "must be at most 253 characters");
    request.writer = std::move(*writer);
  }
  request.offset = f.u64("offset").value_or(0);
  if (auto length = f.u64("length")) {
    if (*length == 0) f.fail("length", "must be positive (leave it out for the rest of the region)");
    request.length = *length;
  }
  if (auto access = f.string("access", Need::Required)) {
    if (*access != "write" && *access != "read")
      f.fail("access", "must be \"write\" or \"read\", not " + quoted_text(*access));
    request.access = std::move(*access);
  }
  request.ttl_seconds = parse_ttl(f, request.ttl_seconds);
  if (auto provider = f.string("provider")) request.provider = std::move(*provider);
  if (const auto* save = f.object("save")) {
    JsonFields s(*save, "save", problems);
    s.only({"file"});
    if (auto file = s.string("file", Need::Required)) {
      if (file->empty()) s.fail("file", "must not be empty");
      request.save = std::move(*file);
    }
    if (f.ok() && request.access != "write") f.fail("save", "applies only with access write");
  }
  if (!f.ok()) return f.status().error();
  return request;
}

json GrantRequest::to_json() const {
  json body{{"offset", offset}, {"access", access}, {"ttlSeconds", ttl_seconds}};
  if (length) body["length"] = *length;
  if (!provider.empty()) body["provider"] = provider;
  if (!save.empty()) body["save"] = {{"file", save}};
  if (!writer.empty()) body["writer"] = writer;
  if (!peer.empty()) body["peer"] = peer;
  if (!ns.empty()) body["namespace"] = ns;
  if (!pod.empty()) body["pod"] = pod;
  return body;
}

Result<RingGrantRequest> RingGrantRequest::from_json(const json& body) {
  JsonProblems problems;
  JsonFields f(body, "", problems);
  f.only({"ttlSeconds", "provider", "save", "peer", "namespace"});
  RingGrantRequest request;
  request.peer = parse_peer(f);
  request.ns = parse_namespace(f);
  request.ttl_seconds = parse_ttl(f, request.ttl_seconds);
  if (auto provider = f.string("provider")) request.provider = std::move(*provider);
  if (const auto* save = f.object("save", Need::Required)) {
    JsonFields s(*save, "save", problems);
    s.only({"file", "bytes"});
    if (auto file = s.string("file", Need::Required)) {
      if (file->empty()) s.fail("file", "must not be empty");
      request.save = std::move(*file);
    }
    request.bytes = s.u64("bytes", Need::Required, 1, kMaxStreamBytes).value_or(0);
  }
  if (!f.ok()) return f.status().error();
  return request;
}

json RingGrantRequest::to_json() const {
  json body{{"ttlSeconds", ttl_seconds}, {"save", {{"file", save}, {"bytes", bytes}}}};
  if (!provider.empty()) body["provider"] = provider;
  if (!peer.empty()) body["peer"] = peer;
  if (!ns.empty()) body["namespace"] = ns;
  return body;
}

Result<RenewGrant> RenewGrant::from_json(const json& body) {
  JsonFields f(body, "");
  f.only({"ttlSeconds"});
  const auto ttl = f.u64("ttlSeconds", Need::Required, 1, kMaxTtlSeconds);
  if (!f.ok()) return f.status().error();
  return RenewGrant{.ttl_seconds = *ttl};
}

json RenewGrant::to_json() const { return {{"ttlSeconds", ttl_seconds}}; }

Result<LandedReport> LandedReport::from_json(const json& body) {
  JsonFields f(body, "");
  f.only({"offset", "length", "slice", "crc32c", "waitForPrevious"});
  LandedReport report;
  report.offset = f.u64("offset", Need::Required).value_or(0);
  report.wait_for_previous = f.boolean("waitForPrevious").value_or(false);
  report.length = f.u64("length", Need::Required, 1, kMaxReportBytes).value_or(0);
  report.slice = f.u64("slice", Need::Optional, 1, kMaxReportBytes).value_or(0);
  if (const auto* crcs = f.array("crc32c")) {
    if (crcs->size() > kMaxReportSlices) f.fail("crc32c", "at most 65536 checksums");
    for (std::size_t i = 0; f.ok() && i < crcs->size(); ++i) {
      const auto& c = (*crcs)[i];
      if (!c.is_number_unsigned() || c.get<std::uint64_t>() > 0xffffffffULL) {
        f.fail("crc32c", "item " + std::to_string(i) + " must be an unsigned 32-bit integer");
      } else {
        report.crc32c.push_back(static_cast<std::uint32_t>(c.get<std::uint64_t>()));
      }
    }
    if (f.ok() && !report.crc32c.empty() && report.slice == 0) f.fail("slice", "is required with crc32c");
  }
  if (!f.ok()) return f.status().error();
  return report;
}

json LandedReport::to_json() const {
  json body{{"offset", offset}, {"length", length}};
  if (!crc32c.empty()) {
    body["slice"] = slice;
    body["crc32c"] = crc32c;
  }
  if (wait_for_previous) body["waitForPrevious"] = true;
  return body;
}

Result<Landed> Landed::from_json(const json& body) {
  const auto bad = [] {
    return make_error(ErrorCode::InvalidArgument,
                      "a landed answer needs mismatched (slice indices) and saved");
  };
  if (!body.is_object()) return bad();
  const auto mismatched = body.find("mismatched");
  const auto saved = body.find("saved");
  if (mismatched == body.end() || !mismatched->is_array() || saved == body.end() || !saved->is_boolean())
    return bad();
  Landed out;
  out.saved = saved->get<bool>();
  for (const auto& i : *mismatched) {
    if (!i.is_number_unsigned()) return bad();
    out.mismatched.push_back(i.get<std::uint64_t>());
  }
  return out;
}

Result<CommitRequest> CommitRequest::from_json(const json& body) {
  JsonFields f(body, "");
  f.only({"bytes", "manifest", "version"});
  const auto bytes = f.u64("bytes", Need::Required, 1, kMaxStreamBytes);
  const auto version = f.u64("version", Need::Optional, 1);
  if (!f.ok()) return f.status().error();
  CommitRequest request{.bytes = *bytes, .version = version};
  if (body.contains("manifest")) {
    // Checked here as a manifest; whether it fits the region is the route's to say.
    auto manifest = Manifest::from_json(body["manifest"], kMaxStreamBytes);
    if (!manifest) return make_error(ErrorCode::InvalidArgument, "manifest: " + manifest.error().message);
    request.manifest = std::move(*manifest);
  }
  return request;
}

json CommitRequest::to_json() const {
  json body{{"bytes", bytes}};
  if (manifest) body["manifest"] = manifest->to_json();
  if (version) body["version"] = *version;
  return body;
}

namespace {

constexpr std::size_t kRangeV1 = 2 * sizeof(std::uint64_t);
constexpr std::size_t kRangeV2 = 4 * sizeof(std::uint64_t);
constexpr char kRangesV2Header[8] = {'C', 'R', 'N', 'G', 2, 0, 0, 0};  // "CRNG", little-endian uint32 2

}  // namespace

Result<GrantChecksumRequest> GrantChecksumRequest::from_json(const json& body) {
  JsonFields f(body, "");
  f.only({"rangesPacked"});
  const auto packed = f.string("rangesPacked", Need::Required);
  if (!f.ok()) return f.status().error();
  const auto bad = [](const std::string& why) {
    return make_error(ErrorCode::InvalidArgument, "rangesPacked: " + why);
  };
  auto bytes = base64_decode(*packed);
  if (!bytes) return bad(bytes.error().message);
  const bool v2 = bytes->size() % kRangeV1 == sizeof kRangesV2Header;  // v1 is whole 16-byte ranges
  const std::size_t header = v2 ? sizeof kRangesV2Header : 0;
  const std::size_t range_bytes = v2 ? kRangeV2 : kRangeV1;
  if (v2 && std::string_view(bytes->data(), header) != std::string_view(kRangesV2Header, header))
    return bad("a layout of 8 bytes past whole 16-byte ranges must start with the v2 header \"CRNG\" 2");
  if (bytes->size() == header || (bytes->size() - header) % range_bytes != 0) {
    return bad(
        "must decode to whole ranges of 16 bytes (two little-endian uint64: offset, length), or the v2 "
        "header and whole ranges of 32 bytes (four: offset, length, count, stride), got " +
        std::to_string(bytes->size()) + " bytes");
  }
  const std::size_t count = (bytes->size() - header) / range_bytes;
  if (count > kMaxScatterOps) {
    return bad("must hold 1 to " + std::to_string(kMaxScatterOps) + " ranges, got " + std::to_string(count));
  }
  const auto* in = reinterpret_cast<const unsigned char*>(bytes->data()) + header;
  auto u64 = [&in] {
    const std::uint64_t v = load_le64(in);
    in += sizeof(std::uint64_t);
    return v;
  };
  GrantChecksumRequest request;
  request.ranges.resize(count);
  std::uint64_t total = 0, runs = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Range& r = request.ranges[i];
    r.offset = u64();
    r.length = u64();
    if (v2) {
      r.count = u64();
      r.stride = u64();
    }
    const std::string name = "range " + std::to_string(i);
    if (r.length == 0) return bad(name + ": length must be at least 1");
    if (r.count == 0) return bad(name + ": count must be at least 1");
    if (r.count > 1 && r.stride < r.length)
      return bad(name + ": stride must be at least the length (" + std::to_string(r.length) + "), got " +
                 std::to_string(r.stride));
    if (r.count > kMaxScatterRuns - runs)
      return bad("more than " + std::to_string(kMaxScatterRuns) + " runs in all (up to " + name + ")");
    runs += r.count;
    const unsigned __int128 range_total = static_cast<unsigned __int128>(r.length) * r.count;
    if (range_total > kMaxScatterBytes - total)
      return bad("more than " + std::to_string(kMaxScatterBytes) + " bytes in all (up to " + name + ")");
    total += static_cast<std::uint64_t>(range_total);
  }
  return request;
}

json GrantChecksumRequest::to_json() const {
  const bool v2 = std::any_of(ranges.begin(), ranges.end(), [](const Range& r) { return r.count != 1; });
  std::string raw;
  raw.reserve((v2 ? sizeof kRangesV2Header : 0) + ranges.size() * (v2 ? kRangeV2 : kRangeV1));
  if (v2) raw.append(kRangesV2Header, sizeof kRangesV2Header);
  const auto put = [&raw](std::uint64_t v) {
    for (int b = 0; b < 8; ++b, v >>= 8) raw.push_back(static_cast<char>(v & 0xff));
  };
  for (const Range& r : ranges) {
    put(r.offset);
    put(r.length);
    if (v2) {
      put(r.count);
      put(r.stride);
    }
  }
  return {{"rangesPacked", base64_encode(raw)}};
}

Result<GrantChecksum> GrantChecksum::from_json(const json& body) {
  const auto bad = [] {
    return make_error(ErrorCode::InvalidArgument,
                      "a grant checksum answer needs grant, ranges, bytes and crc32c");
  };
  if (!body.is_object()) return bad();
  const auto crc = body.find("crc32c");
  if (crc == body.end() || !crc->is_number_unsigned() || crc->get<std::uint64_t>() > 0xffffffffULL)
    return bad();
  GrantChecksum out;
  out.grant = string_or_empty(body, "grant");
  out.ranges = body.value("ranges", std::uint64_t{0});
  out.bytes = body.value("bytes", std::uint64_t{0});
  out.crc32c = static_cast<std::uint32_t>(crc->get<std::uint64_t>());
  return out;
}

json GrantChecksum::to_json() const {
  return {{"grant", grant}, {"ranges", ranges}, {"bytes", bytes}, {"crc32c", crc32c}};
}

Grant Grant::from_json(const json& body) {
  Grant g;
  if (!body.is_object()) return g;
  g.id = body.value("id", "");
  g.key = body.value("key", json::object());
  g.provider = body.value("provider", "");
  g.region = body.value("region", "");
  g.offset = body.value("offset", std::uint64_t{0});
  g.length = body.value("length", std::uint64_t{0});
  g.access = body.value("access", "");
  g.expires_at = body.value("expiresAt", "");
  g.gpu_path = string_or_empty(body, "gpuPath");
  if (const auto it = body.find("nics"); it != body.end() && it->is_array()) {
    for (const auto& nic : *it) {
      if (nic.is_string()) g.nics.push_back(nic.get<std::string>());
    }
  }
  if (const auto it = body.find("landing"); it != body.end() && it->is_object()) g.landing = *it;
  g.registration_seconds = body.value("registrationSeconds", 0.0);
  g.peer = body.value("peer", "");
  g.ns = body.value("namespace", "");
  return g;
}

json Grant::to_json() const {
  json out{{"id", id},         {"key", key},       {"provider", provider}, {"region", region},
           {"offset", offset}, {"length", length}, {"access", access},     {"expiresAt", expires_at},
           {"nics", nics}};
  if (!gpu_path.empty()) out["gpuPath"] = gpu_path;
  if (takes_reports()) out["landing"] = landing;
  out["registrationSeconds"] = registration_seconds;
  if (!peer.empty()) out["peer"] = peer;
  if (!ns.empty()) out["namespace"] = ns;
  return out;
}

std::string Grant::save_file() const { return takes_reports() ? string_or_empty(landing, "file") : ""; }

}  // namespace conduit::api
