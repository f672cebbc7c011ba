// The wire forms of the region, file, checksum and staging routes: the strict readers of the bodies the
// agent is sent (its own), their writers (every client's) and the answers as clients read them.
#include "conduit/api/wire.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "conduit/api/names.h"
#include "conduit/common/json_fields.h"

namespace conduit::api {

using json = nlohmann::json;

namespace {

// A body's fields, strictly (conduit/common/json_fields.h): messages read "bytes: must be a non-negative
// integer", "colour: unknown field".
class Fields : public JsonFields {
 public:
  Fields(const json& body, std::initializer_list<std::string_view> allowed) : JsonFields(body, "") {
    only(allowed);
  }
};

bool valid_memory_label(std::string_view memory) {
  if (memory == "host") return true;
  constexpr std::string_view kCuda = "cuda:";
  if (!memory.starts_with(kCuda)) return false;
  const auto digits = memory.substr(kCuda.size());
  return !digits.empty() && digits.size() <= 3 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "namespace" and "sharedWith" of either region body, as JSON.
void add_tenancy(json& body, const std::string& ns, const std::vector<std::string>& shared_with) {
  if (!ns.empty()) body["namespace"] = ns;
  if (!shared_with.empty()) body["sharedWith"] = shared_with;
}

}  // namespace

// Both bodies are read at once, so that one of the two forms in fields of the other is told what it mixed
// ("memory: applies only with bytes") rather than "unknown field".
Result<RegionRequest> region_request_from_json(const json& body) {
  Fields f(body,
           {"name", "bytes", "memory", "file", "mode", "namespace", "sharedWith", "manifest", "shareable"});
  const std::string ns = parse_namespace(f);
  std::vector<std::string> shared_with = parse_shared_with(f);
  std::string name;
  if (auto given = f.string("name", Need::Required)) {
    if (auto valid = validate_name(*given); !valid) f.fail("name", valid.error().message);
    name = std::move(*given);
  }
  const bool allocate = f.has("bytes");
  const bool load = f.has("file");
  if (f.ok() && allocate == load) f.fail("bytes", "give exactly one of bytes (allocate) or file (load)");
  if (allocate) {
    CreateRegion request{.name = std::move(name), .ns = ns, .shared_with = std::move(shared_with)};
    if (auto bytes = f.u64("bytes", Need::Required)) {
      if (*bytes == 0) f.fail("bytes", "must be positive");
      request.bytes = *bytes;
    }
    if (auto memory = f.string("memory")) {
      if (!valid_memory_label(*memory))
        f.fail("memory", "must be \"host\" or \"cuda:N\", not " + quoted_text(*memory));
      request.memory = std::move(*memory);
    }
    if (f.has("mode")) f.fail("mode", "applies only with file");
    if (auto shareable = f.boolean("shareable")) {
      // Another process maps a memfd of host memory; device memory is shared by CUDA IPC, not this way.
      if (*shareable && request.memory != "host")
        f.fail("shareable", "applies only to host memory, not " + quoted_text(request.memory) +
                                " (a local process maps host memory through a file descriptor)");
      request.shareable = *shareable;
    }
    if (!f.ok()) return f.status().error();
    if (const json* manifest = f.object("manifest")) {
      auto read = Manifest::from_json(*manifest, request.bytes);
      if (!read) return make_error(ErrorCode::InvalidArgument, "manifest." + read.error().message);
      request.manifest = std::move(*read);
    }
    if (!f.ok()) return f.status().error();
    return RegionRequest(std::move(request));
  }
  LoadRegion request{.name = std::move(name), .file = "", .ns = ns, .shared_with = std::move(shared_with)};
  if (auto file = f.string("file", Need::Required)) {
    if (file->empty()) f.fail("file", "must not be empty");
    request.file = std::move(*file);
  }
  if (auto mode = f.string("mode"); mode && *mode != "load") {
    f.fail("mode", "must be \"load\", not " + quoted_text(*mode));
  }
  // A loaded file always lands in host memory; accepting "memory" here would suggest otherwise.
  if (f.has("memory")) f.fail("memory", "applies only with bytes");
  if (f.has("shareable")) f.fail("shareable", "applies only with bytes (a loaded region is not shareable)");
  if (f.has("manifest"))
    f.fail("manifest", "applies only with bytes (a .safetensors file brings its own; or PUT one after)");
  if (!f.ok()) return f.status().error();
  return RegionRequest(std::move(request));
}

Result<CreateRegion> CreateRegion::from_json(const json& body) {
  auto request = region_request_from_json(body);
  if (!request) return request.error();
  if (auto* allocate = std::get_if<CreateRegion>(&*request)) return std::move(*allocate);
  return make_error(ErrorCode::InvalidArgument, "file: this body loads a file, it does not allocate");
}

json CreateRegion::to_json() const {
  json body{{"name", name}, {"bytes", bytes}, {"memory", memory}};
  add_tenancy(body, ns, shared_with);
  if (manifest) body["manifest"] = manifest->to_json();
  if (shareable) body["shareable"] = true;
  return body;
}

Result<LoadRegion> LoadRegion::from_json(const json& body) {
  auto request = region_request_from_json(body);
  if (!request) return request.error();
  if (auto* load = std::get_if<LoadRegion>(&*request)) return std::move(*load);
  return make_error(ErrorCode::InvalidArgument, "bytes: this body allocates, it does not load a file");
}

json LoadRegion::to_json() const {
  json body{{"name", name}, {"file", file}, {"mode", "load"}};
  add_tenancy(body, ns, shared_with);
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
  if (const auto it = body.find("tensors"); it != body.end() && it->is_number_unsigned())
    r.tensors = it->get<std::uint64_t>();
  r.shareable = body.value("shareable", false);
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
  if (tensors) out["tensors"] = *tensors;
  if (shareable) out["shareable"] = true;
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

Result<SaveRegion> SaveRegion::from_json(const json& body) {
  Fields f(body, {"file", "namespace"});
  auto file = f.string("file", Need::Required);
  if (file && file->empty()) f.fail("file", "must not be empty");
  SaveRegion request{.file = file.value_or(""), .ns = parse_namespace(f)};
  if (!f.ok()) return f.status().error();
  return request;
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

Result<StatFile> StatFile::from_json(const json& body) {
  Fields f(body, {"path", "namespace"});
  auto path = f.text("path", Need::Required, 1024);
  StatFile request{.path = path.value_or(""), .ns = parse_namespace(f)};
  if (!f.ok()) return f.status().error();
  return request;
}

json StatFile::to_json() const {
  json body{{"path", path}};
  if (!ns.empty()) body["namespace"] = ns;
  return body;
}

FileInfo FileInfo::from_json(const json& body) {
  FileInfo f;
  if (!body.is_object()) return f;
  f.path = body.value("path", "");
  f.bytes = body.value("bytes", std::uint64_t{0});
  return f;
}

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

Result<StagingRequest> StagingRequest::from_json(const json& body) {
  Fields f(body, {"offset", "length", "direction"});
  StagingRequest request;
  if (auto offset = f.u64("offset", Need::Required)) request.offset = *offset;
  if (auto length = f.u64("length", Need::Required)) {
    if (*length == 0) f.fail("length", "must be positive");
    request.length = *length;
  }
  if (auto direction = f.string("direction", Need::Required)) {
    if (*direction == "toDevice") {
      request.to_device = true;
    } else if (*direction == "toHost") {
      request.to_device = false;
    } else {
      f.fail("direction", "must be \"toDevice\" or \"toHost\", not " + quoted_text(*direction));
    }
  }
  if (!f.ok()) return f.status().error();
  return request;
}

json StagingRequest::to_json() const {
  return {{"offset", offset}, {"length", length}, {"direction", to_device ? "toDevice" : "toHost"}};
}

// A reader names itself however it likes; the bound keeps 1024 of them small (a DNS name's length).
constexpr std::size_t kMaxReaderChars = 253;

Result<Ack> Ack::from_json(const json& body) {
  Fields f(body, {"reader", "version"});
  Ack ack;
  if (auto reader = f.text("reader", Need::Required, kMaxReaderChars)) ack.reader = *reader;
  if (auto version = f.u64("version", Need::Required, 0, INT64_MAX)) ack.version = *version;
  if (!f.ok()) return f.status().error();
  return ack;
}

json Ack::to_json() const { return {{"reader", reader}, {"version", version}}; }

Acks Acks::from_json(const json& body) {
  Acks a;
  if (!body.is_object()) return a;
  a.region = body.value("region", "");
  a.version = body.value("version", std::uint64_t{0});
  a.done = body.value("done", false);
  if (const auto it = body.find("readers"); it != body.end() && it->is_array()) {
    for (const auto& r : *it) {
      if (!r.is_object()) continue;
      a.readers.push_back(
          {r.value("reader", ""), r.value("version", std::uint64_t{0}), r.value("at", std::string())});
    }
  }
  return a;
}

json Acks::to_json() const {
  json list = json::array();
  for (const auto& r : readers) list.push_back({{"reader", r.reader}, {"version", r.version}, {"at", r.at}});
  return {{"region", region}, {"version", version}, {"readers", std::move(list)}, {"done", done}};
}

}  // namespace conduit::api
