#include "conduit/api/wire.h"

#include <algorithm>

namespace conduit::api {

using json = nlohmann::json;

namespace {

std::string string_or_empty(const json& body, const char* key) {
  const auto it = body.find(key);
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

json CreateRegion::to_json() const {
  json body{{"name", name}, {"bytes", bytes}, {"memory", memory}};
  if (!ns.empty()) body["namespace"] = ns;
  return body;
}

json LoadRegion::to_json() const {
  json body{{"name", name}, {"file", file}, {"mode", "load"}};
  if (!ns.empty()) body["namespace"] = ns;
  return body;
}

bool namespace_admits(const std::string& ns, const std::vector<std::string>& shared_with,
                      const std::string& job_ns) {
  if (ns.empty() || job_ns.empty() || job_ns == ns) return true;
  return std::any_of(shared_with.begin(), shared_with.end(),
                     [&](const std::string& s) { return s == "*" || s == job_ns; });
}

bool pod_admits(const std::string& owner_pod, const std::string& job_ns, const std::string& pod) {
  if (!pod.empty()) return owner_pod == pod;
  return owner_pod.empty() || job_ns.empty();
}

Region Region::from_json(const json& body) {
  Region r;
  if (!body.is_object()) return r;
  r.name = body.value("name", "");
  r.bytes = body.value("bytes", std::uint64_t{0});
  r.memory = body.value("memory", "");
  r.source = body.value("source", "");
  r.users = body.value("users", std::uint64_t{0});
  r.huge_pages = body.value("hugePages", false);
  r.created_at = body.value("createdAt", "");
  if (const auto it = body.find("rails"); it != body.end() && it->is_array()) r.rails = *it;
  r.version = body.value("version", std::uint64_t{0});
  r.updated_by = body.value("updatedBy", "");
  r.updated_at = body.value("updatedAt", "");
  r.ns = body.value("namespace", "");
  if (const auto it = body.find("importedBy"); it != body.end() && it->is_object()) r.imported_by = *it;
  if (const auto it = body.find("sharedWith"); it != body.end() && it->is_array()) {
    for (const auto& item : *it) {
      if (item.is_string()) r.shared_with.push_back(item.get<std::string>());
    }
  }
  return r;
}

json Region::to_json() const {
  json out{{"name", name},   {"bytes", bytes},          {"memory", memory},       {"source", source},
           {"users", users}, {"hugePages", huge_pages}, {"createdAt", created_at}};
  if (!rails.is_null()) out["rails"] = rails;
  out["version"] = version;
  out["updatedBy"] = updated_by;
  if (!updated_at.empty()) out["updatedAt"] = updated_at;
  if (!ns.empty()) out["namespace"] = ns;
  if (!shared_with.empty()) out["sharedWith"] = shared_with;
  if (imported_by.is_object()) out["importedBy"] = imported_by;
  return out;
}

std::vector<Region> regions_from_json(const json& body) {
  std::vector<Region> out;
  if (!body.is_object() || !body.contains("items") || !body["items"].is_array()) return out;
  for (const auto& item : body["items"]) out.push_back(Region::from_json(item));
  return out;
}

json regions_to_json(const std::vector<Region>& regions) {
  json items = json::array();
  for (const auto& r : regions) items.push_back(r.to_json());
  return {{"items", std::move(items)}};
}

json SaveRegion::to_json() const {
  json body{{"file", file}};
  if (!ns.empty()) body["namespace"] = ns;
  return body;
}

SaveResult SaveResult::from_json(const json& body) {
  SaveResult s;
  if (!body.is_object()) return s;
  s.region = body.value("region", "");
  s.file = body.value("file", "");
  s.bytes = body.value("bytes", std::uint64_t{0});
  return s;
}

json SaveResult::to_json() const { return {{"region", region}, {"file", file}, {"bytes", bytes}}; }

std::string ChecksumQuery::query_string() const {
  return "offset=" + std::to_string(offset) + "&length=" + std::to_string(length) +
         "&slice=" + std::to_string(slice);
}

Result<Checksum> Checksum::from_json(const json& body) {
  auto malformed = [](const std::string& why) { return make_error(ErrorCode::InvalidArgument, why); };
  if (!body.is_object()) return malformed("not a JSON object");
  const auto it = body.find("crc32c");
  if (it == body.end() || !it->is_array()) return malformed("crc32c must be an array");
  Checksum c;
  c.crc32c.reserve(it->size());
  for (const auto& v : *it) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0xffffffffULL) {
      return malformed("crc32c holds something other than 32-bit unsigned integers");
    }
    c.crc32c.push_back(v.get<std::uint32_t>());
  }
  c.region = body.value("region", "");
  c.offset = body.value("offset", std::uint64_t{0});
  c.length = body.value("length", std::uint64_t{0});
  c.slice = body.value("slice", std::uint64_t{0});
  return c;
}

json Checksum::to_json() const {
  return {{"region", region}, {"offset", offset}, {"length", length}, {"slice", slice}, {"crc32c", crc32c}};
}

json StagingRequest::to_json() const {
  return {{"offset", offset}, {"length", length}, {"direction", to_device ? "toDevice" : "toHost"}};
}

json GrantRequest::to_json() const {
  json body{{"offset", offset}, {"length", length}, {"access", access}, {"ttlSeconds", ttl_seconds}};
  if (!provider.empty()) body["provider"] = provider;
  if (!save.empty()) body["save"] = {{"file", save}};
  if (!writer.empty()) body["writer"] = writer;
  if (!peer.empty()) body["peer"] = peer;
  if (!ns.empty()) body["namespace"] = ns;
  if (!pod.empty()) body["pod"] = pod;
  return body;
}

json RingGrantRequest::to_json() const {
  json body{{"ttlSeconds", ttl_seconds}, {"save", {{"file", save}, {"bytes", bytes}}}};
  if (!provider.empty()) body["provider"] = provider;
  if (!peer.empty()) body["peer"] = peer;
  if (!ns.empty()) body["namespace"] = ns;
  return body;
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

FileInfo FileInfo::from_json(const json& body) {
  FileInfo f;
  if (!body.is_object()) return f;
  f.path = body.value("path", "");
  f.bytes = body.value("bytes", std::uint64_t{0});
  return f;
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
