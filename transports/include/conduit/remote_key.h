// RemoteKey: everything a peer needs to reach a registered range, and nothing that outlives it: the key is
// valid only while the target keeps the registration. It crosses process and node boundaries as JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"

namespace conduit {

// One rail of the target: the fabric address of its endpoint and the key its domain gave the range.
struct RailKey {
  std::vector<std::byte> address;
  std::uint64_t key = 0;
  bool operator==(const RailKey&) const = default;
};

struct RemoteKey {
  std::string provider;      // "tcp;ofi_rxm", "shm", ...: a peer on another provider cannot use it
  std::uint64_t base = 0;    // remote address of offset 0: the virtual address under FI_MR_VIRT_ADDR, else 0
  std::uint64_t length = 0;  // bytes reachable from base
  std::vector<RailKey> rails;
  // The range is a host staging buffer in front of device memory the provider cannot reach: bytes written
  // reach the device only when the owner copies them (POST /v1/regions/{name}/staging, docs/gpu.md).
  bool staged = false;

  bool operator==(const RemoteKey&) const = default;

  nlohmann::json to_json() const;
  static Result<RemoteKey> from_json(const nlohmann::json& j);
  std::string to_string() const;                               // compact JSON
  static Result<RemoteKey> parse(std::string_view json_text);  // from_json of text, errors never throw
};

std::string to_hex(std::span<const std::byte> bytes);
Result<std::vector<std::byte>> from_hex(std::string_view hex);

}  // namespace conduit
