// Selective signaling and send-queue accounting: never more WRs outstanding than the queue holds, a
// completion for every Nth WR and for the last of each post, and the completion of a signaled WR retiring
// every unsignaled WR before it. A simulated device that completes WRs in order and reports only the
// signaled ones checks that no WR is ever left without a completion to retire it.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

#include "send_queue.h"

namespace conduit::verbs {
namespace {

using Tags = std::vector<std::uint64_t>;

TEST(VerbsSendQueue, SignalsEveryNthAndTheLastOfAPost) {
  SendQueue sq(64, 4);
  std::vector<std::uint64_t> seqs;
  for (std::uint64_t t = 0; t < 10; ++t) seqs.push_back(sq.push(100 + t));
  sq.seal();
  std::vector<bool> signaled;
  for (auto s : seqs) signaled.push_back(sq.signaled(s));
  EXPECT_EQ(signaled, (std::vector<bool>{false, false, false, true, false, false, false, true, false, true}));
  EXPECT_EQ(sq.outstanding(), 10u);
  EXPECT_EQ(sq.signaled_outstanding(), 3u);
}

TEST(VerbsSendQueue, SealIsIdempotentAndTheRunRestartsAfterIt) {
  SendQueue sq(64, 3);
  const auto a = sq.push(1);
  sq.seal();
  sq.seal();
  EXPECT_TRUE(sq.signaled(a));
  // A new post: its count starts from zero after the sealed WR.
  const auto b = sq.push(2);
  const auto c = sq.push(3);
  const auto d = sq.push(4);
  EXPECT_FALSE(sq.signaled(b));
  EXPECT_FALSE(sq.signaled(c));
  EXPECT_TRUE(sq.signaled(d));
  EXPECT_EQ(sq.signaled_outstanding(), 2u);
}

TEST(VerbsSendQueue, TheWrThatFillsTheQueueIsSignaled) {
  SendQueue sq(5, 100);
  std::vector<std::uint64_t> seqs;
  while (sq.room() > 0) seqs.push_back(sq.push(seqs.size()));
  ASSERT_EQ(seqs.size(), 5u);
  EXPECT_EQ(sq.outstanding(), 5u);
  EXPECT_EQ(sq.room(), 0u);
  EXPECT_TRUE(sq.signaled(seqs.back()));
  for (std::size_t i = 0; i + 1 < seqs.size(); ++i) EXPECT_FALSE(sq.signaled(seqs[i])) << i;
}

TEST(VerbsSendQueue, ASignaledCompletionRetiresEveryEarlierWr) {
  SendQueue sq(16, 3);
  std::vector<std::uint64_t> seqs;
  for (std::uint64_t t = 0; t < 7; ++t) seqs.push_back(sq.push(t));
  sq.seal();  // signaled: 2, 5, 6
  EXPECT_EQ(sq.retire_through(seqs[2]), (Tags{0, 1, 2}));
  EXPECT_EQ(sq.outstanding(), 4u);
  EXPECT_EQ(sq.room(), 12u);
  EXPECT_EQ(sq.retire_through(seqs[5]), (Tags{3, 4, 5}));
  EXPECT_EQ(sq.retire_through(seqs[6]), (Tags{6}));
  EXPECT_EQ(sq.outstanding(), 0u);
}

TEST(VerbsSendQueue, DuplicateOrStaleCompletionsRetireNothing) {
  SendQueue sq(16, 2);
  const auto a = sq.push(1);
  const auto b = sq.push(2);
  sq.seal();
  EXPECT_EQ(sq.retire_through(b), (Tags{1, 2}));
  EXPECT_TRUE(sq.retire_through(b).empty());
  EXPECT_TRUE(sq.retire_through(a).empty());
  EXPECT_FALSE(sq.holds(a));
  const auto c = sq.push(3);
  EXPECT_TRUE(sq.holds(c));
  EXPECT_TRUE(sq.retire_through(b).empty());
  EXPECT_EQ(sq.outstanding(), 1u);
}

TEST(VerbsSendQueue, AnErrorCompletionOnAnUnsignaledWrRetiresUpToIt) {
  // A failed WR reports a completion even when unsignaled; the WRs before it finished.
  SendQueue sq(16, 8);
  std::vector<std::uint64_t> seqs;
  for (std::uint64_t t = 0; t < 5; ++t) seqs.push_back(sq.push(t));
  sq.seal();
  ASSERT_FALSE(sq.signaled(seqs[2]));
  EXPECT_EQ(sq.retire_through(seqs[2]), (Tags{0, 1, 2}));
  // The flushed ones behind it each report too (in order); the last retires the rest.
  EXPECT_EQ(sq.retire_through(seqs[3]), (Tags{3}));
  EXPECT_EQ(sq.retire_through(seqs[4]), (Tags{4}));
}

TEST(VerbsSendQueue, ARefusedPostForgetsTheUnpostedTailAndFindsUncoveredWrs) {
  SendQueue sq(16, 4);
  const auto s0 = sq.push(0);
  const auto s1 = sq.push(1);
  sq.seal();  // 0 unsignaled, 1 signaled: a complete earlier post
  (void)s0;
  std::vector<std::uint64_t> chain;
  for (std::uint64_t t = 2; t < 8; ++t) chain.push_back(sq.push(t));
  sq.seal();  // signaled: 5 (4th since the seal) and 7
  // ibv_post_send refused the chain at tag 4: 4..7 never reached the device.
  EXPECT_EQ(sq.drop_unposted(chain[2]), (Tags{4, 5, 6, 7}));
  EXPECT_EQ(sq.outstanding(), 4u);
  // 2 and 3 were posted, but no signaled WR follows them any more.
  EXPECT_EQ(sq.drop_uncovered(), (Tags{2, 3}));
  EXPECT_EQ(sq.outstanding(), 2u);
  EXPECT_EQ(sq.retire_through(s1), (Tags{0, 1}));
}

TEST(VerbsSendQueue, LookupsSurviveGapsInSequenceNumbers) {
  SendQueue sq(16, 16);
  const auto a = sq.push(1);
  const auto b = sq.push(2);
  sq.drop_unposted(b);
  const auto c = sq.push(3);  // sequence numbers keep rising: a gap where b was
  sq.seal();
  EXPECT_GT(c, b);
  EXPECT_FALSE(sq.holds(b));
  EXPECT_TRUE(sq.holds(c));
  EXPECT_TRUE(sq.signaled(c));
  EXPECT_FALSE(sq.signaled(a));
  EXPECT_EQ(sq.retire_through(c), (Tags{1, 3}));
}

// A device that executes posted WRs strictly in order, at its own pace, and reports completions only for
// signaled ones: whatever the post sizes, depth and signal interval, every WR is retired exactly once, in
// order, the queue never holds more than its depth, and once the device drains nothing is left.
TEST(VerbsSendQueue, SimulatedDeviceNeverStrandsAWr) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const std::uint32_t depth = 1 + rng() % 64;
    const std::uint32_t every = 1 + rng() % 40;
    SendQueue sq(depth, every);
    std::deque<std::uint64_t> on_device;  // posted, not yet executed (seq)
    std::uint64_t next_tag = 0;
    std::uint64_t next_retired = 0;
    std::uint64_t signals = 0;
    auto execute = [&](std::size_t n) {
      for (std::size_t k = 0; k < n && !on_device.empty(); ++k) {
        const std::uint64_t seq = on_device.front();
        on_device.pop_front();
        if (!sq.signaled(seq)) continue;
        ++signals;
        for (std::uint64_t tag : sq.retire_through(seq)) {
          ASSERT_EQ(tag, next_retired) << "round " << round;
          ++next_retired;
        }
      }
    };
    for (int step = 0; step < 300; ++step) {
      const std::uint32_t post = sq.room() == 0 ? 0 : rng() % (sq.room() + 1);
      for (std::uint32_t i = 0; i < post; ++i) on_device.push_back(sq.push(next_tag++));
      if (post > 0) sq.seal();
      ASSERT_LE(sq.outstanding(), depth);
      // Coverage: the newest outstanding WR is always signaled, so a completion will reach every WR.
      if (sq.outstanding() > 0) {
        ASSERT_FALSE(on_device.empty());
        ASSERT_TRUE(sq.signaled(on_device.back()));
      }
      execute(rng() % 8);
    }
    execute(on_device.size());
    EXPECT_EQ(sq.outstanding(), 0u) << "round " << round << ": WRs left with no completion to retire them";
    EXPECT_EQ(next_retired, next_tag);
    // Selective signaling signals about one WR in `every`, plus one per post at most.
    EXPECT_LE(signals, next_tag);
  }
}

TEST(VerbsSendQueue, DegenerateSizesAreClampedToOne) {
  SendQueue sq(0, 0);
  EXPECT_EQ(sq.depth(), 1u);
  EXPECT_EQ(sq.signal_every(), 1u);
  const auto a = sq.push(9);
  EXPECT_TRUE(sq.signaled(a));
  EXPECT_EQ(sq.room(), 0u);
}

}  // namespace
}  // namespace conduit::verbs
