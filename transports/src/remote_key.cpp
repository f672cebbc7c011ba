#include "conduit/remote_key.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace conduit {

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(kDigits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(kDigits[std::to_integer<unsigned>(b) & 0xf]);
  }
  return out;
}

Result<std::vector<std::byte>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return make_error(ErrorCode::InvalidArgument, "hex string has odd length");
  std::vector<std::byte> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
    if (ec != std::errc{} || ptr != hex.data() + 2 * i + 2) {
      return make_error(ErrorCode::InvalidArgument, "invalid hex digit at position " + std::to_string(2 * i));
    }
    out[i] = static_cast<std::byte>(v);
  }
  return out;
}

// Keys and bases are full 64-bit values; JSON numbers above 2^53 lose precision in many clients, so both
// travel as decimal strings. Length stays a number: no region comes near 2^53 bytes.
nlohmann::json RemoteKey::to_json() const {
  nlohmann::json rails_json = nlohmann::json::array();
  for (const RailKey& r : rails) {
    rails_json.push_back({{"address", to_hex(r.address)}, {"key", std::to_string(r.key)}});
  }
  nlohmann::json j{
      {"provider", provider}, {"base", std::to_string(base)}, {"length", length}, {"rails", rails_json}};
  if (staged) j["staged"] = true;  // only when set, so keys of host memory read as they always did
  return j;
}

namespace {

Result<std::uint64_t> parse_u64(const nlohmann::json& j, std::string_view field) {
  if (!j.is_string()) {
    return make_error(ErrorCode::InvalidArgument, std::string(field) + " must be a decimal string");
  }
  const auto& s = j.get_ref<const std::string&>();
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (s.empty() || ec != std::errc{} || ptr != s.data() + s.size()) {
    return make_error(ErrorCode::InvalidArgument,
                      std::string(field) + " is not an unsigned 64-bit decimal: \"" + s + "\"");
  }
  return v;
}

}  // namespace

Result<RemoteKey> RemoteKey::from_json(const nlohmann::json& j) {
  auto bad = [](std::string why) { return make_error(ErrorCode::InvalidArgument, "remote key: " + why); };
  if (!j.is_object()) return bad("must be a JSON object");
  for (const auto& [name, _] : j.items()) {
    if (name != "provider" && name != "base" && name != "length" && name != "rails" && name != "staged") {
      return bad("unknown field \"" + name + "\"");
    }
  }
  if (!j.contains("provider") || !j["provider"].is_string() || j["provider"].get<std::string>().empty()) {
    return bad("provider must be a non-empty string");
  }
  // nlohmann stores non-negative literals built in C++ as signed integers; accept any integer >= 0.
  if (!j.contains("length") || !j["length"].is_number_integer() || j["length"].get<std::int64_t>() < 0) {
    return bad("length must be an unsigned integer");
  }
  if (!j.contains("rails") || !j["rails"].is_array() || j["rails"].empty()) {
    return bad("rails must be a non-empty array");
  }
  RemoteKey key;
  key.provider = j["provider"].get<std::string>();
  key.length = j["length"].get<std::uint64_t>();
  if (!j.contains("base")) return bad("base is missing");
  auto base = parse_u64(j["base"], "base");
  if (!base) return bad(base.error().message);
  key.base = *base;
  if (key.base + key.length < key.base) return bad("base + length overflows");
  if (j.contains("staged")) {
    if (!j["staged"].is_boolean()) return bad("staged must be a boolean");
    key.staged = j["staged"].get<bool>();
  }
  for (const auto& r : j["rails"]) {
    if (!r.is_object() || !r.contains("address") || !r["address"].is_string() || !r.contains("key")) {
      return bad("each rail needs an address (hex string) and a key");
    }
    auto address = from_hex(r["address"].get<std::string>());
    if (!address) return bad("rail address: " + address.error().message);
    if (address->empty()) return bad("rail address is empty");
    auto k = parse_u64(r["key"], "key");
    if (!k) return bad(k.error().message);
    key.rails.push_back(RailKey{std::move(*address), *k});
  }
  return key;
}

std::string RemoteKey::to_string() const { return to_json().dump(); }

Result<RemoteKey> RemoteKey::parse(std::string_view json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::InvalidArgument, "remote key: not valid JSON");
  return from_json(j);
}

}  // namespace conduit
