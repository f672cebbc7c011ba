#include "conduit/crc32c.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace conduit {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Bit-at-a-time CRC32C, slow but obviously the textbook definition; ISA-L's table and SIMD paths switch on
// length and alignment, so it is checked against this rather than against itself.
std::uint32_t reference_crc32c(std::span<const std::byte> data, std::uint32_t seed = 0) {
  std::uint32_t crc = ~seed;
  for (std::byte b : data) {
    crc ^= std::to_integer<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(Crc32c, StandardCheckValue) { EXPECT_EQ(crc32c(bytes_of("123456789")), 0xe3069283u); }

// RFC 3720 (iSCSI) appendix B.4: a raw register or a missing final inversion would pass none of these.
TEST(Crc32c, Rfc3720Vectors) {
  std::vector<std::byte> zeros(32, std::byte{0x00});
  std::vector<std::byte> ones(32, std::byte{0xff});
  std::vector<std::byte> ascending(32);
  std::vector<std::byte> descending(32);
  for (std::size_t i = 0; i < 32; ++i) {
    ascending[i] = static_cast<std::byte>(i);
    descending[i] = static_cast<std::byte>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones), 0x62a8ab43u);
  EXPECT_EQ(crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(crc32c(descending), 0x113fdb5cu);
}

TEST(Crc32c, EmptyInputIsZero) {
  EXPECT_EQ(crc32c({}), 0u);
  EXPECT_EQ(crc32c(bytes_of("")), 0u);
}

TEST(Crc32c, MatchesReferenceAcrossLengthsAndAlignments) {
  const auto data = random_bytes(5000, 1);
  for (std::size_t offset = 0; offset < 16; ++offset) {
    for (std::size_t len :
         {1u,   2u,   3u,   7u,   8u,   9u,   15u,  16u,  17u,   31u,   32u,   33u,   63u,   64u,  65u,
          127u, 128u, 129u, 255u, 256u, 257u, 511u, 512u, 1023u, 1024u, 1025u, 4095u, 4096u, 4097u}) {
      const auto piece = std::span(data).subspan(offset, len);
      EXPECT_EQ(crc32c(piece), reference_crc32c(piece)) << "offset " << offset << " length " << len;
    }
  }
}

// Checksumming a stream piece by piece must agree with checksumming it whole, or a receiver that verifies
// as slices land would disagree with a sender that hashed the buffer in one go.
TEST(Crc32c, SeedChainsPieces) {
  EXPECT_EQ(crc32c(bytes_of("6789"), crc32c(bytes_of("12345"))), 0xe3069283u);

  const auto data = random_bytes(10000, 2);
  const std::uint32_t whole = crc32c(data);
  for (std::size_t split : {0u, 1u, 17u, 4096u, 9999u, 10000u}) {
    const auto a = std::span(data).first(split);
    const auto b = std::span(data).subspan(split);
    EXPECT_EQ(crc32c(b, crc32c(a)), whole) << "split at " << split;
  }
}

TEST(Crc32c, SeedChainsThroughEmptyPiece) {
  const std::uint32_t a = crc32c(bytes_of("12345"));
  EXPECT_EQ(crc32c({}, a), a);
}

TEST(Crc32cSlices, OneChecksumPerSliceWithShortLastSlice) {
  constexpr std::uint64_t kMiB = 1u << 20;
  const auto data = random_bytes(kMiB + 1, 3);
  const auto sums = crc32c_slices(data, kMiB);
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[0], crc32c(std::span(data).first(kMiB)));
  EXPECT_EQ(sums[1], crc32c(std::span(data).last(1)));
}

TEST(Crc32cSlices, ExactMultipleHasNoTrailingEmptySlice) {
  const auto data = random_bytes(4096, 4);
  const auto sums = crc32c_slices(data, 1024);
  ASSERT_EQ(sums.size(), 4u);
  for (std::size_t i = 0; i < sums.size(); ++i) {
    EXPECT_EQ(sums[i], crc32c(std::span(data).subspan(i * 1024, 1024))) << "slice " << i;
  }
}

TEST(Crc32cSlices, SliceLargerThanDataIsOneSlice) {
  const auto data = random_bytes(100, 5);
  const auto sums = crc32c_slices(data, 1u << 20);
  ASSERT_EQ(sums.size(), 1u);
  EXPECT_EQ(sums[0], crc32c(data));
}

TEST(Crc32cSlices, EmptyDataOrZeroSliceSizeGivesNoSlices) {
  EXPECT_TRUE(crc32c_slices({}, 1024).empty());
  const auto data = random_bytes(100, 6);
  EXPECT_TRUE(crc32c_slices(data, 0).empty());
}

// The point of per-slice checksums: a corruption is pinned to the one slice that holds it.
TEST(Crc32cSlices, FlippedByteChangesOnlyItsSlice) {
  constexpr std::uint64_t kSlice = 4096;
  auto data = random_bytes(10 * kSlice + 123, 7);
  const auto clean = crc32c_slices(data, kSlice);
  for (std::size_t pos : {std::size_t{0}, std::size_t{kSlice - 1}, std::size_t{kSlice},
                          std::size_t{5 * kSlice + 77}, data.size() - 1}) {
    data[pos] ^= std::byte{0x01};
    const auto dirty = crc32c_slices(data, kSlice);
    data[pos] ^= std::byte{0x01};
    ASSERT_EQ(dirty.size(), clean.size());
    for (std::size_t i = 0; i < clean.size(); ++i) {
      if (i == pos / kSlice) {
        EXPECT_NE(dirty[i], clean[i]) << "byte " << pos << " flipped, slice " << i << " should differ";
      } else {
        EXPECT_EQ(dirty[i], clean[i]) << "byte " << pos << " flipped, slice " << i << " should not differ";
      }
    }
  }
}

}  // namespace
}  // namespace conduit
