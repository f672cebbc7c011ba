#include "yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

namespace conduit::controller {

using json = nlohmann::json;

namespace {

// YAML 1.1 booleans yaml-cpp and older tools still read as bools: quote them so nothing misreads ours.
bool is_yaml11_bool(const std::string& s) {
  for (const char* word :
       {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"}) {
    if (s == word) return true;
  }
  return false;
}

// Plain unless the text would read back as something else: a value that looks like null, a bool or a number,
// and (keys too) text yaml-cpp would write plain but read back otherwise, found by fuzz/yaml_json_fuzz.cpp:
// control characters ("\r" read back as a line break), edge spaces, "---"/"..." (document markers), "".
void write_string(YAML::Emitter& out, const std::string& s, bool key) {
  const bool ambiguous = !key && (!plain_scalar(s).is_string() || is_yaml11_bool(s));
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
        // YAML limits an implicit key to 1,024 characters as written, and an escape takes up to 10 (found by
        // fuzz/yaml_json_fuzz.cpp): a longer key goes as an explicit one ("? key").
        if (key.size() > 100) out << YAML::LongKey;
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

}  // namespace

std::string to_yaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace conduit::controller
