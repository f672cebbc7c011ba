#include "yaml_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace conduit::controller {

using json = nlohmann::json;

namespace {

bool is_null_text(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> bool_text(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// YAML 1.1 booleans yaml-cpp and older tools still read as bools: quote them so nothing misreads ours.
bool is_yaml11_bool(const std::string& s) {
  for (const char* word :
       {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"}) {
    if (s == word) return true;
  }
  return false;
}

std::optional<json> number_text(const std::string& s) {
  if (s.empty()) return std::nullopt;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(begin + 2, end, v, s[1] == 'x' ? 16 : 8);
    if (ec == std::errc() && p == end) return json(v);
    return std::nullopt;
  }
  const char* digits = (*begin == '-' || *begin == '+') ? begin + 1 : begin;
  if (digits == end) return std::nullopt;
  if (*begin != '-') {
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(digits, end, v);
    if (ec == std::errc() && p == end) return json(v);
  } else {
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(begin, end, v);
    if (ec == std::errc() && p == end) return json(v);
  }
  if (s == ".inf" || s == "+.inf" || s == ".Inf") return json(INFINITY);
  if (s == "-.inf" || s == "-.Inf") return json(-INFINITY);
  // A float needs a digit and nothing but [0-9.eE+-].
  bool digit = false;
  for (const char c : s) {
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') {
      return std::nullopt;
    }
  }
  if (!digit) return std::nullopt;
  double d = 0;
  const auto [p, ec] = std::from_chars(begin, end, d);
  if (ec == std::errc() && p == end) return json(d);
  return std::nullopt;
}

// Bounds on what aliases can make of a short text: `&a [*a]` contains itself (endless recursion), and ten
// anchors that each repeat the previous one ten times expand to 10^10 values ("billion laughs"). Objects
// stay far below both. Thrown as YAML::Exception so parse_yaml returns InvalidArgument.
constexpr int kMaxDepth = 256;
// 65,536 values: 70 times the TransferJob CRD (942), and the whole bound is walked in ~1 s under ASan.
constexpr std::size_t kMaxValues = 1u << 16;

[[noreturn]] void refuse(const YAML::Node& node, const std::string& why) {
  throw YAML::Exception(node.Mark(), why);
}

// JSON text is UTF-8; a string that is not could not be dumped (nlohmann throws) nor written back unchanged.
const std::string& utf8(const YAML::Node& node, const std::string& text) {
  try {
    (void)json(text).dump();
  } catch (const json::type_error&) {
    refuse(node, "a string that is not valid UTF-8");
  }
  // U+FFFE and U+FFFF are not YAML characters at all; yaml-cpp reads them (from UTF-16) but writes U+FFFD.
  if (text.find("\xEF\xBF\xBE") != std::string::npos || text.find("\xEF\xBF\xBF") != std::string::npos) {
    refuse(node, "a string holding U+FFFE or U+FFFF");
  }
  return text;
}

json scalar(const YAML::Node& node) {
  const std::string& text = utf8(node, node.Scalar());
  // yaml-cpp tags plain scalars "?" and quoted or block ones "!": only plain ones carry types.
  if (node.Tag() != "?") return text;
  if (is_null_text(text)) return nullptr;
  if (auto b = bool_text(text)) return *b;
  if (auto n = number_text(text)) return *n;
  return text;
}

// Plain unless the text would read back as something else: a value that looks like null, a bool or a number,
// and (keys too) text yaml-cpp would write plain but read back otherwise, found by fuzz/yaml_json_fuzz.cpp:
// control characters ("\r" read back as a line break), edge spaces, "---"/"..." (document markers), "".
void write_string(YAML::Emitter& out, const std::string& s, bool key) {
  const bool ambiguous =
      !key && (is_null_text(s) || bool_text(s) || is_yaml11_bool(s) || number_text(s).has_value());
  const bool fragile = s.empty() || s.starts_with("---") || s.starts_with("...") ||
                       std::any_of(s.begin(), s.end(), [](char c) { return c >= 0 && c < 0x20; }) ||
                       std::isspace(static_cast<unsigned char>(s.front())) ||
                       std::isspace(static_cast<unsigned char>(s.back()));
  if (ambiguous || fragile) out << YAML::DoubleQuoted;
  out << s;
}

void emit(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key;
        write_string(out, key, /*key=*/true);
        out << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::string:
      write_string(out, value.get_ref<const std::string&>(), /*key=*/false);
      break;
    case json::value_t::boolean:
      out << (value.get<bool>() ? "true" : "false");
      break;
    case json::value_t::number_integer:
      out << value.get<std::int64_t>();
      break;
    case json::value_t::number_unsigned:
      out << value.get<std::uint64_t>();
      break;
    case json::value_t::number_float: {
      // dump() writes a non-finite number as null, which would read back as the string "null".
      const double d = value.get<double>();
      out << (std::isnan(d) ? ".nan" : std::isinf(d) ? (d > 0 ? ".inf" : "-.inf") : value.dump());
      break;
    }
    default:
      out << YAML::Null;
  }
}

json convert(const YAML::Node& node, int depth, std::size_t& values) {
  if (depth > kMaxDepth) refuse(node, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  if (++values > kMaxValues) refuse(node, "more than " + std::to_string(kMaxValues) + " values (aliases?)");
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& item : node) {
        object[utf8(item.first, item.first.as<std::string>())] = convert(item.second, depth + 1, values);
      }
      return object;
    }
    case YAML::NodeType::Sequence: {
      json array = json::array();
      for (const auto& item : node) array.push_back(convert(item, depth + 1, values));
      return array;
    }
    case YAML::NodeType::Scalar:
      return scalar(node);
    default:
      return nullptr;
  }
}

}  // namespace

json yaml_to_json(const YAML::Node& node) {
  std::size_t values = 0;
  return convert(node, 0, values);
}

Result<json> parse_yaml(const std::string& text) {
  try {
    return yaml_to_json(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return make_error(ErrorCode::InvalidArgument, e.what());
  }
}

std::string to_yaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace conduit::controller
