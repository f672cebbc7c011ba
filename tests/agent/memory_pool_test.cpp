#include "memory_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "conduit/pattern.h"
#include "regions.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1 << 20;

MemoryRegion fresh(std::uint64_t bytes) {
  auto memory = MemoryRegion::allocate_host(bytes);
  EXPECT_TRUE(memory.ok()) << memory.error().message;
  return std::move(*memory);
}

// The zeroing runs at idle priority: asks for a block until one comes back, for at most 10 s.
std::optional<MemoryRegion> take_when_zeroed(MemoryPool& pool, std::uint64_t bytes) {
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    if (auto taken = pool.take(bytes)) return taken;
    std::this_thread::sleep_for(5ms);
  }
  return std::nullopt;
}

// Whether `address` lies in one of this process's mappings (/proc/self/maps: "start-end perms ...").
bool mapped(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &start, &end) == 2 && at >= start && at < end)
      return true;
  }
  return false;
}

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

TEST(MemoryPool, MemoryGivenBackComesBackZeroedToARegionOfItsSizeOnly) {
  MemoryPool pool(64 * kMiB, 60s);
  void* address = nullptr;
  {
    MemoryRegion region = pool.keep(fresh(8 * kMiB));
    address = region.data();
    fill_pattern(region.bytes(), 7);
  }
  EXPECT_EQ(pool.held_bytes(), 8 * kMiB);
  // Another size in huge pages is not served from it.
  EXPECT_FALSE(pool.take(4 * kMiB).has_value());
  EXPECT_FALSE(pool.take(10 * kMiB).has_value());

  // The same number of huge pages is, once zeroed: 8 MiB less 100 bytes rounds to the same four.
  auto again = take_when_zeroed(pool, 8 * kMiB - 100);
  ASSERT_TRUE(again.has_value()) << "the kept block was not zeroed within 10 s";
  EXPECT_EQ(again->data(), address);
  EXPECT_EQ(again->size(), 8 * kMiB - 100);
  EXPECT_TRUE(all_zero(again->bytes())) << "kept memory was handed out with the last region's bytes";
  EXPECT_EQ(pool.reused_count(), 1u);
  EXPECT_EQ(pool.held_bytes(), 0u);

  // And given back again when that region goes.
  fill_pattern(again->bytes(), 8);
  again.reset();
  EXPECT_EQ(pool.held_bytes(), 8 * kMiB);
}

TEST(MemoryPool, HoldsAtMostItsBoundAndGivesMemoryUpWhenAskedOrUnused) {
  MemoryPool pool(16 * kMiB, 300ms);
  {
    MemoryRegion a = pool.keep(fresh(8 * kMiB));
    MemoryRegion b = pool.keep(fresh(8 * kMiB));
    MemoryRegion c = pool.keep(fresh(8 * kMiB));
    // Larger than the whole bound, and smaller than a huge page: never kept.
    MemoryRegion big = pool.keep(fresh(32 * kMiB));
    MemoryRegion small = pool.keep(fresh(64 * 1024));
  }
  EXPECT_EQ(pool.held_bytes(), 16 * kMiB);

  pool.shrink_to(8 * kMiB);
  EXPECT_EQ(pool.held_bytes(), 8 * kMiB);

  // Unused for longer than `keep` (300 ms here), zeroed blocks are unmapped.
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (pool.held_bytes() > 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(pool.held_bytes(), 0u) << "a block unused past its time was still held";
}

TEST(MemoryPool, ARegionThatOutlivesThePoolIsUnmappedWithoutIt) {
  auto pool = std::make_unique<MemoryPool>(64 * kMiB, 60s);
  MemoryRegion region = pool->keep(fresh(4 * kMiB));
  fill_pattern(region.bytes(), 1);
  void* address = region.data();
  pool.reset();
  EXPECT_TRUE(mapped(address));
  region = MemoryRegion{};  // gives it back to nothing: unmapped
  EXPECT_FALSE(mapped(address)) << "memory given back after the pool went was left mapped";
}

TEST(MemoryPool, RegionStoreReusesADeletedRegionsMemoryAndKeepsKeptMemoryUnderTheCap) {
  testing::TempDir dir("conduit-pool-test");
  RegionStore store(dir.path(), 48 * kMiB, 48 * kMiB);
  {
    auto a = store.create("a", 16 * kMiB, "host");
    ASSERT_TRUE(a.ok()) << a.error().message;
    fill_pattern((*a)->memory().bytes(), 3);
  }
  ASSERT_TRUE(store.remove("a").ok());
  EXPECT_EQ(store.pool().held_bytes(), 16 * kMiB);

  // A new region of the same size is made from it, zeroed (asked until the zeroing thread is done).
  RegionPtr b;
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    auto made = store.create("b", 16 * kMiB, "host");
    ASSERT_TRUE(made.ok()) << made.error().message;
    if (store.pool().reused_count() == 1) {
      b = *made;
      break;
    }
    made->reset();
    ASSERT_TRUE(store.remove("b").ok());
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(b) << "no region was made from the deleted one's memory within 10 s";
  EXPECT_TRUE(all_zero(b->memory().bytes()));
  b.reset();
  ASSERT_TRUE(store.remove("b").ok());
  EXPECT_GE(store.pool().held_bytes(), 16 * kMiB);

  // A region of another size that needs the room: the kept memory gives it up rather than the region
  // being refused or the agent holding more than its cap.
  auto c = store.create("c", 40 * kMiB, "host");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_LE(store.used_bytes() + store.pool().held_bytes(), store.cap());
}

}  // namespace
}  // namespace conduit::agent
