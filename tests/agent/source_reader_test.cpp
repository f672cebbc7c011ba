// SourceReader over real files on the test machine's file system: bytes land the same whichever way they
// are read, a file the page cache does not hold is read around it, one it holds is copied out of it, and the
// cases O_DIRECT cannot take (an unaligned offset, a last block with no room, a reader told not to) go
// through the cache.
#include "files/source_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conduit/pattern.h"
#include "file_bytes.h"
#include "page_cache.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kSize = 3 * kMiB + 5;  // the last block partial

class SourceReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data.resize(kSize);
    fill_pattern(data, 7);
    testing::write_file(path, data);
    fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
  }

  // A file nobody has read lately; skips where this file system cannot make one.
  void make_cold() {
    if (const auto why = testing::make_cold(path); !why.empty()) GTEST_SKIP() << why;
  }

  // Page-aligned memory of `bytes`, as the agent's slots and regions are.
  std::byte* buffer(std::size_t bytes) {
    memory.reset(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
    return memory.get();
  }

  std::span<const std::byte> expected(std::uint64_t pos, std::uint64_t length) const {
    return std::span<const std::byte>(data).subspan(pos, length);
  }

  testing::TempDir dir{"conduit-source-reader"};
  fs::path path = dir.path() / "src.bin";
  std::vector<std::byte> data;
  UniqueFd fd;
  std::unique_ptr<std::byte, decltype(&std::free)> memory{nullptr, &std::free};
};

bool same(const std::byte* got, std::span<const std::byte> want) {
  return std::equal(want.begin(), want.end(), got);
}

TEST_F(SourceReaderTest, AColdFileIsReadAroundThePageCacheAndLeftOutOfIt) {
  make_cold();
  SourceReader reader(fd.get(), /*direct=*/true);
  std::byte* into = buffer(4 * kMiB);
  ASSERT_TRUE(reader.read(into, 4 * kMiB, 0, kSize).ok());
  EXPECT_TRUE(same(into, expected(0, kSize)));
  EXPECT_EQ(reader.direct_bytes(), kSize) << "the last partial block too, its whole block fitting the room";
  EXPECT_EQ(reader.cached_bytes(), 0U);
  EXPECT_LT(testing::cached_share(path), 0.5);
}

TEST_F(SourceReaderTest, ALastBlockWithNoRoomForItsWholeBlockGoesThroughTheCache) {
  make_cold();
  SourceReader reader(fd.get(), /*direct=*/true);
  std::byte* into = buffer(kSize);
  ASSERT_TRUE(reader.read(into, kSize, 0, kSize).ok());
  EXPECT_TRUE(same(into, expected(0, kSize)));
  EXPECT_EQ(reader.direct_bytes(), 3 * kMiB);
  EXPECT_EQ(reader.cached_bytes(), 5U);
}

TEST_F(SourceReaderTest, AFileThePageCacheHoldsIsCopiedOutOfIt) {
  EXPECT_TRUE(testing::read_file(path) == data);
  if (testing::cached_share(path) < 1) GTEST_SKIP() << "the page cache did not keep " << path;
  SourceReader reader(fd.get(), /*direct=*/true);
  std::byte* into = buffer(4 * kMiB);
  ASSERT_TRUE(reader.read(into, 4 * kMiB, kMiB, 2 * kMiB).ok());
  EXPECT_TRUE(same(into, expected(kMiB, 2 * kMiB)));
  EXPECT_EQ(reader.cached_bytes(), 2 * kMiB);
  EXPECT_EQ(reader.direct_bytes(), 0U);
}

// A .safetensors data section starts 8 + its header's size into the file: whole blocks around it are read
// directly into a bounce buffer and copied out, into memory that need not be aligned either.
TEST_F(SourceReaderTest, AnUnalignedRangeOfAColdFileIsReadDirectlyThroughABounceBuffer) {
  make_cold();
  SourceReader reader(fd.get(), /*direct=*/true);
  std::byte* into = buffer(2 * kMiB);
  ASSERT_TRUE(reader.read(into, 2 * kMiB, 1, kMiB).ok());
  EXPECT_TRUE(same(into, expected(1, kMiB)));
  EXPECT_EQ(reader.direct_bytes(), kMiB);
  EXPECT_EQ(reader.cached_bytes(), 0U);

  testing::drop_from_page_cache(path);
  ASSERT_TRUE(reader.read(into + 3, 2 * kMiB - 3, 4096 + 5, kMiB + 7).ok());
  EXPECT_TRUE(same(into + 3, expected(4096 + 5, kMiB + 7)));
}

// Larger than the bounce buffer (8 MiB): piece after piece read and copied out, every byte in its place.
TEST_F(SourceReaderTest, AnUnalignedRangeOfManyBouncePiecesArrivesWhole) {
  std::vector<std::byte> big(21 * kMiB + 11);
  fill_pattern(big, 9);
  const fs::path big_path = dir.path() / "big.bin";
  testing::write_file(big_path, big);
  if (const auto why = testing::make_cold(big_path); !why.empty()) GTEST_SKIP() << why;
  UniqueFd big_fd(::open(big_path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(big_fd.valid());
  SourceReader reader(big_fd.get(), /*direct=*/true);
  const std::uint64_t pos = 48240, length = big.size() - pos;
  std::byte* into = buffer(length);
  ASSERT_TRUE(reader.read(into, length, pos, length).ok());
  EXPECT_TRUE(same(into, std::span<const std::byte>(big).subspan(pos)));
  EXPECT_GE(reader.direct_bytes(), length - 4096) << "read directly, all but at most a last partial block";
}

TEST_F(SourceReaderTest, AReaderToldNotToGoesThroughTheCache) {
  std::byte* into = buffer(2 * kMiB);
  testing::drop_from_page_cache(path);
  SourceReader cached(fd.get(), /*direct=*/false);
  ASSERT_TRUE(cached.read(into, 2 * kMiB, 0, kMiB).ok());
  EXPECT_TRUE(same(into, expected(0, kMiB)));
  EXPECT_EQ(cached.direct_bytes(), 0U);
  EXPECT_EQ(cached.cached_bytes(), kMiB);
  ASSERT_TRUE(cached.read(into, 2 * kMiB, 1, kMiB).ok());
  EXPECT_EQ(cached.direct_bytes(), 0U);
}

// An unaligned range past the file's end: what there was arrives, and the error says where the file ended.
TEST_F(SourceReaderTest, AnUnalignedRangePastTheEndSaysWhereItEnded) {
  testing::drop_from_page_cache(path);
  SourceReader reader(fd.get(), /*direct=*/true);
  std::byte* into = buffer(4 * kMiB);
  const auto read = reader.read(into, 4 * kMiB, kSize - kMiB - 3, 2 * kMiB);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ErrorCode::Conflict);
  EXPECT_NE(read.error().message.find("ended at byte " + std::to_string(kSize)), std::string::npos)
      << read.error().message;
  EXPECT_TRUE(same(into, expected(kSize - kMiB - 3, kMiB + 3)));
}

TEST_F(SourceReaderTest, AFileEndingBeforeTheRangeSaysWhereItEnded) {
  for (const bool cold : {true, false}) {
    if (cold) testing::drop_from_page_cache(path);
    SourceReader reader(fd.get(), /*direct=*/true);
    std::byte* into = buffer(4 * kMiB);
    const auto read = reader.read(into, 4 * kMiB, 2 * kMiB, 2 * kMiB);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.error().code, ErrorCode::Conflict);
    EXPECT_NE(read.error().message.find("ended at byte " + std::to_string(kSize)), std::string::npos)
        << read.error().message;
    EXPECT_TRUE(same(into, expected(2 * kMiB, kSize - 2 * kMiB))) << "what there was arrived";
  }
}

}  // namespace
}  // namespace conduit::agent
