// Landing's bookkeeping when a writer's reports overlap (it keeps two in flight to a target that saves):
// bytes confirmed for a Chain's next hop only once everything before them is, and a report told to wait
// for the one before it giving up at once when that one's save fails, instead of waiting out its time.
#include "transfer/stream/landing.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMiB = 1 << 20;

TEST(LandingTest, ALaterReportCheckedFirstIsConfirmedOnceTheOneBeforeItIs) {
  std::vector<std::byte> memory(4 * kMiB);
  fill_pattern(memory, 3);
  Landing landing(memory, memory.size(), false, std::nullopt);
  const std::span<const std::byte> bytes(memory);
  auto crc = [&](std::uint64_t at) { return std::vector<std::uint32_t>{crc32c(bytes.subspan(at, kMiB))}; };

  ASSERT_TRUE(landing.landed(2 * kMiB, kMiB, kMiB, crc(2 * kMiB)));
  ASSERT_TRUE(landing.landed(kMiB, kMiB, kMiB, crc(kMiB)));
  EXPECT_EQ(landing.confirmed(), 0u) << "bytes were confirmed with [0, 1 MiB) not reported";
  // A report that differs confirms nothing.
  auto wrong = landing.landed(0, kMiB, kMiB, {12345});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->mismatched, std::vector<std::uint64_t>{0});
  EXPECT_EQ(landing.confirmed(), 0u);
  ASSERT_TRUE(landing.landed(0, kMiB, kMiB, crc(0)));
  EXPECT_EQ(landing.confirmed(), 3 * kMiB) << "the reports checked early were not taken in";
  ASSERT_TRUE(landing.landed(3 * kMiB, kMiB, kMiB, crc(3 * kMiB)));
  EXPECT_EQ(landing.confirmed(), 4 * kMiB);
}

TEST(LandingTest, AReportWaitingForTheOneBeforeItGivesUpWhenThatOnesSaveFails) {
  testing::TempDir dir;
  // Two MiB of which the first cannot be read: the kernel refuses to write it to the file (EFAULT), a save
  // failing as a full disk or a dying device would.
  constexpr std::size_t size = 2 * kMiB;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  // Unmapped on every way out of the test, a failed assertion's included.
  const auto unmap = [](void* p) { munmap(p, size); };
  const std::unique_ptr<void, decltype(unmap)> mapping(mapped, unmap);
  const std::span<std::byte> memory(static_cast<std::byte*>(mapped), size);
  fill_pattern(memory, 4);
  ASSERT_EQ(mprotect(mapped, kMiB, PROT_NONE), 0);
  auto save = SaveFile::create(dir.path() / "out.bin", "out.bin");
  ASSERT_TRUE(save) << save.error().message;
  Landing landing(memory, size, false, std::move(*save));
  const auto t0 = std::chrono::steady_clock::now();
  auto later = std::async(std::launch::async, [&] { return landing.landed(kMiB, kMiB, 0, {}, true); });
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(later.wait_for(0s), std::future_status::timeout) << "it did not wait for the report before it";
  auto first = landing.landed(0, kMiB, 0, {});
  ASSERT_FALSE(first) << "the unreadable bytes were saved";
  auto answer = later.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "it waited out its time after the save failed";
  ASSERT_FALSE(answer);
  EXPECT_EQ(answer.error().code, ErrorCode::Conflict);
  EXPECT_NE(answer.error().message.find("in order"), std::string::npos) << answer.error().message;
}

}  // namespace
}  // namespace conduit::agent
