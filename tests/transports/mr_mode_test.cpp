#include "mr_mode.h"

#include <gtest/gtest.h>
#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace conduit::fabric {
namespace {

std::uint64_t bits(std::uint64_t b) { return b; }

void expect_policy(const MrPolicy& p, bool local_desc, bool virtual_address, bool provider_key,
                   bool allocated_only, bool bind_endpoint, bool device_memory) {
  EXPECT_EQ(p.local_desc, local_desc);
  EXPECT_EQ(p.virtual_address, virtual_address);
  EXPECT_EQ(p.provider_key, provider_key);
  EXPECT_EQ(p.allocated_only, allocated_only);
  EXPECT_EQ(p.bind_endpoint, bind_endpoint);
  EXPECT_EQ(p.device_memory, device_memory);
}

// tcp;ofi_rxm asks for nothing: offsets into the MR, keys we choose, no descriptors.
TEST(MrPolicy, NoBitsMeansNoObligations) {
  auto p = mr_policy(0);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, false, false, false, false, false, false);
}

// shm on a build with HMEM support.
TEST(MrPolicy, ShmVirtAddrAndHmem) {
  auto p = mr_policy(bits(FI_MR_VIRT_ADDR) | FI_MR_HMEM);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, false, true, false, false, false, true);
}

TEST(MrPolicy, VerbsLikeProvider) {
  auto p = mr_policy(bits(FI_MR_LOCAL) | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, true, true, true, true, true, false);
}

// Each supported bit must switch on its own field and no other, or a swapped assignment would slip by.
TEST(MrPolicy, EachSupportedBitMapsToItsOwnField) {
  struct Case {
    std::uint64_t bit;
    bool MrPolicy::*field;
  };
  const Case cases[] = {
      {FI_MR_LOCAL, &MrPolicy::local_desc},       {FI_MR_VIRT_ADDR, &MrPolicy::virtual_address},
      {FI_MR_PROV_KEY, &MrPolicy::provider_key},  {FI_MR_ALLOCATED, &MrPolicy::allocated_only},
      {FI_MR_ENDPOINT, &MrPolicy::bind_endpoint}, {FI_MR_HMEM, &MrPolicy::device_memory},
  };
  for (const auto& c : cases) {
    auto p = mr_policy(c.bit);
    ASSERT_TRUE(p.ok()) << mr_mode_to_string(c.bit) << ": " << p.error().message;
    for (const auto& other : cases) {
      EXPECT_EQ((*p).*other.field, other.bit == c.bit)
          << "mr_mode " << mr_mode_to_string(c.bit) << ", field for " << mr_mode_to_string(other.bit);
    }
  }
}

// FI_MR_BASIC is the pre-1.5 spelling of VIRT_ADDR|ALLOCATED|PROV_KEY; treating it as an unknown bit would
// refuse old providers, and treating it as "none" would send offsets where they expect addresses.
TEST(MrPolicy, BasicExpandsToVirtAddrAllocatedProvKey) {
  auto p = mr_policy(FI_MR_BASIC);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, false, true, true, true, false, false);
}

TEST(MrPolicy, BasicKeepsOtherSupportedBits) {
  auto p = mr_policy(bits(FI_MR_BASIC) | FI_MR_LOCAL);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, true, true, true, true, false, false);
}

TEST(MrPolicy, ScalableMeansNoObligations) {
  auto p = mr_policy(FI_MR_SCALABLE);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, false, false, false, false, false, false);
}

TEST(MrPolicy, UnhandledBitsAreRefusedByName) {
  struct Case {
    std::uint64_t bit;
    const char* name;
  };
  for (const auto& c :
       {Case{FI_MR_RAW, "FI_MR_RAW"}, Case{FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
        Case{FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, Case{FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"}}) {
    auto p = mr_policy(c.bit);
    ASSERT_FALSE(p.ok()) << c.name << " was accepted";
    EXPECT_EQ(p.error().code, ErrorCode::Unsupported) << c.name;
    EXPECT_NE(p.error().message.find(c.name), std::string::npos) << p.error().message;
  }
}

// An unhandled bit hidden among supported ones must still refuse the provider.
TEST(MrPolicy, UnhandledBitAmongSupportedOnesIsRefused) {
  auto p = mr_policy(bits(FI_MR_LOCAL) | FI_MR_VIRT_ADDR | FI_MR_RMA_EVENT | FI_MR_PROV_KEY);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::Unsupported);
  EXPECT_NE(p.error().message.find("FI_MR_RMA_EVENT"), std::string::npos) << p.error().message;
  EXPECT_EQ(p.error().message.find("FI_MR_LOCAL"), std::string::npos) << p.error().message;
}

TEST(MrPolicy, BitNewerThanThisLibfabricIsRefused) {
  auto p = mr_policy(bits(1) << 40);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::Unsupported);
}

TEST(MrPolicy, HintsAskForExactlyTheSupportedBits) {
  EXPECT_EQ(supported_mr_mode_bits(), bits(FI_MR_LOCAL) | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                          FI_MR_ENDPOINT | FI_MR_HMEM);
  auto p = mr_policy(supported_mr_mode_bits());
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_policy(*p, true, true, true, true, true, true);
}

TEST(MrModeToString, NoneForZero) { EXPECT_EQ(mr_mode_to_string(0), "none"); }

TEST(MrModeToString, NamesBitsInBitOrder) {
  EXPECT_EQ(mr_mode_to_string(FI_MR_LOCAL), "FI_MR_LOCAL");
  EXPECT_EQ(mr_mode_to_string(bits(FI_MR_VIRT_ADDR) | FI_MR_LOCAL), "FI_MR_LOCAL|FI_MR_VIRT_ADDR");
  EXPECT_EQ(mr_mode_to_string(bits(FI_MR_VIRT_ADDR) | FI_MR_HMEM), "FI_MR_VIRT_ADDR|FI_MR_HMEM");
  EXPECT_EQ(mr_mode_to_string(bits(FI_MR_RAW) | FI_MR_COLLECTIVE), "FI_MR_RAW|FI_MR_COLLECTIVE");
  EXPECT_EQ(mr_mode_to_string(FI_MR_BASIC), "FI_MR_BASIC");
}

// A bit from a libfabric newer than this build can only be shown as a mask; printed as "0x" followed by
// decimal digits it would point the reader at the wrong bit of fabric.h.
TEST(MrModeToString, UnknownBitsShownInHex) {
  EXPECT_EQ(mr_mode_to_string(bits(1) << 12), "0x1000");
  EXPECT_EQ(mr_mode_to_string(bits(FI_MR_LOCAL) | (bits(1) << 12)), "FI_MR_LOCAL|0x1000");
}

}  // namespace
}  // namespace conduit::fabric
