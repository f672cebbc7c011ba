// The pipelined run's wire stage on its own (transfer/stream/wire_stage.h), posting to a real tcp transport
// in this process that writes into memory registered by a second one. The run around it is a double that
// watches batches as the run would, so that a retry, a stop or a batch error can be taken on purpose.
#include "transfer/stream/wire_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "conduit/pattern.h"
#include "conduit/transport.h"

namespace conduit::agent {
namespace {

using namespace std::chrono_literals;
using Segment = SegmentFeed::Segment;
using Steady = std::chrono::steady_clock;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t kSegment = MiB;
constexpr std::uint64_t kRange = 4 * kSegment;

// The run around the wire stage: watches a batch until it ends, as TransferRun::watch does, and sends a batch
// on its own once, as TransferRun::send_segment does on its last try. `stop_at` turns that watch (counted
// from 0) into a stop; `fault_at` makes that batch end with `fault` whatever it did.
class WireRun final : public WireStage::Run {
 public:
  explicit WireRun(Transport& transport) : transport_(transport) {}

  int stop_at = -1;
  int fault_at = -1;
  Error fault{ErrorCode::PeerUnreachable, "the peer went away"};

  std::vector<BatchId> cancelled;
  std::vector<Op> sent;  // what went through send()
  int retries = 0;
  int segments_sent = 0;
  double busy = 0;
  int busy_calls = 0;
  std::uint64_t lowest_reached = UINT64_MAX;
  std::uint64_t highest_reached = 0;

  std::optional<run::Failure> watch(BatchId id, BatchWakeup& wakeup, const WireStage::Progress& progress,
                                    std::optional<Error>& error) override {
    const int n = watches_++;
    if (n == stop_at) {
      reap(id);
      return run::Failure{TransferState::Cancelled, reason::kCancelled, "cancelled by request"};
    }
    auto s = wait(id, wakeup, progress);
    error = n == fault_at ? std::optional<Error>(fault) : s.error;
    return std::nullopt;
  }
  std::optional<run::Failure> send(const std::vector<Op>& ops, const WireStage::Progress& progress) override {
    sent.insert(sent.end(), ops.begin(), ops.end());
    auto id = transport_.submit(ops, BatchOptions(64 * KiB, 4));
    if (!id) return run::Failure{TransferState::Failed, run::reason_for(id.error().code), id.error().message};
    BatchWakeup unused;
    auto s = wait(*id, unused, progress);
    if (s.error) return run::Failure{TransferState::Failed, run::reason_for(s.error->code), s.error->message};
    return std::nullopt;
  }
  void cancel(BatchId id) override {
    cancelled.push_back(id);
    reap(id);
  }
  void retried() override { ++retries; }
  void segment_sent(double) override { ++segments_sent; }
  void wire_busy(double seconds) override {
    busy += seconds;
    ++busy_calls;
  }
  void reached(std::uint64_t offset) override {
    lowest_reached = std::min(lowest_reached, offset);
    highest_reached = std::max(highest_reached, offset);
  }

 private:
  BatchStatus wait(BatchId id, BatchWakeup& wakeup, const WireStage::Progress& progress) {
    const auto until = Steady::now() + 10s;
    for (;;) {
      BatchStatus s = transport_.poll(id);
      if (s.bytes_done > 0) progress(s.bytes_done);
      if (s.finished) return s;
      if (Steady::now() > until) {
        reap(id);
        s.error = Error{ErrorCode::TimedOut, "the test's batch did not end in 10 s"};
        return s;
      }
      wakeup.wait_for(1ms);
    }
  }
  void reap(BatchId id) {
    if (!transport_.cancel(id)) return;
    while (!transport_.poll(id).finished) std::this_thread::sleep_for(1ms);
  }

  Transport& transport_;
  int watches_ = 0;
};

// A source range of kRange seeded bytes, cut into kSegment segments, on one tcp transport; the memory they
// go to registered for remote writes on another.
class WireStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportConfig config;
    config.provider = "tcp";
    config.bind_address = "127.0.0.1";
    config.stall_timeout = 5s;
    auto writer = open_transport(config);
    ASSERT_TRUE(writer) << writer.error().message;
    writer_ = std::move(*writer);
    auto holder = open_transport(config);
    ASSERT_TRUE(holder) << holder.error().message;
    holder_ = std::move(*holder);

    auto source = MemoryRegion::allocate_host(kRange);
    ASSERT_TRUE(source) << source.error().message;
    source_ = std::make_unique<MemoryRegion>(std::move(*source));
    fill_pattern(source_->bytes(), 7);
    auto local = writer_->register_memory(*source_, Access::Local);
    ASSERT_TRUE(local) << local.error().message;
    local_ = std::move(*local);

    auto target = MemoryRegion::allocate_host(2 * kRange);
    ASSERT_TRUE(target) << target.error().message;
    target_ = std::make_unique<MemoryRegion>(std::move(*target));
    std::fill(target_->bytes().begin(), target_->bytes().end(), std::byte{0});
    auto remote = holder_->register_memory(*target_, Access::RemoteWrite);
    ASSERT_TRUE(remote) << remote.error().message;
    remote_ = std::move(*remote);

    for (std::uint64_t at = 0; at < kRange; at += kSegment) {
      segments_.push_back(Segment{at, kSegment, &local_, at, source_->bytes().subspan(at, kSegment), {}});
    }
    run_ = std::make_unique<WireRun>(*writer_);
    connect();
  }

  // One write to a scratch range before the test, so the writer's connection to the holder is up, as it is
  // by the time a run's stage cancels anything: a batch cancelled while libfabric's rxm is still setting up
  // the connection, then the endpoint closed, leaks that connection's fi_info inside libfabric (LSan).
  void connect() {
    auto scratch = MemoryRegion::allocate_host(4 * KiB);
    ASSERT_TRUE(scratch) << scratch.error().message;
    scratch_ = std::make_unique<MemoryRegion>(std::move(*scratch));
    auto remote = holder_->register_memory(*scratch_, Access::RemoteWrite);
    ASSERT_TRUE(remote) << remote.error().message;
    scratch_key_ = std::move(*remote);
    const Op op{OpKind::Write, &local_, 0, scratch_key_.remote_key(), 0, 4 * KiB};
    auto id = writer_->submit(std::span(&op, 1), BatchOptions(4 * KiB, 1));
    ASSERT_TRUE(id) << id.error().message;
    const auto until = Steady::now() + 10s;
    BatchStatus s = writer_->poll(*id);
    while (!s.finished && Steady::now() < until) {
      std::this_thread::sleep_for(1ms);
      s = writer_->poll(*id);
    }
    ASSERT_TRUE(s.finished && !s.error) << "the warm-up write did not land";
  }

  WireStage stage(std::uint64_t offset = 0, std::uint64_t ring_bytes = 0, std::uint64_t resume = 0) {
    return WireStage(*run_, *writer_, {remote_.remote_key(), offset, ring_bytes, resume}, 64 * KiB, 4);
  }
  // Every segment through `wire`, as the run feeds it: a new one posted as soon as there is room.
  void send_all(WireStage& wire) {
    std::size_t next = 0;
    while (next < segments_.size() || !wire.empty()) {
      while (!wire.full() && next < segments_.size()) wire.launch(segments_[next++]);
      auto done = wire.complete_oldest();
      ASSERT_NE(done.segment, nullptr) << done.failure->message;
    }
  }
  std::span<const std::byte> source(std::uint64_t at, std::uint64_t n) const {
    return source_->bytes().subspan(at, n);
  }
  std::span<const std::byte> target(std::uint64_t at, std::uint64_t n) const {
    return target_->bytes().subspan(at, n);
  }
  static bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
  }
  static bool zero(std::span<const std::byte> a) {
    return std::all_of(a.begin(), a.end(), [](std::byte b) { return b == std::byte{0}; });
  }

  std::unique_ptr<Transport> writer_;
  std::unique_ptr<Transport> holder_;
  std::unique_ptr<MemoryRegion> source_;
  std::unique_ptr<MemoryRegion> target_;
  Registration local_;
  Registration remote_;
  std::vector<Segment> segments_;
  std::unique_ptr<WireRun> run_;
  std::unique_ptr<MemoryRegion> scratch_;
  Registration scratch_key_;
};

TEST_F(WireStageTest, TwoSegmentsAreOnTheWireAtOnceAndCompleteOldestFirst) {
  WireStage wire = stage();
  EXPECT_TRUE(wire.empty());
  wire.launch(segments_[0]);
  EXPECT_FALSE(wire.full());
  wire.launch(segments_[1]);
  EXPECT_TRUE(wire.full()) << "the window holds " << WireStage::kDepth << " segments";
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    auto done = wire.complete_oldest();
    ASSERT_EQ(done.segment, &segments_[i]) << (done.failure ? done.failure->message : "another segment");
    EXPECT_FALSE(done.failure);
    if (i + 2 < segments_.size()) wire.launch(segments_[i + 2]);
  }
  EXPECT_TRUE(wire.empty());
  EXPECT_TRUE(same(target(0, kRange), source(0, kRange))) << "the bytes did not land intact";
  EXPECT_TRUE(zero(target(kRange, kRange))) << "bytes landed past the range";
  EXPECT_EQ(run_->highest_reached, kRange);
  EXPECT_EQ(run_->segments_sent, 4);
  EXPECT_EQ(run_->retries, 0);
  EXPECT_EQ(run_->busy_calls, 4);
  EXPECT_GT(run_->busy, 0);
}

TEST_F(WireStageTest, ARingTakesEachRangeOffsetModuloItsSize) {
  WireStage wire = stage(/*offset=*/512 * KiB, /*ring_bytes=*/2 * kSegment);
  send_all(wire);
  EXPECT_TRUE(zero(target(0, 512 * KiB)));
  EXPECT_TRUE(same(target(512 * KiB, 2 * kSegment), source(2 * kSegment, 2 * kSegment)))
      << "the ring does not hold the range's last two segments";
  EXPECT_TRUE(zero(target(512 * KiB + 2 * kSegment, kRange)));
}

TEST_F(WireStageTest, BytesAnEarlierTransferLeftInPlaceAreNotSentAgain) {
  const std::uint64_t resume = kSegment + kSegment / 2;
  WireStage wire = stage(0, 0, resume);
  send_all(wire);
  EXPECT_TRUE(zero(target(0, resume))) << "bytes below the resume offset were sent";
  EXPECT_TRUE(same(target(resume, kRange - resume), source(resume, kRange - resume)));
  EXPECT_EQ(run_->segments_sent, 3) << "the segment wholly in place went out as a batch";
  EXPECT_GE(run_->lowest_reached, resume) << "progress went below what was in place";
  EXPECT_EQ(run_->highest_reached, kRange);
}

TEST_F(WireStageTest, ABatchThatFailedGoesAgainWholeWhenItsTurnComes) {
  run_->fault_at = 0;
  WireStage wire = stage();
  send_all(wire);
  EXPECT_EQ(run_->retries, 1);
  ASSERT_EQ(run_->sent.size(), 1u);
  EXPECT_EQ(run_->sent[0].local_offset, 0u);
  EXPECT_EQ(run_->sent[0].length, kSegment) << "the segment did not go again whole";
  EXPECT_EQ(run_->segments_sent, 3) << "a retried segment counted as sent at its first try";
  EXPECT_TRUE(same(target(0, kRange), source(0, kRange)));
}

TEST_F(WireStageTest, ASegmentTheTransportRefusedAtSubmitIsSentOnItsOwnAtItsTurn) {
  segments_[0].local_offset = 2 * kRange;  // outside its registration: refused before anything is posted
  WireStage wire = stage();
  wire.launch(segments_[0]);
  wire.launch(segments_[1]);
  auto done = wire.complete_oldest();
  ASSERT_FALSE(done.segment);
  ASSERT_TRUE(done.failure);
  EXPECT_EQ(run_->retries, 1);
  ASSERT_EQ(run_->sent.size(), 1u) << "the refused segment was not sent on its own";
  EXPECT_EQ(run_->sent[0].local_offset, 2 * kRange);
  EXPECT_EQ(done.failure->reason, std::string(reason::kTransportError)) << done.failure->message;
  EXPECT_TRUE(wire.empty());
  EXPECT_EQ(run_->cancelled.size(), 1u) << "the segment behind it was left on the wire";
}

TEST_F(WireStageTest, ABatchErrorARetryCannotMendEndsTheStageAndCancelsTheRest) {
  run_->fault_at = 0;
  run_->fault = Error{ErrorCode::TimedOut, "no completion for 5000 ms"};
  WireStage wire = stage();
  wire.launch(segments_[0]);
  wire.launch(segments_[1]);
  auto done = wire.complete_oldest();
  ASSERT_FALSE(done.segment);
  ASSERT_TRUE(done.failure);
  EXPECT_EQ(done.failure->reason, std::string(reason::kStalled));
  EXPECT_EQ(done.failure->message, "no completion for 5000 ms");
  EXPECT_EQ(run_->retries, 0) << "a timed-out batch was retried";
  EXPECT_TRUE(wire.empty());
  EXPECT_EQ(run_->cancelled.size(), 1u);
}

TEST_F(WireStageTest, AStopEndsTheStageWithItsReasonAndLeavesNothingOnTheWire) {
  run_->stop_at = 0;
  WireStage wire = stage();
  wire.launch(segments_[0]);
  wire.launch(segments_[1]);
  auto done = wire.complete_oldest();
  ASSERT_FALSE(done.segment);
  ASSERT_TRUE(done.failure);
  EXPECT_EQ(done.failure->state, TransferState::Cancelled);
  EXPECT_EQ(done.failure->reason, std::string(reason::kCancelled));
  EXPECT_TRUE(wire.empty());
  EXPECT_EQ(run_->cancelled.size(), 1u) << "the younger segment was not cancelled";
  EXPECT_EQ(run_->retries, 0);
}

TEST_F(WireStageTest, SlicesSentAgainLandWhereTheirSegmentDid) {
  WireStage wire = stage(/*offset=*/256 * KiB);
  send_all(wire);
  auto damaged = target_->bytes().subspan(256 * KiB + kSegment + 64 * KiB, 64 * KiB);
  std::fill(damaged.begin(), damaged.end(), std::byte{0x5a});
  const int busy_before = run_->busy_calls;
  EXPECT_FALSE(wire.resend(segments_[1], 64 * KiB, 64 * KiB));
  EXPECT_TRUE(same(target(256 * KiB, kRange), source(0, kRange))) << "the slice was not mended";
  EXPECT_EQ(run_->busy_calls, busy_before + 1) << "the re-send's wire time was not counted";
}

}  // namespace
}  // namespace conduit::agent
