#include "conduit/common/json_fields.h"

#include <algorithm>

namespace conduit {

using json = nlohmann::json;

namespace {

// The offending value as the message shows it: short, since a body may be megabytes.
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

}  // namespace

std::string quoted_text(std::string_view text) {
  constexpr std::size_t kMax = 64;
  if (text.size() <= kMax) return "\"" + std::string(text) + "\"";
  return "\"" + std::string(text.substr(0, kMax)) + "...\"";
}

void JsonProblems::add(std::string problem) {
  if (reading()) problems_.push_back(std::move(problem));
}

std::string JsonProblems::message() const {
  std::string out;
  for (const auto& p : problems_) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Status JsonProblems::status() const {
  if (problems_.empty()) return {};
  return make_error(ErrorCode::InvalidArgument, message());
}

JsonFields::JsonFields(const json& object, std::string path, JsonProblems& problems, bool null_is_absent)
    : object_(object), path_(std::move(path)), null_is_absent_(null_is_absent), problems_(&problems) {
  if (!object_.is_object()) problems_->add((path_.empty() ? "body" : path_) + ": must be an object");
}

JsonFields::JsonFields(const json& object, std::string path, bool null_is_absent)
    : JsonFields(object, std::move(path), own_, null_is_absent) {}

std::string JsonFields::path_of(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

void JsonFields::fail(std::string_view key, const std::string& why) {
  problems_->add(path_of(key) + ": " + why);
}

void JsonFields::only(std::initializer_list<std::string_view> known) {
  if (!problems_->reading() || !object_.is_object()) return;
  for (const auto& [name, _] : object_.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      // The name is the client's: cut it, so a megabyte key does not come back in the error.
      fail(name.size() > 64 ? name.substr(0, 61) + "..." : name, "unknown field");
    }
  }
}

bool JsonFields::has(const char* key) const {
  if (!problems_->reading() || !object_.is_object()) return false;
  const auto it = object_.find(key);
  return it != object_.end() && !(null_is_absent_ && it->is_null());
}

const json* JsonFields::field(const char* key, Need need) {
  if (!problems_->reading() || !object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || (null_is_absent_ && it->is_null())) {
    if (need == Need::Required) fail(key, "is required");
    return nullptr;
  }
  return &*it;
}

std::optional<std::string> JsonFields::string(const char* key, Need need) {
  const json* v = field(key, need);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) {
    fail(key, "must be a string, got " + shown(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<std::string> JsonFields::text(const char* key, Need need, std::size_t max_length) {
  auto value = string(key, need);
  if (!value) return std::nullopt;
  if (value->empty()) fail(key, "must not be empty");
  if (value->size() > max_length) fail(key, "is longer than " + std::to_string(max_length) + " characters");
  return value;
}

std::optional<std::uint64_t> JsonFields::u64(const char* key, Need need, std::uint64_t min,
                                             std::uint64_t max) {
  const json* v = field(key, need);
  if (v == nullptr) return std::nullopt;
  // Parsed text gives unsigned for n >= 0, but a body built in C++ holds small numbers as signed.
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<std::int64_t>() < 0)) {
    fail(key, "must be a non-negative integer");
    return std::nullopt;
  }
  const std::uint64_t n = v->get<std::uint64_t>();
  if (n < min || n > max) {
    fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                  std::to_string(n));
    return std::nullopt;
  }
  return n;
}

std::optional<std::int64_t> JsonFields::i64(const char* key, Need need, std::int64_t min, std::int64_t max) {
  const json* v = field(key, need);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    fail(key, "must be an integer, got " + shown(*v));
    return std::nullopt;
  }
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
    fail(key, shown(*v) + " is above the maximum " + std::to_string(max));
    return std::nullopt;
  }
  const auto n = v->get<std::int64_t>();
  if (n < min) {
    fail(key, std::to_string(n) + " is below the minimum " + std::to_string(min));
    return std::nullopt;
  }
  if (n > max) {
    fail(key, std::to_string(n) + " is above the maximum " + std::to_string(max));
    return std::nullopt;
  }
  return n;
}

std::optional<bool> JsonFields::boolean(const char* key, Need need) {
  const json* v = field(key, need);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    fail(key, "must be true or false, got " + shown(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

const json* JsonFields::object(const char* key, Need need) {
  const json* v = field(key, need);
  if (v != nullptr && !v->is_object()) return fail(key, "must be an object"), nullptr;
  return v;
}

const json* JsonFields::array(const char* key, Need need) {
  const json* v = field(key, need);
  if (v != nullptr && !v->is_array()) return fail(key, "must be an array"), nullptr;
  return v;
}

}  // namespace conduit
