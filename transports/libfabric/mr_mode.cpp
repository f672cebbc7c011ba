#include "mr_mode.h"

#include <rdma/fabric.h>

#include <array>
#include <charconv>
#include <utility>

namespace conduit::fabric {

namespace {

constexpr std::array<std::pair<std::uint64_t, const char*>, 11> kBits{{
    {FI_MR_LOCAL, "FI_MR_LOCAL"},
    {FI_MR_RAW, "FI_MR_RAW"},
    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"},
    {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},
    {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
    {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"},
    {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
    {FI_MR_HMEM, "FI_MR_HMEM"},
    {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"},
    {FI_MR_BASIC, "FI_MR_BASIC"},
}};

}  // namespace

std::uint64_t supported_mr_mode_bits() {
  return FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_HMEM;
}

std::string mr_mode_to_string(std::uint64_t mr_mode) {
  std::string out;
  for (const auto& [bit, name] : kBits) {
    if ((mr_mode & bit) != 0) {
      if (!out.empty()) out += '|';
      out += name;
      mr_mode &= ~bit;
    }
  }
  if (mr_mode != 0) {
    char hex[17] = {};
    std::to_chars(hex, hex + 16, mr_mode, 16);
    out += (out.empty() ? "" : "|") + std::string("0x") + hex;
  }
  return out.empty() ? "none" : out;
}

Result<MrPolicy> mr_policy(std::uint64_t mr_mode) {
  // FI_MR_BASIC is the pre-1.5 spelling of VIRT_ADDR|ALLOCATED|PROV_KEY; FI_MR_SCALABLE (2) of "none".
  if ((mr_mode & FI_MR_BASIC) != 0) {
    mr_mode = (mr_mode & ~static_cast<std::uint64_t>(FI_MR_BASIC)) | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
              FI_MR_PROV_KEY;
  }
  mr_mode &= ~static_cast<std::uint64_t>(FI_MR_SCALABLE);
  const std::uint64_t unhandled = mr_mode & ~supported_mr_mode_bits();
  if (unhandled != 0) {
    const std::uint64_t first = unhandled & (~unhandled + 1);
    return make_error(ErrorCode::Unsupported, "provider requires mr_mode " + mr_mode_to_string(first) +
                                                  ", which Conduit does not implement");
  }
  MrPolicy p;
  p.local_desc = (mr_mode & FI_MR_LOCAL) != 0;
  p.virtual_address = (mr_mode & FI_MR_VIRT_ADDR) != 0;
  p.provider_key = (mr_mode & FI_MR_PROV_KEY) != 0;
  p.allocated_only = (mr_mode & FI_MR_ALLOCATED) != 0;
  p.bind_endpoint = (mr_mode & FI_MR_ENDPOINT) != 0;
  p.device_memory = (mr_mode & FI_MR_HMEM) != 0;
  return p;
}

}  // namespace conduit::fabric
