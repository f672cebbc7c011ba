#include "conduit/slicer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "conduit/transport.h"

namespace conduit {
namespace {

Op op(std::uint64_t length, std::uint64_t local_offset = 0, std::uint64_t remote_offset = 0) {
  Op o;
  o.kind = OpKind::Write;
  o.local = nullptr;  // the slicer only does arithmetic; no registration is touched
  o.local_offset = local_offset;
  o.remote_offset = remote_offset;
  o.length = length;
  return o;
}

void expect_slice(const Slice& s, std::uint32_t op_index, std::uint32_t rail, std::uint64_t local_offset,
                  std::uint64_t remote_offset, std::uint64_t length) {
  EXPECT_EQ(s.op, op_index);
  EXPECT_EQ(s.rail, rail);
  EXPECT_EQ(s.local_offset, local_offset);
  EXPECT_EQ(s.remote_offset, remote_offset);
  EXPECT_EQ(s.length, length);
}

TEST(Slicer, ZeroLengthOpHasNoSlices) {
  const std::vector<Op> ops{op(0)};
  EXPECT_TRUE(slice_ops(ops, 4096, 2).empty());
}

TEST(Slicer, NoOpsNoSlices) { EXPECT_TRUE(slice_ops({}, 4096, 2).empty()); }

TEST(Slicer, OneByteIsOneSlice) {
  const std::vector<Op> ops{op(1, 10, 20)};
  const auto slices = slice_ops(ops, 4096, 3);
  ASSERT_EQ(slices.size(), 1u);
  expect_slice(slices[0], 0, 0, 10, 20, 1);
}

TEST(Slicer, OneByteShortOfChunkIsOneSlice) {
  const std::vector<Op> ops{op(4095)};
  const auto slices = slice_ops(ops, 4096, 2);
  ASSERT_EQ(slices.size(), 1u);
  expect_slice(slices[0], 0, 0, 0, 0, 4095);
}

TEST(Slicer, ExactlyOneChunkIsOneSlice) {
  const std::vector<Op> ops{op(4096)};
  const auto slices = slice_ops(ops, 4096, 2);
  ASSERT_EQ(slices.size(), 1u);
  expect_slice(slices[0], 0, 0, 0, 0, 4096);
}

TEST(Slicer, OneByteOverChunkIsTwoSlicesOnTwoRails) {
  const std::vector<Op> ops{op(4097)};
  const auto slices = slice_ops(ops, 4096, 2);
  ASSERT_EQ(slices.size(), 2u);
  expect_slice(slices[0], 0, 0, 0, 0, 4096);
  expect_slice(slices[1], 0, 1, 4096, 4096, 1);
}

TEST(Slicer, LengthNotAMultipleOfChunkEndsWithShortSlice) {
  const std::vector<Op> ops{op(10'000)};
  const auto slices = slice_ops(ops, 3000, 4);
  ASSERT_EQ(slices.size(), 4u);
  expect_slice(slices[0], 0, 0, 0, 0, 3000);
  expect_slice(slices[1], 0, 1, 3000, 3000, 3000);
  expect_slice(slices[2], 0, 2, 6000, 6000, 3000);
  expect_slice(slices[3], 0, 3, 9000, 9000, 1000);
}

// Local and remote offsets differ, so swapping them or dropping either base would show.
TEST(Slicer, OffsetsAdvanceFromEachOpsOwnBase) {
  const std::vector<Op> ops{op(2500, 100, 70'000)};
  const auto slices = slice_ops(ops, 1000, 1);
  ASSERT_EQ(slices.size(), 3u);
  expect_slice(slices[0], 0, 0, 100, 70'000, 1000);
  expect_slice(slices[1], 0, 0, 1100, 71'000, 1000);
  expect_slice(slices[2], 0, 0, 2100, 72'000, 500);
}

TEST(Slicer, MoreRailsThanSlicesUsesTheFirstRails) {
  const std::vector<Op> ops{op(2000)};
  const auto slices = slice_ops(ops, 1000, 8);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].rail, 0u);
  EXPECT_EQ(slices[1].rail, 1u);
}

// Restarting at rail 0 for every op would pile a batch of small ops onto rail 0 and leave the rest idle.
TEST(Slicer, RoundRobinContinuesAcrossOps) {
  const std::vector<Op> ops{op(1000, 0, 0), op(2500, 5000, 9000), op(0, 1, 1), op(1, 7, 8), op(1000)};
  const auto slices = slice_ops(ops, 1000, 3);
  ASSERT_EQ(slices.size(), 6u);
  expect_slice(slices[0], 0, 0, 0, 0, 1000);
  expect_slice(slices[1], 1, 1, 5000, 9000, 1000);
  expect_slice(slices[2], 1, 2, 6000, 10'000, 1000);
  expect_slice(slices[3], 1, 0, 7000, 11'000, 500);
  // op 2 is empty: no slice, and it does not take a turn on a rail.
  expect_slice(slices[4], 3, 1, 7, 8, 1);
  expect_slice(slices[5], 4, 2, 0, 0, 1000);
}

// For every op the slices must tile [offset, offset + length) exactly: a gap is data never sent, an overlap
// is data sent twice (and, for reads, possibly racing itself).
TEST(Slicer, SlicesTileEachOpExactlyAndDealRailsInTurn) {
  for (std::uint32_t rails = 1; rails <= 4; ++rails) {
    for (std::uint64_t chunk : {1u, 2u, 3u, 7u, 64u, 100u, 4096u}) {
      for (std::uint64_t len = 0; len <= 300; len += (len < 20 ? 1 : 13)) {
        const std::vector<Op> ops{op(len, 11, 1'000'003), op(len / 2 + 1, 0, 0), op(len, 5, 5)};
        const auto slices = slice_ops(ops, chunk, rails);
        SCOPED_TRACE(testing::Message() << "rails " << rails << " chunk " << chunk << " len " << len);

        std::uint64_t total_ops = 0;
        for (const Op& o : ops) total_ops += o.length;
        std::uint64_t total_slices = 0;
        std::uint64_t expected_count = 0;
        for (const Op& o : ops) expected_count += (o.length + chunk - 1) / chunk;
        ASSERT_EQ(slices.size(), expected_count);

        std::uint32_t cur_op = 0;
        std::uint64_t covered = 0;  // bytes of ops[cur_op] covered so far
        for (std::size_t i = 0; i < slices.size(); ++i) {
          const Slice& s = slices[i];
          total_slices += s.length;
          ASSERT_GT(s.length, 0u) << "slice " << i;
          ASSERT_LE(s.length, chunk) << "slice " << i;
          ASSERT_EQ(s.rail, i % rails) << "slice " << i;
          // Slices come in op order; moving to the next op requires the current one to be fully covered.
          while (cur_op < ops.size() && covered == ops[cur_op].length) {
            ++cur_op;
            covered = 0;
          }
          ASSERT_LT(cur_op, ops.size()) << "slice " << i << " beyond the last op";
          ASSERT_EQ(s.op, cur_op) << "slice " << i;
          const Op& o = ops[cur_op];
          ASSERT_EQ(s.local_offset, o.local_offset + covered) << "slice " << i;
          ASSERT_EQ(s.remote_offset, o.remote_offset + covered) << "slice " << i;
          ASSERT_LE(covered + s.length, o.length) << "slice " << i << " runs past its op";
          // Only the last slice of an op may be short.
          if (covered + s.length < o.length) {
            ASSERT_EQ(s.length, chunk) << "slice " << i;
          }
          covered += s.length;
        }
        while (cur_op < ops.size() && covered == ops[cur_op].length) {
          ++cur_op;
          covered = 0;
        }
        EXPECT_EQ(cur_op, ops.size()) << "an op was left partly or wholly uncovered";
        EXPECT_EQ(total_slices, total_ops);
      }
    }
  }
}

}  // namespace
}  // namespace conduit
