// YAML as JSON: plain scalars typed as kubectl types them, quoted ones left strings; merge-patch diffs.
#include <gtest/gtest.h>

#include "build_paths.h"
#include "controller/kube/merge_patch.h"
#include "controller/store/yaml_json_reader.h"

namespace conduit::kube {
namespace {

using controller::load_yaml_file;
using controller::parse_yaml_documents;

using nlohmann::json;

TEST(YamlJson, PlainScalarsAreTypedQuotedOnesAreStrings) {
  auto docs = parse_yaml_documents(R"(
int: 4096
negative: -3
hex: 0x1F
float: 1.5
exp: 1e3
yes_word: yes
bool: true
null_word: null
tilde: ~
empty:
quoted_int: "4096"
single_quoted_bool: 'true'
version: v1alpha1
pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
block: |
  line
list: [1, "2", three]
)");
  ASSERT_TRUE(docs) << docs.error().message;
  ASSERT_EQ(docs->size(), 1u);
  const json& j = (*docs)[0];
  EXPECT_EQ(j["int"], 4096);
  EXPECT_TRUE(j["int"].is_number_integer());
  EXPECT_EQ(j["negative"], -3);
  EXPECT_EQ(j["hex"], 31);
  EXPECT_EQ(j["float"], 1.5);
  EXPECT_EQ(j["exp"], 1000.0);
  EXPECT_EQ(j["yes_word"], "yes") << "YAML 1.2: yes is a string";
  EXPECT_EQ(j["bool"], true);
  EXPECT_TRUE(j["null_word"].is_null());
  EXPECT_TRUE(j["tilde"].is_null());
  EXPECT_TRUE(j["empty"].is_null());
  EXPECT_EQ(j["quoted_int"], "4096");
  EXPECT_EQ(j["single_quoted_bool"], "true");
  EXPECT_EQ(j["version"], "v1alpha1");
  EXPECT_EQ(j["pattern"], "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  EXPECT_EQ(j["block"], "line\n");
  EXPECT_EQ(j["list"], json::parse(R"([1, "2", "three"])"));
}

TEST(YamlJson, MultipleDocumentsSkipEmptyOnes) {
  auto docs = parse_yaml_documents("a: 1\n---\n---\nb: 2\n");
  ASSERT_TRUE(docs);
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["b"], 2);
  auto bad = parse_yaml_documents("a: [1,\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("line"), std::string::npos);
}

// Found by fuzz/yaml_json_fuzz.cpp: a self-referencing alias recursed until the stack ran out, nested
// aliases expanded without bound, bytes that are not UTF-8 made JSON that cannot be dumped, and a stray ','
// kept yaml-cpp's LoadAll appending empty documents for ever.
TEST(YamlJson, HostileDocumentsAreRefused) {
  EXPECT_FALSE(parse_yaml_documents("&a [*a]"));
  EXPECT_FALSE(parse_yaml_documents("a: &a {x: *a}"));
  std::string laughs = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
  for (char c = 'b'; c <= 'g'; ++c) {
    const std::string p(1, static_cast<char>(c - 1));
    laughs += std::string(1, c) + ": &" + c + " [*" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p +
              ", *" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + "]\n";
  }
  EXPECT_FALSE(parse_yaml_documents(laughs));
  EXPECT_FALSE(parse_yaml_documents("a: \"\xf8\x05\""));
  EXPECT_FALSE(parse_yaml_documents(","));  // yaml-cpp's LoadAll alone never returns on these two
  EXPECT_FALSE(parse_yaml_documents("a: 1\n---\n,"));
  auto ok = parse_yaml_documents("a: &x [1]\nb: *x\n");  // an alias as such is fine
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)[0]["b"], json::array({1}));
}

TEST(YamlJson, CrdsInTheRepositoryParse) {
  for (const char* name : {"transferjobs.conduit.dev.yaml", "fabricnodes.conduit.dev.yaml"}) {
    auto docs = load_yaml_file(std::string(conduit::testing::source_dir()) + "/crds/" + name);
    ASSERT_TRUE(docs) << docs.error().message;
    ASSERT_EQ(docs->size(), 1u);
    EXPECT_EQ((*docs)[0]["kind"], "CustomResourceDefinition");
    EXPECT_TRUE((*docs)[0]["spec"]["versions"][0]["served"].is_boolean());
  }
}

TEST(MergePatchDiff, RemovesWhatIsGoneAndKeepsWhatIsEqualOut) {
  json from = {{"a", 1}, {"b", {{"x", 1}, {"y", 2}}}, {"gone", "v"}, {"list", {1, 2}}};
  json to = {{"a", 1}, {"b", {{"x", 1}, {"z", 3}}}, {"list", {1}}, {"new", true}};
  json diff = merge_patch_diff(from, to);
  EXPECT_EQ(diff, json::parse(R"({"b": {"y": null, "z": 3}, "gone": null, "list": [1], "new": true})"));
  json applied = from;
  applied.merge_patch(diff);
  EXPECT_EQ(applied, to);
  EXPECT_EQ(merge_patch_diff(to, to), json::object());
}

}  // namespace
}  // namespace conduit::kube
