// The check of a verified scatter-gather transfer (transfer/scatter_verify.h) without a second agent: the
// ranges each end sums, in op order, and the verdict on two sums, which is what a target whose bytes changed
// under it would meet (a second writer between landing and the check is hard to arrange for real).
#include "transfer/scatter_verify.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"

namespace conduit::agent {
namespace {

// Out of order on purpose: each end sums the ops as listed, not as they lie.
const std::vector<ScatterOp> kOps{{.source_offset = 8192, .target_offset = 0, .length = 100},
                                  {.source_offset = 0, .target_offset = 4096, .length = 3000},
                                  {.source_offset = 5000, .target_offset = 100, .length = 1}};

TEST(ScatterVerify, EachEndSumsItsRangesInOpOrder) {
  const auto local = local_ranges(kOps);
  ASSERT_EQ(local.size(), 3U);
  EXPECT_EQ(local[0].offset, 8192U);
  EXPECT_EQ(local[1].offset, 0U);
  EXPECT_EQ(local[2].length, 1U);
  const auto grant = grant_ranges(kOps);
  ASSERT_EQ(grant.ranges.size(), 3U);
  EXPECT_EQ(grant.ranges[0].offset, 0U);
  EXPECT_EQ(grant.ranges[1].offset, 4096U);
  EXPECT_EQ(grant.ranges[2].offset, 100U);
  // On the wire and back, as the grant's agent reads it.
  auto read = api::GrantChecksumRequest::from_json(grant.to_json());
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_EQ(read->ranges.size(), 3U);
  EXPECT_EQ(read->ranges[1].length, 3000U);

  // The local sum is the CRC32C of the ops' bytes end to end.
  auto region = MemoryRegion::allocate_host(16384);
  ASSERT_TRUE(region);
  fill_pattern(region->bytes(), 3);
  std::vector<std::byte> end_to_end;
  for (const ScatterOp& op : kOps) {
    const auto bytes = region->bytes().subspan(op.source_offset, op.length);
    end_to_end.insert(end_to_end.end(), bytes.begin(), bytes.end());
  }
  auto sum = cuda::region_crc32c_ranges(*region, local);
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(*sum, crc32c(end_to_end));
}

TEST(ScatterVerify, EqualSumsPass) {
  EXPECT_FALSE(compare_scatter_sums({.local = 7, .grant = 7, .region = "kv"}, kOps));
}

TEST(ScatterVerify, AMismatchFailsSayingCrc32cAndWhoseSumWasWhat) {
  const ScatterSums sums{.local = 0x1234abcd,
                         .grant = 0xdeadbeef,
                         .region = "kv",
                         .grant_id = "g-42",
                         .url = "http://node-b:7070",
                         .op = OpKind::Write};
  const auto failure = compare_scatter_sums(sums, kOps);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->state, TransferState::Failed);
  EXPECT_STREQ(failure->reason, "ChecksumMismatch");
  const std::string& m = failure->message;
  EXPECT_EQ(m.rfind("crc32c mismatch over the 3 ops' 3101 bytes", 0), 0U) << m;
  EXPECT_NE(m.find("the source (region \"kv\" on this agent) sums 0x1234abcd"), std::string::npos) << m;
  EXPECT_NE(m.find("the target (grant g-42 at http://node-b:7070) sums 0xdeadbeef"), std::string::npos) << m;
  EXPECT_NE(m.find("retry the batch"), std::string::npos) << m;

  // A read's local region is the one written: the roles swap, the sums stay whose they are.
  ScatterSums read = sums;
  read.op = OpKind::Read;
  const auto pulled = compare_scatter_sums(read, kOps);
  ASSERT_TRUE(pulled);
  EXPECT_NE(pulled->message.find("the target (region \"kv\" on this agent) sums 0x1234abcd"),
            std::string::npos)
      << pulled->message;
  EXPECT_NE(pulled->message.find("the source (grant g-42 at http://node-b:7070) sums 0xdeadbeef"),
            std::string::npos)
      << pulled->message;
}

}  // namespace
}  // namespace conduit::agent
