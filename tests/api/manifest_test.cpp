// A region's manifest: what it accepts, what it refuses (naming the tensor), and the .safetensors header it
// reads and writes. Files written by the real `safetensors` package are checked by the SDK's suite.
#include "conduit/api/manifest.h"

#include <gtest/gtest.h>

#include <string>

namespace conduit::api {
namespace {

using json = nlohmann::json;

json tensor(const std::string& name, const std::string& dtype, json shape, std::uint64_t offset,
            std::uint64_t length) {
  return {
      {"name", name}, {"dtype", dtype}, {"shape", std::move(shape)}, {"offset", offset}, {"length", length}};
}

// Three tensors back to back: 24 + 8 + 2 bytes.
json body() {
  return {{"tensors", json::array({tensor("model.embed.weight", "F32", {2, 3}, 0, 24),
                                   tensor("model.layers.0.norm", "BF16", {4}, 24, 8),
                                   tensor("step", "I16", json::array(), 32, 2)})},
          {"metadata", {{"format", "pt"}}}};
}

TEST(Manifest, ReadsTheRestFormAndWritesItBack) {
  auto m = Manifest::from_json(body(), 64);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->tensors.size(), 3u);
  EXPECT_EQ(m->tensors[0].name, "model.embed.weight") << "a free string, not a DNS label";
  EXPECT_EQ(m->tensors[2].shape.size(), 0u) << "a 0-d tensor";
  EXPECT_EQ(m->data_bytes(), 34u);
  EXPECT_EQ(m->metadata.at("format"), "pt");
  ASSERT_NE(m->find("model.layers.0.norm"), nullptr);
  EXPECT_EQ(m->find("model.layers.0.norm")->offset, 24u);
  EXPECT_EQ(m->find("absent"), nullptr);
  EXPECT_EQ(m->to_json(), body());
}

TEST(Manifest, RefusesWhatCannotBeTrueNamingTheTensor) {
  struct Case {
    const char* what;
    json tensors;
    std::uint64_t region = 64;
    const char* says;
  };
  const Case cases[] = {
      {"overlap", json::array({tensor("a", "F32", {4}, 0, 16), tensor("b", "F32", {4}, 8, 16)}), 64,
       "tensors[1] (b): starts at 8"},
      {"unsorted", json::array({tensor("a", "F32", {4}, 16, 16), tensor("b", "F32", {4}, 0, 16)}), 64,
       "tensors[1] (b)"},
      {"out of range", json::array({tensor("a", "F32", {8}, 40, 32)}), 64, "outside the 64-byte region"},
      {"wrong length", json::array({tensor("a", "F16", {3}, 0, 8)}), 64,
       "is not what F16 [3] takes (6 bytes)"},
      {"unknown dtype", json::array({tensor("a", "F17", {1}, 0, 4)}), 64, "dtype \"F17\""},
      {"twice", json::array({tensor("a", "U8", {1}, 0, 1), tensor("a", "U8", {1}, 1, 1)}), 64, "given twice"},
      {"reserved", json::array({tensor("__metadata__", "U8", {1}, 0, 1)}), 64, "reserved"},
      {"mid-byte", json::array({tensor("a", "F4", {3}, 0, 1)}), 64, "end mid-byte"},
      {"overflow", json::array({tensor("a", "F64", {1ULL << 40, 1ULL << 40}, 0, 8)}), 64, "overflows"},
      {"empty name", json::array({tensor("", "U8", {1}, 0, 1)}), 64, "tensors[0].name"},
  };
  for (const Case& c : cases) {
    auto m = Manifest::from_json({{"tensors", c.tensors}}, c.region);
    ASSERT_FALSE(m) << c.what << " was accepted";
    EXPECT_EQ(m.error().code, ErrorCode::InvalidArgument) << c.what;
    EXPECT_NE(m.error().message.find(c.says), std::string::npos) << c.what << ": " << m.error().message;
  }
  json extra = body();
  extra["tensors"][0]["stride"] = 1;
  EXPECT_FALSE(Manifest::from_json(extra, 64)) << "unknown fields are refused";
  EXPECT_FALSE(Manifest::from_json({{"tensors", json::array()}, {"metadata", {{"k", 1}}}}, 64));
}

TEST(Manifest, EmptyAndSubByteTensorsHaveTheLengthsSafetensorsGivesThem) {
  auto m = Manifest::from_json(
      {{"tensors", json::array({tensor("none", "F32", {0, 7}, 0, 0), tensor("packed", "F4", {6}, 0, 3),
                                tensor("flag", "BOOL", {1}, 3, 1)})}},
      4);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(dtype_bits("F8_E4M3"), 8u);
  EXPECT_EQ(dtype_bits("F6_E2M3"), 6u);
  EXPECT_FALSE(dtype_bits("f32")) << "the names are safetensors' own, upper case";
}

TEST(SafetensorsHeader, WrittenPaddedToEightBytesAndReadBackTheSame) {
  auto m = Manifest::from_json(body(), 34);
  ASSERT_TRUE(m) << m.error().message;
  auto header = m->safetensors_header();
  ASSERT_TRUE(header) << header.error().message;
  EXPECT_EQ(header->size() % 8, 0u);
  const json doc = json::parse(*header);
  EXPECT_EQ(doc["model.layers.0.norm"]["data_offsets"], json::array({24, 32}));
  EXPECT_EQ(doc["__metadata__"]["format"], "pt");
  auto back = Manifest::from_safetensors_header(*header, 34);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->to_json(), m->to_json());
}

TEST(SafetensorsHeader, RefusesMalformedHeadersWithTheReason) {
  const auto refused = [](const std::string& header, std::uint64_t data, const std::string& says) {
    auto m = Manifest::from_safetensors_header(header, data);
    ASSERT_FALSE(m) << header;
    EXPECT_NE(m.error().message.find(says), std::string::npos) << m.error().message;
  };
  refused(
      "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
      " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
      2, "\"a\" twice");
  refused("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 2,
          "starts at 1, not at 0");
  refused("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 5,
          "end at byte 1 of a 5-byte");
  refused("{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 1]}}", 1,
          "is not what U8 [2] takes");
  refused("{\"a\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "dtype \"Q4\"");
  refused("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 0]}}", 1, "end before begin");
  refused("{\"__metadata__\": {\"n\": 1}}", 0, "must be a string");
  refused("[1, 2]", 0, "must be a JSON object");
  refused("{\"a\": ", 0, "not JSON");
}

// A rank's slice of a larger tensor: rows [2, 4) of an F32 [6, 3].
json placed(const std::string& name, const std::string& dtype, json shape, std::uint64_t offset,
            std::uint64_t length, json global, json start) {
  json t = tensor(name, dtype, std::move(shape), offset, length);
  t["placement"] = {{"globalShape", std::move(global)}, {"start", std::move(start)}};
  return t;
}

TEST(Placement, ReadsWritesBackAndSaysWhereTheSliceSits) {
  const json body = {{"tensors", json::array({placed("w", "F32", {2, 3}, 0, 24, {6, 3}, {2, 0}),
                                              tensor("norm", "BF16", {4}, 24, 8)})}};
  auto m = Manifest::from_json(body, 32);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE(m->tensors[0].placement);
  EXPECT_EQ(m->tensors[0].global_shape(), (std::vector<std::uint64_t>{6, 3}));
  EXPECT_EQ(m->tensors[0].start(), (std::vector<std::uint64_t>{2, 0}));
  EXPECT_FALSE(m->tensors[1].placement) << "no placement: the whole tensor";
  EXPECT_EQ(m->tensors[1].global_shape(), (std::vector<std::uint64_t>{4}));
  EXPECT_EQ(m->tensors[1].start(), (std::vector<std::uint64_t>{0}));
  EXPECT_EQ(m->to_json()["tensors"], body["tensors"]);
  // 0-d and empty slices are placements too: torch's uneven last shard may hold no rows.
  EXPECT_TRUE(Manifest::from_json(
      {{"tensors", json::array({placed("s", "I8", json::array(), 0, 1, json::array(), json::array()),
                                placed("e", "F32", {0, 3}, 1, 0, {5, 3}, {5, 0})})}},
      1));
}

TEST(Placement, RefusesWhatCannotBeTrueNamingTheTensor) {
  struct Case {
    const char* what;
    json tensor;
    const char* says;
  };
  const Case cases[] = {
      {"ranks", placed("w", "F32", {2, 3}, 0, 24, {6}, {2, 0}),
       "tensors[0] (w): placement: globalShape [6] and start [2,0] must have as many dimensions as shape "
       "[2,3]"},
      {"past the end", placed("w", "F32", {2, 3}, 0, 24, {6, 3}, {5, 0}),
       "tensors[0] (w): placement: start [5,0] + shape [2,3] passes globalShape [6,3] in dimension 0"},
      {"wider than the whole", placed("w", "F32", {2, 3}, 0, 24, {6, 2}, {0, 0}), "in dimension 1"},
      {"sub-byte sliced", placed("p", "F4", {2}, 0, 1, {4}, {2}),
       "tensors[0] (p): placement: a F4 tensor is placed only whole (its elements share bytes)"},
      {"global overflow", placed("w", "F64", {1, 1}, 0, 8, {1ULL << 40, 1ULL << 40}, {0, 0}),
       "placement: globalShape: shape overflows 64 bits"},
      {"unknown field",
       [] {
         json t = placed("w", "F32", {1}, 0, 4, {1}, {0});
         t["placement"]["mesh"] = 1;
         return t;
       }(),
       "tensors[0].placement.mesh: unknown field"},
      {"start missing",
       [] {
         json t = tensor("w", "F32", {1}, 0, 4);
         t["placement"] = {{"globalShape", {1}}};
         return t;
       }(),
       "tensors[0].placement.start: is required"},
      {"negative start", placed("w", "F32", {1}, 0, 4, {2}, {-1}),
       "tensors[0].placement.start: each dimension must be an integer in [0, 2^63)"},
      {"not an object",
       [] {
         json t = tensor("w", "F32", {1}, 0, 4);
         t["placement"] = json::array();
         return t;
       }(),
       "tensors[0].placement: must be an object"},
  };
  for (const Case& c : cases) {
    auto m = Manifest::from_json({{"tensors", json::array({c.tensor})}}, 64);
    ASSERT_FALSE(m) << c.what << " was accepted";
    EXPECT_EQ(m.error().code, ErrorCode::InvalidArgument) << c.what;
    EXPECT_NE(m.error().message.find(c.says), std::string::npos) << c.what << ": " << m.error().message;
  }
  // A whole sub-byte tensor may say so.
  EXPECT_TRUE(Manifest::from_json({{"tensors", json::array({placed("p", "F4", {2}, 0, 1, {2}, {0})})}}, 1));
  // The key a .safetensors file carries placements under is not the manifest's own to use.
  auto reserved =
      Manifest::from_json({{"tensors", json::array()}, {"metadata", {{"conduit.placement", "{}"}}}}, 0);
  ASSERT_FALSE(reserved);
  EXPECT_NE(reserved.error().message.find("metadata.conduit.placement: the key is reserved"),
            std::string::npos)
      << reserved.error().message;
}

TEST(Placement, ASafetensorsHeaderCarriesItInItsMetadata) {
  auto m = Manifest::from_json({{"tensors", json::array({placed("w", "F32", {2, 3}, 0, 24, {6, 3}, {2, 0}),
                                                         tensor("norm", "BF16", {4}, 24, 8)})},
                                {"metadata", {{"format", "pt"}, {"step", "7"}}}},
                               32);
  ASSERT_TRUE(m) << m.error().message;
  auto header = m->safetensors_header();
  ASSERT_TRUE(header) << header.error().message;
  const json doc = json::parse(*header);
  EXPECT_EQ(doc["w"]["shape"], json::array({2, 3})) << "the file's shape is the slice's";
  EXPECT_EQ(doc["__metadata__"]["conduit.placement"], R"({"w":{"globalShape":[6,3],"start":[2,0]}})");
  EXPECT_EQ(doc["__metadata__"]["format"], "pt");
  auto back = Manifest::from_safetensors_header(*header, 32);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->to_json(), m->to_json()) << "placements back in the tensors, the key out of the metadata";
  EXPECT_FALSE(back->metadata.contains("conduit.placement"));

  // Without a placement, no key: the header is what it was before placements existed.
  auto plain = Manifest::from_json(body(), 34);
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->safetensors_header()->find("conduit.placement"), std::string::npos);
}

TEST(Placement, AMalformedPlacementInAHeaderIsRefusedWithTheReason) {
  const auto header = [](const std::string& placement) {
    return "{\"__metadata__\": {\"conduit.placement\": " + json(placement).dump() +
           "}, \"w\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}";
  };
  const auto refused = [&](const std::string& placement, const std::string& says) {
    auto m = Manifest::from_safetensors_header(header(placement), 2);
    ASSERT_FALSE(m) << placement;
    EXPECT_NE(m.error().message.find(says), std::string::npos) << m.error().message;
  };
  refused("not json", "__metadata__.conduit.placement: must be a JSON object");
  refused("[1]", "__metadata__.conduit.placement: must be a JSON object");
  refused(R"({"v": {"globalShape": [2], "start": [0]}})",
          "names tensor \"v\", which the header does not hold");
  refused(R"({"w": {"globalShape": [2]}})", "__metadata__.conduit.placement.\"w\".start: is required");
  refused(R"({"w": {"globalShape": [3], "start": [2]}})", "tensors[0] (w): placement: start [2] + shape [2]");
  auto ok = Manifest::from_safetensors_header(header(R"({"w": {"globalShape": [4], "start": [2]}})"), 2);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->tensors[0].start(), std::vector<std::uint64_t>{2});
}

TEST(SafetensorsHeader, ARegionWithGapsIsNotAFileAndSaysWhere) {
  auto m = Manifest::from_json(
      {{"tensors", json::array({tensor("a", "F32", {1}, 0, 4), tensor("b", "F32", {1}, 8, 4)})}}, 16);
  ASSERT_TRUE(m) << m.error().message;
  auto header = m->safetensors_header();
  ASSERT_FALSE(header);
  EXPECT_EQ(header.error().code, ErrorCode::Conflict);
  EXPECT_NE(header.error().message.find("\"b\" starts at 8, after a gap from 4"), std::string::npos)
      << header.error().message;
}

TEST(SafetensorsHeader, SizePrefixIsBoundedByTheFormatAndTheFile) {
  const unsigned char small[8] = {16, 0, 0, 0, 0, 0, 0, 0};
  auto n = safetensors_header_size(small, 100);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, 16u);
  EXPECT_FALSE(safetensors_header_size(small, 20)) << "16 bytes of header do not fit after 8 in 20";
  const unsigned char huge[8] = {0, 0, 0, 0, 0, 0, 0, 1};
  auto too_big = safetensors_header_size(huge, UINT64_MAX);
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.error().message.find("more than the format's"), std::string::npos);
}

}  // namespace
}  // namespace conduit::api
