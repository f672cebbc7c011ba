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
