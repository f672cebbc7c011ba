// The pipelined run's land stage on its own (transfer/stream/land_stage.h): the target agent behind the
// reports, the run around the stage and the wire it asks for re-sends are doubles, so that answers can come
// in any order, name slices that differ, or refuse the report, on purpose.
#include "transfer/stream/land_stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace conduit::agent {
namespace {

using namespace std::chrono_literals;
using Segment = SegmentFeed::Segment;
using Steady = std::chrono::steady_clock;

constexpr std::uint64_t MiB = 1 << 20;

// The target agent's end of the reports: answers each with `answer`, on the report's own thread, and keeps
// what it was told, in order.
class FakeTarget final : public LandStage::Target {
 public:
  std::function<Result<api::Landed>(const api::LandedReport&)> answer = [](const api::LandedReport&) {
    return Result<api::Landed>(api::Landed{});
  };
  std::function<void(const api::LandedReport&)> on_report = [](const api::LandedReport&) {};
  std::function<void(const api::LandedReport&)> on_answered = [](const api::LandedReport&) {};

  Result<api::Landed> landed(const api::LandedReport& report) override {
    on_report(report);
    {
      std::lock_guard lock(mu_);
      reports_.push_back(report);
    }
    auto a = answer(report);
    {
      std::lock_guard lock(mu_);
      answered_.push_back(report.offset);
    }
    on_answered(report);
    return a;
  }
  std::vector<api::LandedReport> reports() const {
    std::lock_guard lock(mu_);
    return reports_;
  }
  std::vector<std::uint64_t> answered() const {
    std::lock_guard lock(mu_);
    return answered_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<api::LandedReport> reports_;
  std::vector<std::uint64_t> answered_;
};

class LandRun final : public LandStage::Run {
 public:
  std::vector<std::uint64_t> ends;
  std::atomic<std::size_t> landed_count{0};  // read by the target's threads
  std::vector<double> busy;
  std::size_t resent = 0;

  std::optional<run::Failure> landed(std::uint64_t end) override {
    ends.push_back(end);
    ++landed_count;
    return std::nullopt;
  }
  void land_busy(double seconds) override { busy.push_back(seconds); }
  void slices_resent(std::size_t slices) override { resent += slices; }
};

class FakeWire final : public Resend {
 public:
  struct Sent {
    std::uint64_t segment, at, n;
    bool operator==(const Sent&) const = default;
  };
  std::vector<Sent> sent;
  std::optional<run::Failure> fails;

  std::optional<run::Failure> resend(const Segment& s, std::uint64_t at, std::uint64_t n) override {
    sent.push_back({s.offset, at, n});
    return fails;
  }
};

// Segments of `length` bytes one after another, with a CRC32C per MiB slice (their values matter only to a
// target agent, which the double plays).
std::vector<Segment> segments(std::size_t count, std::uint64_t length = 4 * MiB) {
  std::vector<Segment> out;
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(
        Segment{i * length, length, nullptr, 0, {}, std::vector<std::uint32_t>((length - 1) / MiB + 1)});
  }
  return out;
}

Result<api::Landed> mismatched(std::vector<std::uint64_t> slices) {
  return api::Landed{std::move(slices), false};
}

class LandStageTest : public ::testing::Test {
 protected:
  LandStage stage(std::size_t depth, bool reports = true, std::uint64_t grant_offset = 0) {
    return LandStage(run, wire, reports ? &target : nullptr, {grant_offset, MiB, depth},
                     {{"transfer", "t-1"}});
  }
  FakeTarget target;
  LandRun run;
  FakeWire wire;
};

TEST_F(LandStageTest, SegmentsLandInOrderWhicheverReportIsAnsweredFirst) {
  const auto s = segments(2);
  std::promise<void> second_answered;
  auto second = second_answered.get_future().share();
  target.answer = [&](const api::LandedReport& r) {
    if (r.offset == 1000) second.wait_for(10s);
    return Result<api::Landed>(api::Landed{});
  };
  target.on_answered = [&](const api::LandedReport& r) {
    if (r.offset != 1000) second_answered.set_value();
  };
  LandStage land = stage(2, true, /*grant_offset=*/1000);
  EXPECT_FALSE(land.take(s[0]));
  EXPECT_FALSE(land.take(s[1]));
  EXPECT_FALSE(land.finish());
  EXPECT_EQ(target.answered(), (std::vector<std::uint64_t>{1000 + 4 * MiB, 1000}));
  EXPECT_EQ(run.ends, (std::vector<std::uint64_t>{4 * MiB, 8 * MiB}));
  const auto reports = target.reports();
  ASSERT_EQ(reports.size(), 2u);
  for (const auto& r : reports) {
    EXPECT_EQ(r.length, 4 * MiB);
    EXPECT_EQ(r.slice, MiB);
    EXPECT_EQ(r.crc32c.size(), 4u);
    // The second report is the only one sent while another was out.
    EXPECT_EQ(r.wait_for_previous, r.offset == 1000 + 4 * MiB) << r.offset;
  }
}

TEST_F(LandStageTest, OneReportOutAtATimeSettlesEachBeforeTheNextGoes) {
  const auto s = segments(3);
  std::vector<std::size_t> landed_before;  // per report, the segments landed when it was sent
  target.on_report = [&](const api::LandedReport&) { landed_before.push_back(run.landed_count.load()); };
  LandStage land = stage(1);
  for (const auto& segment : s) EXPECT_FALSE(land.take(segment));
  EXPECT_FALSE(land.finish());
  EXPECT_EQ(landed_before, (std::vector<std::size_t>{0, 1, 2}));
  for (const auto& r : target.reports()) EXPECT_FALSE(r.wait_for_previous);
  EXPECT_EQ(run.ends, (std::vector<std::uint64_t>{4 * MiB, 8 * MiB, 12 * MiB}));
}

TEST_F(LandStageTest, WithoutReportsASegmentLandsAsSoonAsItsBatchFinished) {
  const auto s = segments(2);
  LandStage land = stage(1, /*reports=*/false);
  EXPECT_FALSE(land.take(s[0]));
  EXPECT_EQ(run.ends, std::vector<std::uint64_t>{4 * MiB});
  EXPECT_FALSE(land.take(s[1]));
  EXPECT_FALSE(land.finish());
  EXPECT_EQ(run.ends, (std::vector<std::uint64_t>{4 * MiB, 8 * MiB}));
  EXPECT_TRUE(target.reports().empty());
  EXPECT_TRUE(run.busy.empty());
}

TEST_F(LandStageTest, SlicesTheTargetFoundDifferentAreSentAgainAndReportedAgain) {
  const auto s = segments(1, 3 * MiB + MiB / 2);
  std::atomic<int> reports{0};
  target.answer = [&](const api::LandedReport&) {
    return reports++ == 0 ? mismatched({1, 3}) : Result<api::Landed>(api::Landed{});
  };
  LandStage land = stage(2);
  EXPECT_FALSE(land.take(s[0]));
  EXPECT_FALSE(land.finish());
  EXPECT_EQ(wire.sent, (std::vector<FakeWire::Sent>{{0, MiB, MiB}, {0, 3 * MiB, MiB / 2}}))
      << "the last slice is the segment's short tail";
  EXPECT_EQ(run.resent, 2u);
  EXPECT_EQ(target.reports().size(), 2u);
  EXPECT_EQ(run.ends, std::vector<std::uint64_t>{3 * MiB + MiB / 2}) << "the segment did not land once";
}

TEST_F(LandStageTest, SlicesThatStillDifferAfterTheLastRoundFailWithChecksumMismatch) {
  const auto s = segments(1);
  target.answer = [](const api::LandedReport&) { return mismatched({2}); };
  LandStage land = stage(1);
  EXPECT_FALSE(land.take(s[0]));
  auto failed = land.finish();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->reason, std::string(reason::kChecksumMismatch));
  EXPECT_EQ(failed->message, "1 of 4 slices of the segment at byte offset 0 differ at the target after " +
                                 std::to_string(run::kVerifyRounds) + " re-sends");
  EXPECT_EQ(wire.sent.size(), static_cast<std::size_t>(run::kVerifyRounds));
  EXPECT_EQ(target.reports().size(), static_cast<std::size_t>(run::kVerifyRounds) + 1);
  EXPECT_TRUE(run.ends.empty()) << "bytes that differ counted as landed";
}

TEST_F(LandStageTest, ASliceTheSegmentDoesNotHaveIsATransportError) {
  const auto s = segments(1);
  target.answer = [](const api::LandedReport&) { return mismatched({7}); };
  LandStage land = stage(1);
  EXPECT_FALSE(land.take(s[0]));
  auto failed = land.finish();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->reason, std::string(reason::kTransportError));
  EXPECT_EQ(failed->message, "the target agent named slice 7 of a 4-slice segment");
  EXPECT_TRUE(wire.sent.empty());
}

TEST_F(LandStageTest, AReSendTheWireGaveUpOnEndsTheStageWithTheWiresReason) {
  const auto s = segments(1);
  target.answer = [](const api::LandedReport&) { return mismatched({0}); };
  wire.fails = run::Failure{TransferState::Failed, reason::kStalled, "no bytes moved for 5000 ms"};
  LandStage land = stage(1);
  EXPECT_FALSE(land.take(s[0]));
  auto failed = land.finish();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->reason, std::string(reason::kStalled));
  EXPECT_EQ(failed->message, "no bytes moved for 5000 ms");
  EXPECT_TRUE(run.ends.empty());
}

TEST_F(LandStageTest, AFailedReportEndsTheStageWithTheReasonItMeans) {
  const struct {
    ErrorCode code;
    const char* reason;
  } cases[] = {{ErrorCode::PeerUnreachable, reason::kPeerUnreachable},
               {ErrorCode::NotFound, reason::kAccessLost},
               {ErrorCode::ResourceExhausted, reason::kNoSpaceLeft},
               {ErrorCode::Forbidden, reason::kRemoteAccessDenied},
               {ErrorCode::Io, reason::kTransportError}};
  for (const auto& c : cases) {
    SCOPED_TRACE(to_string(c.code));
    FakeTarget refusing;
    refusing.answer = [&](const api::LandedReport& r) -> Result<api::Landed> {
      if (r.offset == 0) return Error{c.code, "the agent said no"};
      return api::Landed{};
    };
    LandRun landed;
    const auto s = segments(2);
    LandStage land(landed, wire, &refusing, {0, MiB, 2}, {});
    EXPECT_FALSE(land.take(s[0]));
    EXPECT_FALSE(land.take(s[1]));
    auto failed = land.finish();
    ASSERT_TRUE(failed);
    EXPECT_EQ(failed->state, TransferState::Failed);
    EXPECT_EQ(failed->reason, std::string(c.reason));
    EXPECT_EQ(failed->message, "reporting landed bytes to the target agent: the agent said no");
    EXPECT_TRUE(landed.ends.empty()) << "a segment after the failed one landed";
  }
}

TEST_F(LandStageTest, ATargetAgentFromBeforeWaitForPreviousGetsOneReportAtATime) {
  const auto s = segments(4);
  target.answer = [](const api::LandedReport& r) -> Result<api::Landed> {
    if (r.wait_for_previous)
      return Error{ErrorCode::InvalidArgument, "unknown field \"waitForPrevious\" in the landed report"};
    return api::Landed{};
  };
  LandStage land = stage(2);
  for (const auto& segment : s) EXPECT_FALSE(land.take(segment));
  EXPECT_FALSE(land.finish());
  EXPECT_EQ(land.depth(), 1u);
  EXPECT_EQ(run.ends, (std::vector<std::uint64_t>{4 * MiB, 8 * MiB, 12 * MiB, 16 * MiB}));
  // Per segment, whether each of its reports waited for the one before: two reports out at once may reach
  // the target in either order, a segment's second report only after its first was refused.
  std::map<std::uint64_t, std::vector<bool>> waited;
  for (const auto& r : target.reports()) waited[r.offset].push_back(r.wait_for_previous);
  EXPECT_EQ(waited,
            (std::map<std::uint64_t, std::vector<bool>>{
                {0, {false}}, {4 * MiB, {true, false}}, {8 * MiB, {true, false}}, {12 * MiB, {false}}}))
      << "the last report waited for another after the target refused that";
}

TEST_F(LandStageTest, TwoReportsOutAtOnceCountTheirTimeOnce) {
  const auto s = segments(2);
  std::promise<void> first_answered;
  auto first = first_answered.get_future().share();
  target.answer = [&](const api::LandedReport& r) {
    if (r.offset == 0) {
      std::this_thread::sleep_for(200ms);
      first_answered.set_value();
    } else {
      first.wait_for(10s);
    }
    return Result<api::Landed>(api::Landed{});
  };
  LandStage land = stage(2);
  const auto began = Steady::now();
  EXPECT_FALSE(land.take(s[0]));
  EXPECT_FALSE(land.take(s[1]));
  EXPECT_FALSE(land.finish());
  const double wall = std::chrono::duration<double>(Steady::now() - began).count();
  double busy = 0;
  for (double b : run.busy) busy += b;
  // Each report was out at least 200 ms, nearly all of it side by side: counted apart they would make
  // about twice the time the two took together.
  EXPECT_GE(busy, 0.2);
  EXPECT_LE(busy, wall);
}

TEST_F(LandStageTest, AbandoningWaitsForTheReportsStillOut) {
  const auto s = segments(2);
  target.answer = [](const api::LandedReport&) {
    std::this_thread::sleep_for(100ms);
    return Result<api::Landed>(api::Landed{});
  };
  LandStage land = stage(2);
  EXPECT_FALSE(land.take(s[0]));
  EXPECT_FALSE(land.take(s[1]));
  land.abandon();
  EXPECT_EQ(target.answered().size(), 2u) << "a report still ran against a slot the feed may free";
  EXPECT_TRUE(run.ends.empty());
  EXPECT_FALSE(land.finish()) << "abandoned reports were settled";
}

}  // namespace
}  // namespace conduit::agent
