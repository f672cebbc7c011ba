// The staged path's double-buffered schedule, run over a host-memory "device" whose copies take time on
// their own threads, so overlap and slot reuse are exercised as with a CUDA stream. The CUDA copier itself
// is tested at the end where a GPU is present, and over the CUDA host double (conduit_cuda_double_tests).
#include "conduit/cuda_staging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "conduit/crc32c.h"
#include "conduit/cuda_device.h"
#include "conduit/pattern.h"

namespace conduit::cuda {
namespace {

using namespace std::chrono_literals;

// Records every step so tests can check the order of events.
struct Trace {
  std::mutex mu;
  std::vector<std::string> events;
  void add(std::string e) {
    std::lock_guard lock(mu);
    events.push_back(std::move(e));
  }
  std::size_t index_of(const std::string& e) {
    std::lock_guard lock(mu);
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i] == e) return i;
    }
    return events.size();
  }
};

// A device made of host memory. Each copy runs on its own thread after a short delay; it checks that the
// schedule never starts a copy on a slot whose previous copy was not waited for, and counts copies in
// flight so a test can check none is left when run_staged returns.
class HostDevice final : public DeviceCopier {
 public:
  HostDevice(std::vector<std::byte>& memory, int slots, Trace& trace)
      : memory_(memory),
        pending_(static_cast<std::size_t>(slots)),
        busy_(static_cast<std::size_t>(slots)),
        trace_(trace) {}
  ~HostDevice() override {
    for (auto& p : pending_) {
      if (p.valid()) p.wait();
    }
  }

  Status start_to_host(int slot, std::uint64_t offset, std::span<std::byte> host) override {
    if (auto s = begin(slot, "to_host", offset); !s) return s;
    pending_[slot] = std::async(std::launch::async, [this, slot, offset, host] {
      std::this_thread::sleep_for(delay);
      std::memcpy(host.data(), memory_.data() + offset, host.size());
      busy_[slot] = false;
      --in_flight;
    });
    return {};
  }

  Status start_to_device(int slot, std::uint64_t offset, std::span<const std::byte> host) override {
    if (auto s = begin(slot, "to_device", offset); !s) return s;
    pending_[slot] = std::async(std::launch::async, [this, slot, offset, host] {
      std::this_thread::sleep_for(delay);
      std::memcpy(memory_.data() + offset, host.data(), host.size());
      busy_[slot] = false;
      --in_flight;
    });
    return {};
  }

  Status wait(int slot) override {
    if (pending_[slot].valid()) pending_[slot].get();
    trace_.add("wait " + std::to_string(slot));
    if (fail_wait_at >= 0 && waits++ == fail_wait_at) return make_error(ErrorCode::Provider, "copy failed");
    return {};
  }

  bool busy(int slot) const { return busy_[slot]; }

  std::chrono::milliseconds delay{5};
  int fail_wait_at = -1;  // the Nth wait() reports a failed copy
  std::atomic<int> in_flight{0};
  std::atomic<bool> reused_unwaited{false};

 private:
  Status begin(int slot, const char* what, std::uint64_t offset) {
    if (pending_[slot].valid()) reused_unwaited = true;  // started over a copy nobody waited for
    busy_[slot] = true;
    ++in_flight;
    trace_.add(std::string(what) + " " + std::to_string(offset));
    return {};
  }

  std::vector<std::byte>& memory_;
  std::vector<std::future<void>> pending_;
  std::vector<std::atomic<bool>> busy_;
  Trace& trace_;
  int waits = 0;
};

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  fill_pattern(out, seed);
  return out;
}

TEST(StagePieces, CutsTheRangeIntoSlotSizedPiecesThatAlternateSlots) {
  const auto pieces = stage_pieces({100, 100 + 10, 4, 2});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].offset, 100u);
  EXPECT_EQ(pieces[0].length, 4u);
  EXPECT_EQ(pieces[0].slot, 0);
  EXPECT_EQ(pieces[0].slot_offset, 0u);
  EXPECT_EQ(pieces[1].offset, 104u);
  EXPECT_EQ(pieces[1].slot, 1);
  EXPECT_EQ(pieces[1].slot_offset, 4u);
  EXPECT_EQ(pieces[2].offset, 108u);
  EXPECT_EQ(pieces[2].length, 2u);  // the last one is short
  EXPECT_EQ(pieces[2].slot, 0);
  EXPECT_TRUE(stage_pieces({5, 5, 4, 2}).empty());
  EXPECT_TRUE(stage_pieces({0, 10, 0, 2}).empty());
}

TEST(RunStaged, OutboundSendsEveryByteAndCopiesTheNextPieceWhileThisOneIsOnTheWire) {
  constexpr std::uint64_t kSlot = 64 << 10;
  std::vector<std::byte> device = pattern(10 * kSlot + 123, 7);
  std::vector<std::byte> bounce(2 * kSlot);
  std::vector<std::byte> received(device.size());
  Trace trace;
  HostDevice copier(device, 2, trace);

  const Status s =
      run_staged(StageDirection::Outbound, {0, device.size(), kSlot, 2}, bounce, copier,
                 [&](const StagePiece& p) -> Status {
                   // The slot must hold its piece already: its copy ended before the wire.
                   EXPECT_FALSE(copier.busy(p.slot)) << "piece " << p.index;
                   trace.add("send " + std::to_string(p.index));
                   std::this_thread::sleep_for(5ms);  // the network takes a while
                   std::memcpy(received.data() + p.offset, bounce.data() + p.slot_offset, p.length);
                   trace.add("sent " + std::to_string(p.index));
                   return {};
                 });
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(crc32c(received), crc32c(device));
  EXPECT_FALSE(copier.reused_unwaited);
  EXPECT_EQ(copier.in_flight, 0);
  // Overlap: the copy of piece k+1 began before piece k finished on the wire.
  for (std::uint64_t k = 0; k + 1 < 11; ++k) {
    EXPECT_LT(trace.index_of("to_host " + std::to_string((k + 1) * kSlot)),
              trace.index_of("sent " + std::to_string(k)))
        << "piece " << k;
  }
}

TEST(RunStaged, InboundLandsEveryByteOnTheDeviceAndNeverOverwritesASlotStillBeingCopied) {
  constexpr std::uint64_t kSlot = 32 << 10;
  const std::vector<std::byte> sent = pattern(7 * kSlot + 5, 3);
  std::vector<std::byte> device(sent.size() + 1000);
  std::vector<std::byte> bounce(2 * kSlot);
  Trace trace;
  HostDevice copier(device, 2, trace);

  const Status s =
      run_staged(StageDirection::Inbound, {1000, 1000 + sent.size(), kSlot, 2}, bounce, copier,
                 [&](const StagePiece& p) -> Status {
                   EXPECT_FALSE(copier.busy(p.slot)) << "piece " << p.index << " overwrote its slot";
                   std::memcpy(bounce.data() + p.slot_offset, sent.data() + (p.offset - 1000), p.length);
                   return {};
                 });
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(copier.in_flight, 0);  // every copy to the device ended before the run returned
  EXPECT_FALSE(copier.reused_unwaited);
  EXPECT_EQ(crc32c(std::span(device).subspan(1000)), crc32c(sent));
}

TEST(RunStaged, OneSlotStillMovesEverythingWithoutOverlap) {
  std::vector<std::byte> device = pattern(5000, 11);
  std::vector<std::byte> bounce(1024);
  std::vector<std::byte> received(device.size());
  Trace trace;
  HostDevice copier(device, 1, trace);
  copier.delay = 0ms;
  ASSERT_TRUE(run_staged(StageDirection::Outbound, {0, device.size(), 1024, 1}, bounce, copier,
                         [&](const StagePiece& p) -> Status {
                           EXPECT_FALSE(copier.busy(0));
                           std::memcpy(received.data() + p.offset, bounce.data(), p.length);
                           return {};
                         }));
  EXPECT_EQ(received, device);
  EXPECT_FALSE(copier.reused_unwaited);
}

TEST(RunStaged, ANetworkErrorStopsTheRunAndLeavesNoCopyInFlight) {
  std::vector<std::byte> device = pattern(8 << 10, 1);
  std::vector<std::byte> bounce(2 << 10);
  Trace trace;
  HostDevice copier(device, 2, trace);
  int sends = 0;
  const Status s = run_staged(StageDirection::Outbound, {0, device.size(), 1 << 10, 2}, bounce, copier,
                              [&](const StagePiece& p) -> Status {
                                ++sends;
                                if (p.index == 2) return make_error(ErrorCode::PeerUnreachable, "peer gone");
                                return {};
                              });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::PeerUnreachable);
  EXPECT_EQ(s.error().message, "peer gone");
  EXPECT_EQ(sends, 3);
  EXPECT_EQ(copier.in_flight, 0);  // piece 3's copy, started during piece 2's send, was drained
}

TEST(RunStaged, ACopyErrorStopsBeforeThatPieceGoesOut) {
  std::vector<std::byte> device = pattern(8 << 10, 1);
  std::vector<std::byte> bounce(2 << 10);
  Trace trace;
  HostDevice copier(device, 2, trace);
  copier.fail_wait_at = 1;  // the copy of piece 1
  std::vector<std::uint64_t> sent;
  const Status s = run_staged(StageDirection::Outbound, {0, device.size(), 1 << 10, 2}, bounce, copier,
                              [&](const StagePiece& p) -> Status {
                                sent.push_back(p.index);
                                return {};
                              });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "copy failed");
  EXPECT_EQ(sent, std::vector<std::uint64_t>{0});
  EXPECT_EQ(copier.in_flight, 0);
}

TEST(RunStaged, RefusesABounceBufferSmallerThanItsSlots) {
  std::vector<std::byte> device(100);
  std::vector<std::byte> bounce(10);
  Trace trace;
  HostDevice copier(device, 2, trace);
  const Status s = run_staged(StageDirection::Outbound, {0, 100, 8, 2}, bounce, copier,
                              [](const StagePiece&) { return Status{}; });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::InvalidArgument);
}

TEST(RegionCrc32c, HostRegionsMatchThePlainSlices) {
  auto region = MemoryRegion::allocate_host(3 << 20);
  ASSERT_TRUE(region);
  fill_pattern(region->bytes(), 5);
  auto crcs = region_crc32c_slices(*region, 4096, (2 << 20) + 17, 1 << 20);
  ASSERT_TRUE(crcs);
  EXPECT_EQ(*crcs, crc32c_slices(region->bytes().subspan(4096, (2 << 20) + 17), 1 << 20));
  EXPECT_FALSE(region_crc32c_slices(*region, 3 << 20, 1, 1 << 20));
}

// The bytes of `ranges` of `data` put end to end, and a few ranges in no order, one empty.
std::vector<std::byte> end_to_end(std::span<const std::byte> data, const std::vector<CrcRange>& ranges) {
  std::vector<std::byte> out;
  for (const CrcRange& r : ranges)
    out.insert(out.end(), data.begin() + r.offset, data.begin() + r.offset + r.length);
  return out;
}
const std::vector<CrcRange> kScattered{
    {(2 << 20) + 5, 100000}, {0, 1}, {4096, 0}, {7, (1 << 20) + 3}, {3 << 20, 17}};

TEST(RegionCrc32c, HostRangesChainIntoTheCrcOfTheirBytesEndToEnd) {
  auto region = MemoryRegion::allocate_host(4 << 20);
  ASSERT_TRUE(region);
  fill_pattern(region->bytes(), 9);
  auto crc = region_crc32c_ranges(*region, kScattered);
  ASSERT_TRUE(crc) << crc.error().message;
  EXPECT_EQ(*crc, crc32c(end_to_end(region->bytes(), kScattered)));
  // The order counts: the same ranges the other way round are other bytes end to end.
  std::vector<CrcRange> reversed(kScattered.rbegin(), kScattered.rend());
  EXPECT_NE(*region_crc32c_ranges(*region, reversed), *crc);
  EXPECT_EQ(*region_crc32c_ranges(*region, {}), crc32c({}));
  auto outside = region_crc32c_ranges(*region, std::vector<CrcRange>{{0, 1}, {(4 << 20) - 1, 2}});
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("range 1 [4194303, +2) is outside"), std::string::npos)
      << outside.error().message;
}

// ---- With a GPU (or linked with the CUDA host double): the CUDA copier and device CRC ----

TEST(CudaStaging, DeviceRangesChainIntoTheCrcOfTheirBytesEndToEnd) {
  if (!availability().usable()) GTEST_SKIP() << "no CUDA device: " << availability().reason;
  constexpr std::uint64_t kBytes = 70ULL << 20;  // one range longer than the 64 MiB piece
  auto device = allocate(0, kBytes);
  ASSERT_TRUE(device) << device.error().message;
  const std::vector<std::byte> data = pattern(kBytes, 43);
  ASSERT_TRUE(copy_to_device(*device, 0, data));
  std::vector<CrcRange> ranges = kScattered;
  ranges.push_back({1000, (66ULL << 20) + 1});
  auto crc = region_crc32c_ranges(*device, ranges);
  ASSERT_TRUE(crc) << crc.error().message;
  EXPECT_EQ(*crc, crc32c(end_to_end(data, ranges)));
  EXPECT_FALSE(region_crc32c_ranges(*device, std::vector<CrcRange>{{kBytes, 1}}));
}

TEST(CudaStaging, DeviceRangesRoundTripThroughTheStreamCopierAndChecksumAsOnTheHost) {
  if (!availability().usable()) GTEST_SKIP() << "no CUDA device: " << availability().reason;
  constexpr std::uint64_t kBytes = (24 << 20) + 4097;
  auto device = allocate(0, kBytes);
  ASSERT_TRUE(device) << device.error().message;
  const std::vector<std::byte> data = pattern(kBytes, 42);
  ASSERT_TRUE(copy_to_device(*device, 0, data));

  auto crcs = region_crc32c_slices(*device, 0, kBytes, 1 << 20);
  ASSERT_TRUE(crcs) << crcs.error().message;
  EXPECT_EQ(*crcs, crc32c_slices(data, 1 << 20));
  auto odd = region_crc32c_slices(*device, 100, kBytes - 200, 3 << 20);
  ASSERT_TRUE(odd);
  EXPECT_EQ(*odd, crc32c_slices(std::span(data).subspan(100, kBytes - 200), 3 << 20));

  auto copier = make_copier(*device, 2);
  ASSERT_TRUE(copier) << copier.error().message;
  auto bounce = allocate_pinned(2 << 20);
  ASSERT_TRUE(bounce);
  std::vector<std::byte> out(kBytes);
  ASSERT_TRUE(run_staged(StageDirection::Outbound, {0, kBytes, 1 << 20, 2}, bounce->bytes(), **copier,
                         [&](const StagePiece& p) -> Status {
                           std::memcpy(out.data() + p.offset, bounce->bytes().data() + p.slot_offset,
                                       p.length);
                           return {};
                         }));
  EXPECT_EQ(crc32c(out), crc32c(data));

  auto target = allocate(0, kBytes);
  ASSERT_TRUE(target);
  auto target_copier = make_copier(*target, 2);
  ASSERT_TRUE(target_copier);
  ASSERT_TRUE(run_staged(StageDirection::Inbound, {0, kBytes, 1 << 20, 2}, bounce->bytes(), **target_copier,
                         [&](const StagePiece& p) -> Status {
                           std::memcpy(bounce->bytes().data() + p.slot_offset, data.data() + p.offset,
                                       p.length);
                           return {};
                         }));
  auto back = region_crc32c_slices(*target, 0, kBytes, kBytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->at(0), crc32c(data));
}

}  // namespace
}  // namespace conduit::cuda
