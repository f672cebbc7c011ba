#include "rest/requests.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

#include "conduit/common/json_fields.h"
#include "region_acks.h"

namespace conduit::agent::rest {
namespace {

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

// The spec's query integers are int64: a value past 2^63 - 1 is no valid request, however small the
// answer it would give (schemathesis's negative mode sends slice=2^63).
std::optional<std::uint64_t> parse_decimal(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value > INT64_MAX) return std::nullopt;
  return value;
}

}  // namespace

Result<api::ChecksumQuery> parse_checksum_query(const httplib::Params& params) {
  api::ChecksumQuery query;
  for (const auto& [key, value] : params) {
    std::uint64_t* field = key == "offset"   ? &query.offset
                           : key == "length" ? &query.length
                           : key == "slice"  ? &query.slice
                                             : nullptr;
    if (field == nullptr) return invalid("unknown query parameter " + quoted_text(key));
    if (params.count(key) > 1)
      return invalid("query parameter " + quoted_text(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed)
      return invalid("query parameter " + quoted_text(key) + " must be a non-negative integer, not " +
                     quoted_text(value));
    *field = *parsed;
  }
  if (query.slice == 0) return invalid("query parameter \"slice\" must be positive");
  return query;
}

Result<VersionQuery> parse_version_query(const httplib::Params& params) {
  VersionQuery query;
  for (const auto& [key, value] : params) {
    if (key != "after" && key != "timeoutSeconds")
      return invalid("unknown query parameter " + quoted_text(key));
    if (params.count(key) > 1)
      return invalid("query parameter " + quoted_text(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed)
      return invalid("query parameter " + quoted_text(key) + " must be a non-negative integer, not " +
                     quoted_text(value));
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

Result<AcksQuery> parse_acks_query(const httplib::Params& params) {
  AcksQuery query;
  for (const auto& [key, value] : params) {
    if (key != "version" && key != "readers" && key != "timeoutSeconds")
      return invalid("unknown query parameter " + quoted_text(key));
    if (params.count(key) > 1)
      return invalid("query parameter " + quoted_text(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed)
      return invalid("query parameter " + quoted_text(key) + " must be a non-negative integer, not " +
                     quoted_text(value));
    if (key == "version") {
      query.version = *parsed;
    } else if (key == "readers") {
      if (*parsed > RegionAcks::kMaxReaders)
        return invalid("query parameter \"readers\" must be at most " +
                       std::to_string(RegionAcks::kMaxReaders) + " (the most readers a region keeps), not " +
                       value);
      query.readers = *parsed;
    } else if (*parsed > 60) {
      return invalid("query parameter \"timeoutSeconds\" must be at most 60, not " + value);
    } else {
      query.timeout = std::chrono::seconds(*parsed);
    }
  }
  return query;
}

Result<std::chrono::seconds> parse_seconds_query(const httplib::Params& params, const std::string& name,
                                                 bool namespace_too) {
  std::chrono::seconds wait{0};
  for (const auto& [key, value] : params) {
    if (namespace_too && key == "namespace") continue;  // the route's own (Call::ns)
    if (key != name) return invalid("unknown query parameter " + quoted_text(key));
    if (params.count(key) > 1)
      return invalid("query parameter " + quoted_text(key) + " given more than once");
    const auto parsed = parse_decimal(value);
    if (!parsed || *parsed > 60)
      return invalid("query parameter " + quoted_text(name) + " must be an integer from 0 to 60, not " +
                     quoted_text(value));
    wait = std::chrono::seconds(*parsed);
  }
  return wait;
}

Status validate_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == ':';
  });
  if (!ok) return invalid("malformed id " + quoted_text(id));
  return {};
}

}  // namespace conduit::agent::rest
