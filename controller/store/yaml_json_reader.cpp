#include "yaml_json_reader.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string_view>

namespace conduit::controller {
namespace {

using nlohmann::json;

bool one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  for (const std::string_view w : words) {
    if (s == w) return true;
  }
  return false;
}

// Integers as the core schema writes them: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+ (no sign on the last two).
bool parse_int(std::string_view v, json& out) {
  bool negative = false;
  bool signed_text = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    negative = v[0] == '-';
    signed_text = true;
    v.remove_prefix(1);
  }
  int base = 10;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o')) {
    if (signed_text) return false;
    base = v[1] == 'x' ? 16 : 8;
    v.remove_prefix(2);
  }
  if (v.empty()) return false;
  std::uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), magnitude, base);
  if (ec != std::errc() || end != v.data() + v.size()) return false;
  if (!negative) {
    out = magnitude;
  } else if (magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) {
    out = static_cast<std::int64_t>(0 - magnitude);
  } else {
    return false;
  }
  return true;
}

// Floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, plus .inf and .nan. Checked by hand so that
// the extras of a library parser (hex floats, "infinity") stay strings; out of range stays a string too.
bool parse_float(std::string_view s, json& out) {
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
  auto digit = [&s](std::size_t i) { return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); };
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  std::size_t digits = 0;
  for (; digit(i); ++i) ++digits;
  if (i < s.size() && s[i] == '.') {
    for (++i; digit(i); ++i) ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (!digit(i)) return false;
    while (digit(i)) ++i;
  }
  if (i != s.size()) return false;
  if (s[0] == '+') s.remove_prefix(1);  // from_chars takes no '+'
  double d = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || end != s.data() + s.size()) return false;
  out = d;
  return true;
}

// Bounds on what aliases can make of a short text: `&a [*a]` contains itself (endless recursion), and ten
// anchors that each repeat the previous one ten times expand to 10^10 values ("billion laughs"). Objects,
// CRDs and kubeconfigs stay far below both. Thrown as YAML::Exception so the parse returns InvalidArgument.
constexpr int kMaxDepth = 256;
// 65,536 values: 70 times the TransferJob CRD (942), and the whole bound is walked in ~1 s under ASan.
constexpr std::size_t kMaxValues = 1u << 16;

[[noreturn]] void refuse(const YAML::Node& node, const std::string& why) {
  throw YAML::Exception(node.Mark(), why);
}

// JSON text is UTF-8; a string that is not could not be sent, dumped (nlohmann throws) nor written back.
const std::string& utf8(const YAML::Node& node, const std::string& text) {
  try {
    (void)json(text).dump();
  } catch (const json::type_error&) {
    refuse(node, "a string that is not valid UTF-8");
  }
  // Unicode's noncharacters (U+FDD0..U+FDEF, and U+xFFFE and U+xFFFF of every plane) are not YAML
  // characters: yaml-cpp reads them (from UTF-16, say) but writes U+FFFD, so the file would not read back.
  // The text is valid UTF-8 here, so each lead byte says how long its sequence is.
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? lead : lead & (0x7F >> n);
    for (std::size_t k = 1; k < n && i + k < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) {
      refuse(node, "a string holding a Unicode noncharacter");
    }
    i += n;
  }
  return text;
}

json convert(const YAML::Node& node, int depth, std::size_t& values) {
  if (depth > kMaxDepth) refuse(node, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  if (++values > kMaxValues) refuse(node, "more than " + std::to_string(kMaxValues) + " values (aliases?)");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      // yaml-cpp tags quoted (and block) scalars "!": those are strings whatever they look like.
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return utf8(node, node.Scalar());
      return plain_scalar(utf8(node, node.Scalar()));
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(convert(item, depth + 1, values));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        out[utf8(kv.first, kv.first.as<std::string>())] = convert(kv.second, depth + 1, values);
      }
      return out;
    }
  }
  return nullptr;
}

// The bounds count per document.
json to_json(const YAML::Node& document) {
  std::size_t values = 0;
  return convert(document, 0, values);
}

// yaml-cpp 0.7's LoadAll never returns on a stream where a document starts without the parser consuming a
// token (a stray ',' at the top level, found by fuzz/yaml_json_fuzz.cpp): it appends empty documents for
// ever. This pass runs the parser on its own events first and stops where a document starts at the same
// position as the one before. (Load reads one document, so only LoadAll needs it.)
class ProgressCheck final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (started_ && mark.pos == last_.pos) throw YAML::ParserException(mark, "unexpected token");
    started_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
  }
  void OnMapEnd() override {}

 private:
  bool started_ = false;
  YAML::Mark last_;
};

}  // namespace

json plain_scalar(const std::string& text) {
  if (text.empty() || one_of(text, {"~", "null", "Null", "NULL"})) return nullptr;
  if (one_of(text, {"true", "True", "TRUE"})) return true;
  if (one_of(text, {"false", "False", "FALSE"})) return false;
  json number;
  if (parse_int(text, number) || parse_float(text, number)) return number;
  return text;
}

Result<json> parse_yaml(const std::string& text) {
  try {
    return to_json(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return make_error(ErrorCode::InvalidArgument, e.what());
  }
}

Result<std::vector<json>> parse_yaml_documents(const std::string& text) {
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    ProgressCheck check;
    while (parser.HandleNextDocument(check)) {
    }
    std::vector<json> out;
    for (const auto& doc : YAML::LoadAll(text)) {
      json j = to_json(doc);
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

}  // namespace conduit::controller
