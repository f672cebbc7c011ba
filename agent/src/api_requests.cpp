#include "api_requests.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <string_view>

#include "regions.h"

namespace conduit::agent {
namespace {

constexpr std::uint64_t kMaxTtlSeconds = 24 * 3600;

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

// Client text echoed in an error message is cut short so a hostile body cannot make the answer huge.
std::string quote(std::string_view text) {
  constexpr std::size_t kMax = 64;
  if (text.size() <= kMax) return "\"" + std::string(text) + "\"";
  return "\"" + std::string(text.substr(0, kMax)) + "...\"";
}

// Reads the members of one JSON object and keeps the first problem, so each parser below reads as a plain
// list of its fields with one error check at the end.
class Fields {
 public:
  Fields(const nlohmann::json& body, std::initializer_list<std::string_view> allowed) : body_(body) {
    if (!body.is_object()) {
      fail("the body must be a JSON object");
      return;
    }
    for (const auto& item : body.items()) {
      if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
        fail("unknown field " + quote(item.key()));
        return;
      }
    }
  }

  bool has(const char* key) const { return ok() && body_.contains(key); }
  bool ok() const { return !error_.has_value(); }
  const Error& error() const { return *error_; }

  void fail(std::string message) {
    if (!error_) error_ = invalid(std::move(message));
  }

  std::optional<std::string> string(const char* key, bool required) {
    if (!present(key, required)) return std::nullopt;
    const auto& v = body_.at(key);
    if (!v.is_string()) return wrong_type(key, "a string");
    return v.get<std::string>();
  }

  // A JSON integer >= 0. Floats (even 4096.0) are refused: a size that went through a double may be off.
  std::optional<std::uint64_t> uint(const char* key, bool required) {
    if (!present(key, required)) return std::nullopt;
    const auto& v = body_.at(key);
    if (!v.is_number_integer()) return wrong_type(key, "an integer");
    // Parsed text gives unsigned for n >= 0, but a body built in C++ holds small numbers as signed.
    if (!v.is_number_unsigned() && v.get<std::int64_t>() < 0) {
      fail(std::string("\"") + key + "\" must not be negative");
      return std::nullopt;
    }
    return v.get<std::uint64_t>();
  }

 private:
  bool present(const char* key, bool required) {
    if (!ok()) return false;
    if (body_.contains(key)) return true;
    if (required) fail(std::string("\"") + key + "\" is required");
    return false;
  }

  std::nullopt_t wrong_type(const char* key, const char* type) {
    fail(std::string("\"") + key + "\" must be " + type);
    return std::nullopt;
  }

  const nlohmann::json& body_;
  std::optional<Error> error_;
};

bool valid_memory_label(std::string_view memory) {
  if (memory == "host") return true;
  constexpr std::string_view kCuda = "cuda:";
  if (!memory.starts_with(kCuda)) return false;
  const auto digits = memory.substr(kCuda.size());
  return !digits.empty() && digits.size() <= 3 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
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
  Fields f(body, {"name", "bytes", "memory", "file", "mode"});
  CreateRegionRequest request;
  if (auto name = f.string("name", true)) {
    if (auto valid = validate_name(*name); !valid) f.fail(valid.error().message);
    request.name = std::move(*name);
  }
  const bool allocate = f.has("bytes");
  const bool load = f.has("file");
  if (f.ok() && allocate == load) f.fail("give exactly one of \"bytes\" (allocate) or \"file\" (load)");
  if (allocate) {
    if (auto bytes = f.uint("bytes", true)) {
      if (*bytes == 0) f.fail("\"bytes\" must be positive");
      request.bytes = *bytes;
    }
    if (auto memory = f.string("memory", false)) {
      if (!valid_memory_label(*memory))
        f.fail("\"memory\" must be \"host\" or \"cuda:N\", not " + quote(*memory));
      request.memory = std::move(*memory);
    }
    if (f.has("mode")) f.fail("\"mode\" applies only with \"file\"");
  }
  if (load) {
    if (auto file = f.string("file", true)) {
      if (file->empty()) f.fail("\"file\" must not be empty");
      request.file = std::move(*file);
    }
    if (auto mode = f.string("mode", false); mode && *mode != "load") {
      f.fail("\"mode\" must be \"load\", not " + quote(*mode));
    }
    // A loaded file always lands in host memory; accepting "memory" here would suggest otherwise.
    if (f.has("memory")) f.fail("\"memory\" applies only with \"bytes\"");
  }
  if (!f.ok()) return f.error();
  return request;
}

Result<std::string> parse_save_region(const nlohmann::json& body) {
  Fields f(body, {"file"});
  auto file = f.string("file", true);
  if (file && file->empty()) f.fail("\"file\" must not be empty");
  if (!f.ok()) return f.error();
  return std::move(*file);
}

Result<CreateGrantRequest> parse_create_grant(const nlohmann::json& body) {
  Fields f(body, {"offset", "length", "access", "ttlSeconds", "provider"});
  CreateGrantRequest request;
  request.offset = f.uint("offset", false).value_or(0);
  if (auto length = f.uint("length", false)) {
    if (*length == 0) f.fail("\"length\" must be positive (leave it out for the rest of the region)");
    request.length = *length;
  }
  if (auto access = f.string("access", true)) {
    if (*access == "write") {
      request.access = Access::RemoteWrite;
    } else if (*access == "read") {
      request.access = Access::RemoteRead;
    } else {
      f.fail("\"access\" must be \"write\" or \"read\", not " + quote(*access));
    }
  }
  if (auto ttl = f.uint("ttlSeconds", false)) {
    if (*ttl == 0 || *ttl > kMaxTtlSeconds) f.fail("\"ttlSeconds\" must be 1 to 86400");
    request.ttl = std::chrono::seconds(static_cast<std::int64_t>(std::min(*ttl, kMaxTtlSeconds)));
  }
  if (auto provider = f.string("provider", false)) request.provider = std::move(*provider);
  if (!f.ok()) return f.error();
  return request;
}

Result<StagingRequest> parse_staging(const nlohmann::json& body) {
  Fields f(body, {"offset", "length", "direction"});
  StagingRequest request;
  if (auto offset = f.uint("offset", true)) request.offset = *offset;
  if (auto length = f.uint("length", true)) {
    if (*length == 0) f.fail("\"length\" must be positive");
    request.length = *length;
  }
  if (auto direction = f.string("direction", true)) {
    if (*direction == "toDevice") {
      request.to_device = true;
    } else if (*direction == "toHost") {
      request.to_device = false;
    } else {
      f.fail("\"direction\" must be \"toDevice\" or \"toHost\", not " + quote(*direction));
    }
  }
  if (!f.ok()) return f.error();
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

Status validate_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == ':';
  });
  if (!ok) return invalid("malformed id " + quote(id));
  return {};
}

}  // namespace conduit::agent
