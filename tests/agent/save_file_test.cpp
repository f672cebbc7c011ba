// SaveFile over real files on the test machine's file system: the bytes saved are the bytes given whichever
// way they were written; whole blocks from aligned memory go around the page cache and leave the file out of
// it, and what O_DIRECT cannot take (the last partial block, an unaligned offset or buffer, a save told not
// to) goes through the cache.
#include "files/save_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "conduit/pattern.h"
#include "file_bytes.h"
#include "page_cache.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kSize = 8 * kMiB + 100;  // the last block partial

class SaveFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fill_pattern(bytes(), 11);
    // Whether a file here can be written around the page cache and then found out of it.
    testing::write_file(dir.path() / "probe.bin", std::vector<std::byte>(4096));
    cold_reason = testing::make_cold(dir.path() / "probe.bin");
  }

  // Page-aligned, as a region's memory and a landing ring are.
  std::span<std::byte> bytes() { return {memory.get(), kSize}; }

  Result<SaveFile> create(bool direct = true) { return SaveFile::create(path, "out.bin", direct); }

  testing::TempDir dir{"conduit-save-file"};
  fs::path path = dir.path() / "out.bin";
  std::unique_ptr<std::byte, decltype(&std::free)> memory{
      static_cast<std::byte*>(std::aligned_alloc(4096, (kSize + 4095) / 4096 * 4096)), &std::free};
  std::string cold_reason;
};

TEST_F(SaveFileTest, WholeBlocksFromAlignedMemoryGoAroundThePageCache) {
  if (!cold_reason.empty()) GTEST_SKIP() << cold_reason;
  auto save = create();
  ASSERT_TRUE(save.ok()) << save.error().message;
  // In two pieces, as segments land: the first ends on a block boundary, the second is the rest.
  ASSERT_TRUE(save->write_at(0, bytes().first(4 * kMiB)).ok());
  ASSERT_TRUE(save->write_at(4 * kMiB, bytes().subspan(4 * kMiB)).ok());
  EXPECT_EQ(save->written().direct, 8 * kMiB);
  EXPECT_EQ(save->written().cached, 100u) << "only the last partial block goes through the page cache";
  ASSERT_TRUE(save->commit(kSize).ok());
  EXPECT_LT(testing::cached_share(path), 0.01) << "the saved file was left in the page cache";
  EXPECT_TRUE(testing::read_file(path) == std::vector<std::byte>(bytes().begin(), bytes().end()));
}

TEST_F(SaveFileTest, ASegmentWrittenAgainReplacesItsBytesEitherWay) {
  auto save = create();
  ASSERT_TRUE(save.ok()) << save.error().message;
  // A resumed writer sends a segment again: first through the cache (an unaligned tail), then around it.
  std::vector<std::byte> stale(kSize, std::byte{0x5a});
  ASSERT_TRUE(save->write_at(0, std::span<const std::byte>(stale).subspan(1)).ok());  // unaligned memory
  ASSERT_TRUE(save->write_at(0, bytes()).ok());
  ASSERT_TRUE(save->commit(kSize).ok());
  EXPECT_TRUE(testing::read_file(path) == std::vector<std::byte>(bytes().begin(), bytes().end()));
}

TEST_F(SaveFileTest, WhatODirectCannotTakeGoesThroughThePageCache) {
  const std::vector<std::byte> expected(bytes().begin(), bytes().end());
  {
    // An offset off a block boundary: everything after it through the cache.
    auto save = create();
    ASSERT_TRUE(save.ok()) << save.error().message;
    ASSERT_TRUE(save->write_at(0, bytes().first(100)).ok());
    ASSERT_TRUE(save->write_at(100, bytes().subspan(100)).ok());
    EXPECT_EQ(save->written().direct, 0u);
    EXPECT_EQ(save->written().cached, kSize);
    ASSERT_TRUE(save->commit(kSize).ok());
    EXPECT_TRUE(testing::read_file(path) == expected);
  }
  {
    // Memory off a page boundary.
    std::vector<std::byte> copy(kSize + 1);
    std::copy(expected.begin(), expected.end(), copy.begin() + 1);
    auto save = create();
    ASSERT_TRUE(save.ok()) << save.error().message;
    ASSERT_TRUE(save->append(std::span<const std::byte>(copy).subspan(1)).ok());
    EXPECT_EQ(save->written().direct, 0u);
    ASSERT_TRUE(save->commit(kSize).ok());
    EXPECT_TRUE(testing::read_file(path) == expected);
  }
  {
    // A save told to keep the page cache (--save-page-cache): the file stays cached for a reader.
    auto save = create(false);
    ASSERT_TRUE(save.ok()) << save.error().message;
    ASSERT_TRUE(save->append(bytes()).ok());
    EXPECT_EQ(save->written().direct, 0u);
    EXPECT_EQ(save->written().cached, kSize);
    ASSERT_TRUE(save->commit(kSize).ok());
    EXPECT_TRUE(testing::read_file(path) == expected);
    if (cold_reason.empty()) {
      EXPECT_GT(testing::cached_share(path), 0.9);
    }
  }
}

}  // namespace
}  // namespace conduit::agent
