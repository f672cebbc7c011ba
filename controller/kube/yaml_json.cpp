#include "yaml_json.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace conduit::controller::kube {
namespace {

using nlohmann::json;

bool one_of(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (s == w) return true;
  }
  return false;
}

// Integers as the core schema writes them: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+.
bool parse_int(const std::string& s, json& out) {
  std::string_view v = s;
  bool negative = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    negative = v[0] == '-';
    v.remove_prefix(1);
  }
  int base = 10;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o')) {
    if (s[0] == '-' || s[0] == '+') return false;  // the core schema has no signed hex or octal
    base = v[1] == 'x' ? 16 : 8;
    v.remove_prefix(2);
  }
  if (v.empty()) return false;
  std::uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), magnitude, base);
  if (ec != std::errc() || end != v.data() + v.size()) return false;
  if (negative) {
    if (magnitude > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) return false;
    out = static_cast<std::int64_t>(0 - magnitude);
  } else if (magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    out = static_cast<std::int64_t>(magnitude);
  } else {
    out = magnitude;
  }
  return true;
}

// Floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, plus .inf and .nan. Checked by hand so that
// strtod's extras (hex floats, "infinity", leading spaces) stay strings.
bool parse_float(const std::string& s, json& out) {
  if (one_of(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})) {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (one_of(s, {"-.inf", "-.Inf", "-.INF"})) {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (one_of(s, {".nan", ".NaN", ".NAN"})) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    std::size_t exp_digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != s.size()) return false;
  errno = 0;
  out = std::strtod(s.c_str(), nullptr);
  return errno == 0;
}

json plain_scalar(const std::string& s) {
  if (s.empty() || one_of(s, {"~", "null", "Null", "NULL"})) return nullptr;
  if (one_of(s, {"true", "True", "TRUE"})) return true;
  if (one_of(s, {"false", "False", "FALSE"})) return false;
  json number;
  if (parse_int(s, number) || parse_float(s, number)) return number;
  return s;
}

}  // namespace

json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      // yaml-cpp tags quoted (and block) scalars "!": those are strings whatever they look like.
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return node.Scalar();
      return plain_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return out;
    }
  }
  return nullptr;
}

Result<std::vector<json>> parse_yaml_documents(const std::string& text) {
  try {
    std::vector<json> out;
    for (const auto& doc : YAML::LoadAll(text)) {
      json j = yaml_to_json(doc);
      if (!j.is_null()) out.push_back(std::move(j));
    }
    return out;
  } catch (const YAML::Exception& e) {
    return make_error(ErrorCode::InvalidArgument, std::string("YAML: ") + e.what());
  }
}

Result<std::vector<json>> load_yaml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::Io, "cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto docs = parse_yaml_documents(text.str());
  if (!docs) return make_error(docs.error().code, path + ": " + docs.error().message);
  return docs;
}

}  // namespace conduit::controller::kube
