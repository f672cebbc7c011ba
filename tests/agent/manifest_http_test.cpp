// A region's manifest over the agent's REST API (docs/tensors.md): given when a region is made, read back,
// replaced, refused with the tensor named and nothing changed; a .safetensors file loaded as a region whose
// manifest is its header, and saved back as the same file. Files written by the real `safetensors` package
// are the SDK suite's (tests/scenarios/sdk/test_tensors.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "agent_process.h"
#include "build_paths.h"
#include "conduit/api/manifest.h"
#include "conduit/crc32c.h"
#include "file_bytes.h"

namespace conduit {
namespace {

using json = nlohmann::json;
using testing::AgentOptions;
using testing::AgentProcess;

json tensor(const std::string& name, const std::string& dtype, json shape, std::uint64_t offset,
            std::uint64_t length) {
  return {
      {"name", name}, {"dtype", dtype}, {"shape", std::move(shape)}, {"offset", offset}, {"length", length}};
}

json model() {
  return {{"tensors", json::array({tensor("model.embed_tokens.weight", "BF16", {4, 8}, 0, 64),
                                   tensor("model.layers.0.mlp.up_proj.weight", "F32", {8}, 64, 32),
                                   tensor("lm_head.bias", "I8", {16}, 96, 16)})},
          {"metadata", {{"format", "pt"}}}};
}

// A .safetensors file as the format lays it out: the header's size (8 bytes, little-endian), the header
// (padded with spaces to 8 bytes), then the data.
std::vector<std::byte> safetensors_file(const std::string& header_json, const std::vector<std::byte>& data) {
  std::string header = header_json;
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out;
  for (int b = 0; b < 8; ++b) out.push_back(static_cast<std::byte>((header.size() >> (8 * b)) & 0xff));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// What an error answer says ({"error": {"code", "message"}}).
std::string message(const AgentProcess::Reply& r) { return r.body["error"].value("message", ""); }

std::vector<std::byte> counting(std::size_t n) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i * 7 + 3);
  return out;
}

class ManifestHttp : public ::testing::Test {
 protected:
  AgentProcess a{testing::small_tcp_agent()};
};

TEST_F(ManifestHttp, GivenWithTheRegionReadBackAndCountedInItsListing) {
  ASSERT_TRUE(a.started());
  auto made = a.post("/v1/regions", {{"name", "weights"}, {"bytes", 4096}, {"manifest", model()}});
  ASSERT_EQ(made.status, 201) << made.body.dump();
  EXPECT_EQ(made.body["tensors"], 3);
  auto got = a.get("/v1/regions/weights/manifest");
  ASSERT_EQ(got.status, 200) << got.body.dump();
  EXPECT_EQ(got.body, model()) << "names are free strings, kept as given";

  ASSERT_EQ(a.post("/v1/regions", {{"name", "plain"}, {"bytes", 4096}}).status, 201);
  const auto none = a.get("/v1/regions/plain/manifest");
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(message(none).find("has no manifest"), std::string::npos) << none.body.dump();
  EXPECT_FALSE(a.get("/v1/regions/plain").body.contains("tensors"));
}

// What `command` printed on stdout, and how it exited.
std::pair<std::string, int> run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return {out, ::pclose(p)};
}

TEST_F(ManifestHttp, TheCliListsARegionsTensors) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "weights"}, {"bytes", 4096}, {"manifest", model()}}).status, 201);
  const std::string cli =
      "CONDUIT_TOKEN=" + a.token() + " " + testing::built_binary("conduit") + " --agent " + a.url() + " ";
  const auto [table, rc] = run(cli + "regions manifest weights");
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << table;
  EXPECT_NE(table.find("BF16"), std::string::npos) << table;
  const auto [text, json_rc] = run(cli + "--json regions manifest weights");
  EXPECT_EQ(json_rc, 0) << text;
  EXPECT_EQ(json::parse(text, nullptr, false), model());
  const auto [none, none_rc] = run(cli + "regions manifest absent 2>&1");
  EXPECT_NE(none_rc, 0) << "a region that is not there is an error";
}

TEST_F(ManifestHttp, ALyingManifestIsRefusedNamingTheTensorAndChangesNothing) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "weights"}, {"bytes", 128}, {"manifest", model()}}).status, 201);
  struct Case {
    const char* what;
    json manifest;
    const char* says;
  };
  const Case cases[] = {
      {"overlap",
       {{"tensors", json::array({tensor("a", "F32", {4}, 0, 16), tensor("b", "F32", {4}, 8, 16)})}},
       "tensors[1] (b): starts at 8"},
      {"out of range",
       {{"tensors", json::array({tensor("a", "F32", {64}, 0, 256)})}},
       "outside the 128-byte"},
      {"wrong length", {{"tensors", json::array({tensor("a", "F16", {3}, 0, 8)})}}, "(6 bytes)"},
      {"duplicate",
       {{"tensors", json::array({tensor("a", "U8", {1}, 0, 1), tensor("a", "U8", {1}, 1, 1)})}},
       "given twice"},
  };
  for (const Case& c : cases) {
    const auto r = a.put("/v1/regions/weights/manifest", c.manifest);
    EXPECT_EQ(r.status, 400) << c.what;
    EXPECT_NE(message(r).find(c.says), std::string::npos) << c.what << ": " << r.body.dump();
    EXPECT_EQ(a.get("/v1/regions/weights/manifest").body, model()) << c.what << " changed the manifest";
  }
  const auto refused = a.post("/v1/regions", {{"name", "small"}, {"bytes", 64}, {"manifest", model()}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(message(refused).find("manifest.tensors[1]"), std::string::npos) << refused.body.dump();
  EXPECT_EQ(a.get("/v1/regions/small").status, 404) << "no region made";

  json fewer = {{"tensors", json::array({tensor("only", "U8", {128}, 0, 128)})}};
  const auto replaced = a.put("/v1/regions/weights/manifest", fewer);
  ASSERT_EQ(replaced.status, 200) << replaced.body.dump();
  EXPECT_EQ(a.get("/v1/regions/weights").body["tensors"], 1);
}

TEST_F(ManifestHttp, ASafetensorsFileLoadsWithItsHeaderAsTheManifestAndSavesBackTheSame) {
  ASSERT_TRUE(a.started());
  auto manifest = api::Manifest::from_json(model(), 112);
  ASSERT_TRUE(manifest) << manifest.error().message;
  const auto header = manifest->safetensors_header();
  ASSERT_TRUE(header) << header.error().message;
  const std::vector<std::byte> data = counting(112);
  const std::vector<std::byte> file = safetensors_file(*header, data);
  testing::write_file(a.data_dir() / "model.safetensors", file);

  const auto loaded = a.post("/v1/regions", {{"name", "model"}, {"file", "model.safetensors"}});
  ASSERT_EQ(loaded.status, 201) << loaded.body.dump();
  EXPECT_EQ(loaded.body["bytes"], 112) << "the region is the data section";
  EXPECT_EQ(a.get("/v1/regions/model/manifest").body, model());
  EXPECT_EQ(testing::region_crc(a, "model", 112), crc32c(data)) << "the data section, every byte";

  const auto saved = a.post("/v1/regions/model/save", {{"file", "out/again.safetensors"}});
  ASSERT_EQ(saved.status, 200) << saved.body.dump();
  EXPECT_EQ(saved.body["bytes"], file.size());
  EXPECT_EQ(testing::read_file(a.data_dir() / "out/again.safetensors"), file) << "byte for byte";

  ASSERT_EQ(a.post("/v1/regions", {{"name", "raw"}, {"bytes", 64}}).status, 201);
  const auto no_manifest = a.post("/v1/regions/raw/save", {{"file", "raw.safetensors"}});
  EXPECT_EQ(no_manifest.status, 409);
  EXPECT_NE(message(no_manifest).find("no manifest"), std::string::npos) << no_manifest.body.dump();
  EXPECT_FALSE(std::filesystem::exists(a.data_dir() / "raw.safetensors"));
}

TEST_F(ManifestHttp, AMalformedSafetensorsFileMakesNoRegionAndSaysWhy) {
  ASSERT_TRUE(a.started());
  struct Case {
    const char* what;
    std::vector<std::byte> file;
    const char* says;
  };
  std::vector<std::byte> huge(16, std::byte{0});
  huge[6] = std::byte{1};  // a header size of 2^48 bytes
  const Case cases[] = {
      {"overlap",
       safetensors_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                        counting(6)),
       "\"b\" starts at 2, not at 4"},
      {"past the data",
       safetensors_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", counting(4)),
       "end at byte 8 of a 4-byte"},
      {"unknown dtype",
       safetensors_file(R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", counting(4)),
       "dtype \"Q4\""},
      {"twice",
       safetensors_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                        counting(4)),
       "\"a\" twice"},
      {"header size", huge, "more than the format's"},
      {"not JSON", safetensors_file("{\"a\": [", counting(4)), "not JSON"},
  };
  for (const Case& c : cases) {
    testing::write_file(a.data_dir() / "bad.safetensors", c.file);
    const auto r = a.post("/v1/regions", {{"name", "bad"}, {"file", "bad.safetensors"}});
    EXPECT_EQ(r.status, 400) << c.what << ": " << r.body.dump();
    EXPECT_NE(message(r).find(c.says), std::string::npos) << c.what << ": " << r.body.dump();
    EXPECT_EQ(a.get("/v1/regions/bad").status, 404) << c.what << " made a region";
  }
}

// Manifests travel with writes (docs/tensors.md): a whole region written through a grant gives the target its
// manifest with the new version; a partial write does not; one that does not fit fails the write.
class ManifestWrites : public testing::TwoAgents {
 protected:
  // `source` on a (112 bytes of a counting pattern, with model()), `target` on b (112 bytes, given `manifest`
  // or none), and a write grant on the target that takes landing reports.
  void SetUp() override {
    ASSERT_TRUE(a.started() && b.started());
    ASSERT_EQ(a.post("/v1/regions", {{"name", "source"}, {"bytes", 112}, {"manifest", model()}}).status, 201);
    ASSERT_EQ(b.post("/v1/regions", {{"name", "target"}, {"bytes", 112}}).status, 201);
    grant = testing::region_grant(b, "target", {{"access", "write"}, {"writer", "trainer"}});
  }
  // POST /v1/transfers on a of `extra` over a whole-region write verified as it lands; the transfer's end.
  json write(json extra = json::object()) {
    json body{{"source", {{"region", "source"}}},
              {"targets",
               {{{"grant", grant["key"]}, {"url", b.url()}, {"region", "target"}, {"grantId", grant["id"]}}}},
              {"verify", "crc32c"}};
    body.update(extra, /*merge_objects=*/true);
    const auto started = a.post("/v1/transfers", body);
    EXPECT_EQ(started.status, 202) << started.body.dump();
    return a.wait_transfer(started.body.value("id", ""));
  }
  std::uint64_t version() { return b.get("/v1/regions/target/version").body.value("version", 0u); }
  json grant;
};

TEST_F(ManifestWrites, AWholeRegionWriteGivesTheTargetTheSourcesManifestWithItsNewVersion) {
  EXPECT_EQ(b.get("/v1/regions/target/manifest").status, 404);
  const json done = write();
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_EQ(version(), 1u);
  EXPECT_EQ(b.get("/v1/regions/target/manifest").body, model());
  EXPECT_EQ(b.get("/v1/regions/target").body["tensors"], 3);
}

TEST_F(ManifestWrites, APartOfTheRegionLeavesTheTargetsManifestAsItWas) {
  const json done = write({{"source", {{"offset", 0}, {"length", 64}}}});
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_EQ(version(), 1u) << "the write committed";
  EXPECT_EQ(b.get("/v1/regions/target/manifest").status, 404) << "64 of 112 bytes carry no manifest";
}

TEST_F(ManifestWrites, AManifestThatDoesNotFitTheTargetFailsTheWriteNamingTheTensor) {
  json too_long = {{"tensors", json::array({tensor("model.norm.weight", "F32", {64}, 0, 256)})}};
  const json done = write({{"manifest", too_long}});
  EXPECT_EQ(done["state"], "Failed") << done.dump();
  EXPECT_NE(done.dump().find("model.norm.weight"), std::string::npos) << done.dump();
  EXPECT_EQ(version(), 0u) << "nothing committed";
  EXPECT_EQ(b.get("/v1/regions/target/manifest").status, 404);
}

TEST_F(ManifestWrites, AScatterWriteTakesNoManifest) {
  const auto scatter =
      a.post("/v1/transfers", {{"source", {{"region", "source"}}},
                               {"targets", {{{"grant", grant["key"]}, {"url", b.url()}}}},
                               {"ops", {{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 8}}}},
                               {"manifest", model()}});
  EXPECT_EQ(scatter.status, 400);
  EXPECT_NE(message(scatter).find("manifest: a scatter write keeps"), std::string::npos)
      << scatter.body.dump();
}

}  // namespace
}  // namespace conduit
