// What the provider's mr_mode bits oblige us to do, decided once per domain. Bits we do not implement are
// refused by name so "auto" never picks a provider we would drive wrongly.
#pragma once

#include <cstdint>
#include <string>

#include "conduit/common/result.h"

namespace conduit::fabric {

struct MrPolicy {
  bool local_desc = false;       // FI_MR_LOCAL: pass fi_mr_desc() of a registered local buffer with every op
  bool virtual_address = false;  // FI_MR_VIRT_ADDR: remote address = target VA; otherwise offset into the MR
  bool provider_key = false;     // FI_MR_PROV_KEY: the provider picks the key; read it with fi_mr_key()
  bool allocated_only = false;   // FI_MR_ALLOCATED: only mapped memory may be registered (ours always is)
  bool bind_endpoint = false;    // FI_MR_ENDPOINT: bind each MR to the endpoint and enable it
  bool device_memory = false;    // FI_MR_HMEM: device buffers must be registered (host ones are anyway)
};

// The bits we ask for in hints: everything in MrPolicy.
std::uint64_t supported_mr_mode_bits();

// Fails with Unsupported naming the first bit we do not handle.
Result<MrPolicy> mr_policy(std::uint64_t mr_mode);

// "FI_MR_LOCAL|FI_MR_VIRT_ADDR" or "none".
std::string mr_mode_to_string(std::uint64_t mr_mode);

}  // namespace conduit::fabric
