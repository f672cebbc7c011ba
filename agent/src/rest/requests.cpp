#include "rest/requests.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <string_view>

#include "conduit/api/names.h"
#include "conduit/common/json_fields.h"
#include "regions.h"

namespace conduit::agent::rest {
namespace {

constexpr std::uint64_t kMaxTtlSeconds = 24 * 3600;

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

// Client text echoed in an error message is cut short so a hostile body cannot make the answer huge.
std::string quote(std::string_view text) {
  constexpr std::size_t kMax = 64;
  if (text.size() <= kMax) return "\"" + std::string(text) + "\"";
  return "\"" + std::string(text.substr(0, kMax)) + "...\"";
}

// A body's fields, strictly (conduit/common/json_fields.h): messages read "bytes: must be a non-negative
// integer", "colour: unknown field".
class Fields : public JsonFields {
 public:
  Fields(const nlohmann::json& body, std::initializer_list<std::string_view> allowed) : JsonFields(body, "") {
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

// A grant's "peer": a Kubernetes node name (a DNS subdomain: at most 253 characters).
std::string parse_peer(JsonFields& f) {
  auto peer = f.string("peer");
  if (!peer) return {};
  if (peer->empty() || peer->size() > 253) f.fail("peer", "must be a node name of 1 to 253 characters");
  return std::move(*peer);
}

std::optional<std::uint64_t> parse_decimal(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace

Result<CreateRegionRequest> parse_create_region(const nlohmann::json& body) {
  Fields f(body, {"name", "bytes", "memory", "file", "mode", "namespace", "sharedWith"});
  CreateRegionRequest request;
  request.tenancy = parse_tenancy(f);
  if (auto name = f.string("name", Need::Required)) {
    if (auto valid = api::validate_name(*name); !valid) f.fail("name", valid.error().message);
    request.name = std::move(*name);
  }
  const bool allocate = f.has("bytes");
  const bool load = f.has("file");
  if (f.ok() && allocate == load) f.fail("bytes", "give exactly one of bytes (allocate) or file (load)");
  if (allocate) {
    if (auto bytes = f.u64("bytes", Need::Required)) {
      if (*bytes == 0) f.fail("bytes", "must be positive");
      request.bytes = *bytes;
    }
    if (auto memory = f.string("memory")) {
      if (!valid_memory_label(*memory))
        f.fail("memory", "must be \"host\" or \"cuda:N\", not " + quote(*memory));
      request.memory = std::move(*memory);
    }
    if (f.has("mode")) f.fail("mode", "applies only with file");
  }
  if (load) {
    if (auto file = f.string("file", Need::Required)) {
      if (file->empty()) f.fail("file", "must not be empty");
      request.file = std::move(*file);
    }
    if (auto mode = f.string("mode"); mode && *mode != "load") {
      f.fail("mode", "must be \"load\", not " + quote(*mode));
    }
    // A loaded file always lands in host memory; accepting "memory" here would suggest otherwise.
    if (f.has("memory")) f.fail("memory", "applies only with bytes");
  }
  if (!f.ok()) return f.status().error();
  return request;
}

Result<FileRequest> parse_save_region(const nlohmann::json& body) {
  Fields f(body, {"file", "namespace"});
  auto file = f.string("file", Need::Required);
  if (file && file->empty()) f.fail("file", "must not be empty");
  FileRequest request{.file = file.value_or(""), .job_namespace = api::parse_namespace(f)};
  if (!f.ok()) return f.status().error();
  return request;
}

Result<CreateGrantRequest> parse_create_grant(const nlohmann::json& body) {
  JsonProblems problems;
  JsonFields f(body, "", problems);
  f.only(
      {"offset", "length", "access", "ttlSeconds", "provider", "save", "writer", "peer", "namespace", "pod"});
  CreateGrantRequest request;
  request.pod = api::parse_pod(f);
  request.peer = parse_peer(f);
  request.job_namespace = api::parse_namespace(f);
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
    if (*access == "write") {
      request.access = Access::RemoteWrite;
    } else if (*access == "read") {
      request.access = Access::RemoteRead;
    } else {
      f.fail("access", "must be \"write\" or \"read\", not " + quote(*access));
    }
  }
  if (auto ttl = f.u64("ttlSeconds")) {
    if (*ttl == 0 || *ttl > kMaxTtlSeconds) f.fail("ttlSeconds", "must be 1 to 86400");
    request.ttl = std::chrono::seconds(static_cast<std::int64_t>(std::min(*ttl, kMaxTtlSeconds)));
  }
  if (auto provider = f.string("provider")) request.provider = std::move(*provider);
  if (const auto* save = f.object("save")) {
    JsonFields s(*save, "save", problems);
    s.only({"file"});
    if (auto file = s.string("file", Need::Required)) {
      if (file->empty()) s.fail("file", "must not be empty");
      request.save = std::move(*file);
    }
    if (f.ok() && request.access != Access::RemoteWrite) f.fail("save", "applies only with access write");
  }
  if (!f.ok()) return f.status().error();
  return request;
}

Result<std::chrono::seconds> parse_renew_grant(const nlohmann::json& body) {
  JsonProblems problems;
  JsonFields f(body, "", problems);
  f.only({"ttlSeconds"});
  const auto ttl = f.u64("ttlSeconds", Need::Required, 1, kMaxTtlSeconds);
  if (!f.ok()) return f.status().error();
  return std::chrono::seconds(static_cast<std::int64_t>(*ttl));
}

Result<CreateGrantRequest> parse_create_ring_grant(const nlohmann::json& body) {
  JsonProblems problems;
  JsonFields f(body, "", problems);
  f.only({"ttlSeconds", "provider", "save", "peer", "namespace"});
  CreateGrantRequest request;
  request.peer = parse_peer(f);
  request.job_namespace = api::parse_namespace(f);
  if (auto ttl = f.u64("ttlSeconds")) {
    if (*ttl == 0 || *ttl > kMaxTtlSeconds) f.fail("ttlSeconds", "must be 1 to 86400");
    request.ttl = std::chrono::seconds(static_cast<std::int64_t>(std::min(*ttl, kMaxTtlSeconds)));
  }
  if (auto provider = f.string("provider")) request.provider = std::move(*provider);
  if (const auto* save = f.object("save", Need::Required)) {
    JsonFields s(*save, "save", problems);
    s.only({"file", "bytes"});
    if (auto file = s.string("file", Need::Required)) {
      if (file->empty()) s.fail("file", "must not be empty");
      request.save = std::move(*file);
    }
    request.save_bytes = s.u64("bytes", Need::Required, 1, std::uint64_t{1} << 44).value_or(0);
  }
  if (!f.ok()) return f.status().error();
  return request;
}

Result<LandedRequest> parse_landed(const nlohmann::json& body) {
  Fields f(body, {"offset", "length", "slice", "crc32c", "waitForPrevious"});
  LandedRequest request;
  request.offset = f.u64("offset", Need::Required).value_or(0);
  request.wait_for_previous = f.boolean("waitForPrevious").value_or(false);
  request.length = f.u64("length", Need::Required, 1, std::uint64_t{1} << 40).value_or(0);
  request.slice = f.u64("slice", Need::Optional, 1, std::uint64_t{1} << 40).value_or(0);
  if (const auto* crcs = f.array("crc32c")) {
    if (crcs->size() > 65536) f.fail("crc32c", "at most 65536 checksums");
    for (std::size_t i = 0; f.ok() && i < crcs->size(); ++i) {
      const auto& c = (*crcs)[i];
      if (!c.is_number_unsigned() || c.get<std::uint64_t>() > 0xffffffffULL) {
        f.fail("crc32c", "item " + std::to_string(i) + " must be an unsigned 32-bit integer");
      } else {
        request.crc32c.push_back(static_cast<std::uint32_t>(c.get<std::uint64_t>()));
      }
    }
    if (f.ok() && !request.crc32c.empty() && request.slice == 0) f.fail("slice", "is required with crc32c");
  }
  if (!f.ok()) return f.status().error();
  return request;
}

Result<FileRequest> parse_stat_file(const nlohmann::json& body) {
  Fields f(body, {"path", "namespace"});
  auto path = f.text("path", Need::Required, 1024);
  FileRequest request{.file = path.value_or(""), .job_namespace = api::parse_namespace(f)};
  if (!f.ok()) return f.status().error();
  return request;
}

Result<std::uint64_t> parse_commit(const nlohmann::json& body) {
  Fields f(body, {"bytes"});
  auto bytes = f.u64("bytes", Need::Required, 1, std::uint64_t{1} << 44);
  if (!f.ok()) return f.status().error();
  return *bytes;
}

Result<StagingRequest> parse_staging(const nlohmann::json& body) {
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
      f.fail("direction", "must be \"toDevice\" or \"toHost\", not " + quote(*direction));
    }
  }
  if (!f.ok()) return f.status().error();
  return request;
}

Result<ChecksumQuery> parse_checksum_query(const httplib::Params& params) {
  ChecksumQuery query;
  for (const auto& [key, value] : params) {
    std::uint64_t* field = key == "offset"   ? &query.offset
                           : key == "length" ? &query.length
                           : key == "slice"  ? &query.slice
                                             : nullptr;
    if (field == nullptr) return invalid("unknown query parameter " + quote(key));
    if (params.count(key) > 1) return invalid("query parameter " + quote(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed)
      return invalid("query parameter " + quote(key) + " must be a non-negative integer, not " +
                     quote(value));
    *field = *parsed;
  }
  if (query.slice == 0) return invalid("query parameter \"slice\" must be positive");
  return query;
}

Result<VersionQuery> parse_version_query(const httplib::Params& params) {
  VersionQuery query;
  for (const auto& [key, value] : params) {
    if (key != "after" && key != "timeoutSeconds") return invalid("unknown query parameter " + quote(key));
    if (params.count(key) > 1) return invalid("query parameter " + quote(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed)
      return invalid("query parameter " + quote(key) + " must be a non-negative integer, not " +
                     quote(value));
    if (key == "after") {
      query.after = *parsed;
    } else if (*parsed > 60) {
      return invalid("query parameter \"timeoutSeconds\" must be at most 60, not " + value);
    } else {
      query.timeout = std::chrono::seconds(*parsed);
    }
  }
  return query;
}

Result<std::chrono::seconds> parse_wait_query(const httplib::Params& params, bool namespace_too) {
  std::chrono::seconds wait{0};
  for (const auto& [key, value] : params) {
    if (namespace_too && key == "namespace") continue;  // the route's own (Call::ns)
    if (key != "waitSeconds") return invalid("unknown query parameter " + quote(key));
    if (params.count(key) > 1) return invalid("query parameter " + quote(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed || *parsed > 60)
      return invalid("query parameter \"waitSeconds\" must be an integer from 0 to 60, not " + quote(value));
    wait = std::chrono::seconds(*parsed);
  }
  return wait;
}

Status validate_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == ':';
  });
  if (!ok) return invalid("malformed id " + quote(id));
  return {};
}

}  // namespace conduit::agent::rest
