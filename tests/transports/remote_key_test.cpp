#include "conduit/remote_key.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace conduit {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::vector<std::byte> bytes(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (unsigned v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

RemoteKey three_rail_key() {
  RemoteKey k;
  k.provider = "verbs;ofi_rxm";
  k.base = 0x7f12'3456'7000;
  k.length = 256u << 20;
  k.rails = {RailKey{bytes({0x00, 0x01, 0xfe, 0xff}), 0},
             RailKey{bytes({0x0a, 0x00, 0x00, 0x02, 0x12, 0x34}), kMax}, RailKey{bytes({0xab}), kMax - 1}};
  return k;
}

// A well-formed key as a peer would send it; each rejection test breaks exactly one thing in it.
json valid_json() {
  return json{{"provider", "tcp;ofi_rxm"},
              {"base", "0"},
              {"length", std::uint64_t{4096}},
              {"rails", json::array({json{{"address", "0a000001"}, {"key", "42"}}})}};
}

void expect_rejected(const json& j, const std::string& expected_in_message) {
  auto r = RemoteKey::from_json(j);
  ASSERT_FALSE(r.ok()) << "accepted " << j.dump();
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument) << j.dump();
  EXPECT_NE(r.error().message.find(expected_in_message), std::string::npos)
      << "message \"" << r.error().message << "\" does not mention \"" << expected_in_message << "\" for "
      << j.dump();
}

TEST(RemoteKey, ValidFixtureIsAccepted) {
  auto r = RemoteKey::from_json(valid_json());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->provider, "tcp;ofi_rxm");
  EXPECT_EQ(r->base, 0u);
  EXPECT_EQ(r->length, 4096u);
  ASSERT_EQ(r->rails.size(), 1u);
  EXPECT_EQ(r->rails[0].address, bytes({0x0a, 0x00, 0x00, 0x01}));
  EXPECT_EQ(r->rails[0].key, 42u);
}

TEST(RemoteKey, RoundTripOneRail) {
  RemoteKey k;
  k.provider = "shm";
  k.base = 0;
  k.length = 1;
  k.rails = {RailKey{bytes({0x01, 0x02}), 7}};
  auto back = RemoteKey::parse(k.to_string());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, k);
}

TEST(RemoteKey, RoundTripThreeRailsThroughTextAndJson) {
  const RemoteKey k = three_rail_key();
  auto from_text = RemoteKey::parse(k.to_string());
  ASSERT_TRUE(from_text.ok()) << from_text.error().message;
  EXPECT_EQ(*from_text, k);
  auto from_json = RemoteKey::from_json(k.to_json());
  ASSERT_TRUE(from_json.ok()) << from_json.error().message;
  EXPECT_EQ(*from_json, k);
}

// Keys and bases near 2^64 must travel as decimal strings: as JSON numbers, any client that reads them into
// a double (JavaScript, Python's json with some settings) silently rounds them to a different key.
TEST(RemoteKey, KeysAndBaseNear2To64SurviveAsDecimalStrings) {
  RemoteKey k;
  k.provider = "efa";
  k.base = kMax - 4096;
  k.length = 4096;
  k.rails = {RailKey{bytes({0xff}), kMax}, RailKey{bytes({0xee}), (std::uint64_t{1} << 53) + 1}};
  const json j = k.to_json();
  ASSERT_TRUE(j["base"].is_string());
  EXPECT_EQ(j["base"], std::to_string(kMax - 4096));
  ASSERT_TRUE(j["rails"][0]["key"].is_string());
  EXPECT_EQ(j["rails"][0]["key"], "18446744073709551615");
  EXPECT_EQ(j["rails"][1]["key"], "9007199254740993");
  auto back = RemoteKey::parse(k.to_string());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, k);
}

TEST(RemoteKey, AddressIsLowercaseHex) {
  const json j = three_rail_key().to_json();
  EXPECT_EQ(j["rails"][0]["address"], "0001feff");
  EXPECT_EQ(j["rails"][1]["address"], "0a0000021234");
}

TEST(RemoteKey, RejectsNonObject) {
  expect_rejected(json::array(), "must be a JSON object");
  expect_rejected(json("key"), "must be a JSON object");
  expect_rejected(json(nullptr), "must be a JSON object");
}

TEST(RemoteKey, RejectsMissingOrEmptyProvider) {
  json j = valid_json();
  j.erase("provider");
  expect_rejected(j, "provider");
  j = valid_json();
  j["provider"] = "";
  expect_rejected(j, "provider must be a non-empty string");
  j["provider"] = 5;
  expect_rejected(j, "provider must be a non-empty string");
}

TEST(RemoteKey, RejectsBadLength) {
  json j = valid_json();
  j["length"] = -1;
  expect_rejected(j, "length must be an unsigned integer");
  j["length"] = "4096";
  expect_rejected(j, "length must be an unsigned integer");
  j["length"] = 4096.5;
  expect_rejected(j, "length must be an unsigned integer");
  j.erase("length");
  expect_rejected(j, "length");
}

TEST(RemoteKey, NegativeLengthInTextIsRejected) {
  json j = valid_json();
  std::string text = j.dump();
  text.replace(text.find("4096"), 4, "-4096");
  auto r = RemoteKey::parse(text);
  ASSERT_FALSE(r.ok()) << "accepted " << text;
  EXPECT_NE(r.error().message.find("length"), std::string::npos) << r.error().message;
}

TEST(RemoteKey, RejectsMissingEmptyOrNonArrayRails) {
  json j = valid_json();
  j.erase("rails");
  expect_rejected(j, "rails must be a non-empty array");
  j["rails"] = json::array();
  expect_rejected(j, "rails must be a non-empty array");
  j["rails"] = json{{"address", "0a000001"}, {"key", "42"}};
  expect_rejected(j, "rails must be a non-empty array");
}

TEST(RemoteKey, RejectsMalformedRail) {
  json j = valid_json();
  j["rails"] = json::array({"0a000001"});
  expect_rejected(j, "each rail needs an address");
  j["rails"] = json::array({json{{"key", "42"}}});
  expect_rejected(j, "each rail needs an address");
  j["rails"] = json::array({json{{"address", "0a000001"}}});
  expect_rejected(j, "each rail needs an address");
  j["rails"] = json::array({json{{"address", 1234}, {"key", "42"}}});
  expect_rejected(j, "each rail needs an address");
}

TEST(RemoteKey, RejectsBadAddress) {
  json j = valid_json();
  j["rails"][0]["address"] = "0a0z";
  expect_rejected(j, "invalid hex digit at position 2");
  j["rails"][0]["address"] = "0a0";
  expect_rejected(j, "odd length");
  j["rails"][0]["address"] = "";
  expect_rejected(j, "rail address is empty");
  j["rails"][0]["address"] = "0x0a";
  expect_rejected(j, "invalid hex digit");
}

// A bad second rail must fail the whole key, not yield a key with one rail fewer than the target has.
TEST(RemoteKey, RejectsBadLaterRail) {
  json j = valid_json();
  j["rails"].push_back(json{{"address", "0a000002"}, {"key", "4x"}});
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
}

TEST(RemoteKey, RejectsKeyThatIsNotADecimalString) {
  json j = valid_json();
  j["rails"][0]["key"] = std::uint64_t{42};
  expect_rejected(j, "key must be a decimal string");
  j["rails"][0]["key"] = "";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
  j["rails"][0]["key"] = "42abc";
  expect_rejected(j, "key is not an unsigned 64-bit decimal: \"42abc\"");
  j["rails"][0]["key"] = "-1";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
  j["rails"][0]["key"] = " 42";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
  j["rails"][0]["key"] = "0x2a";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
}

TEST(RemoteKey, RejectsKeyOverflowing2To64) {
  json j = valid_json();
  j["rails"][0]["key"] = "18446744073709551616";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
  j["rails"][0]["key"] = "99999999999999999999999";
  expect_rejected(j, "key is not an unsigned 64-bit decimal");
}

TEST(RemoteKey, RejectsMissingOrBadBase) {
  json j = valid_json();
  j.erase("base");
  expect_rejected(j, "base is missing");
  j["base"] = std::uint64_t{0};
  expect_rejected(j, "base must be a decimal string");
  j["base"] = "12 ";
  expect_rejected(j, "base is not an unsigned 64-bit decimal");
  j["base"] = "18446744073709551616";
  expect_rejected(j, "base is not an unsigned 64-bit decimal");
}

// A range that wraps past 2^64 would make every bounds check on it meaningless.
TEST(RemoteKey, RejectsBasePlusLengthOverflow) {
  json j = valid_json();
  j["base"] = std::to_string(kMax - 100);
  j["length"] = std::uint64_t{101};
  expect_rejected(j, "base + length overflows");
  j["length"] = std::uint64_t{100};
  auto r = RemoteKey::from_json(j);
  EXPECT_TRUE(r.ok()) << r.error().message;
}

// An unknown field is most likely a newer peer's format; silently dropping it could drop a constraint.
TEST(RemoteKey, RejectsUnknownField) {
  json j = valid_json();
  j["offset"] = "0";
  expect_rejected(j, "unknown field \"offset\"");
}

TEST(RemoteKey, ParseRejectsInvalidJsonWithoutThrowing) {
  for (const char* text : {"", "{", "}", "{\"provider\":", "not json", "{'provider': 'tcp'}", "[1,2,",
                           "\xff\xfe", "{\"provider\":\"tcp\",}", "nul"}) {
    Result<RemoteKey> r = make_error(ErrorCode::Io, "unset");
    ASSERT_NO_THROW(r = RemoteKey::parse(text)) << text;
    ASSERT_FALSE(r.ok()) << "accepted " << text;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument) << text;
    EXPECT_NE(r.error().message.find("not valid JSON"), std::string::npos) << r.error().message;
  }
}

// Valid JSON of the wrong shape reaches from_json, whose type checks must stop it before any typed access
// (which in nlohmann::json throws).
TEST(RemoteKey, ParseRejectsWrongTypesWithoutThrowing) {
  for (const char* text :
       {"null", "42", "[]", "\"key\"", "{}", "{\"provider\":[],\"base\":\"0\",\"length\":1,\"rails\":[]}",
        "{\"provider\":\"tcp\",\"base\":{},\"length\":1,\"rails\":[{\"address\":\"00\",\"key\":\"1\"}]}",
        "{\"provider\":\"tcp\",\"base\":\"0\",\"length\":1,\"rails\":[{\"address\":[],\"key\":\"1\"}]}",
        "{\"provider\":\"tcp\",\"base\":\"0\",\"length\":1,\"rails\":[{\"address\":\"00\",\"key\":null}]}",
        "{\"provider\":\"tcp\",\"base\":\"0\",\"length\":1e400,\"rails\":[{\"address\":\"00\",\"key\":\"1\"}]"
        "}"}) {
    Result<RemoteKey> r = make_error(ErrorCode::Io, "unset");
    ASSERT_NO_THROW(r = RemoteKey::parse(text)) << text;
    ASSERT_FALSE(r.ok()) << "accepted " << text;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument) << text;
  }
}

TEST(Hex, RoundTrip) {
  const auto all = [] {
    std::vector<std::byte> v;
    for (unsigned i = 0; i < 256; ++i) v.push_back(static_cast<std::byte>(i));
    return v;
  }();
  const std::string hex = to_hex(all);
  EXPECT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(504), "fcfdfeff");
  auto back = from_hex(hex);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, all);
}

TEST(Hex, EmptyIsEmpty) {
  EXPECT_EQ(to_hex({}), "");
  auto back = from_hex("");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->empty());
}

TEST(Hex, AcceptsUppercase) {
  auto back = from_hex("ABcdEF");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, bytes({0xab, 0xcd, 0xef}));
}

TEST(Hex, RejectsOddLengthAndNonHexDigits) {
  auto odd = from_hex("abc");
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(odd.error().message.find("odd length"), std::string::npos) << odd.error().message;

  for (const char* text : {"zz", "0g", "g0", "+1", "-1", " 1", "1 ", "0x"}) {
    auto r = from_hex(text);
    ASSERT_FALSE(r.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(r.error().message.find("invalid hex digit at position 0"), std::string::npos)
        << text << ": " << r.error().message;
  }
  auto late = from_hex("0011zz");
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.error().message.find("position 4"), std::string::npos) << late.error().message;
}

}  // namespace
}  // namespace conduit
