// Send-queue accounting for one RC queue pair with selective signaling, as a pure class.
//
// A QP created with sq_sig_all = 0 produces a completion only for WRs posted with IBV_SEND_SIGNALED (and
// for any WR that fails). Its send-queue slots, though, are freed for every WR up to a completed one: on RC
// WRs complete in order, so the completion of signaled WR n proves every earlier WR of that QP finished
// too. Hence the rules:
//   - never more than `depth` WRs outstanding (posted, not yet known complete): the SQ cannot overflow;
//   - signal every `signal_every`-th WR, the WR that fills the queue, and the last WR of each post (seal),
//     so every outstanding WR always has a signaled WR at or after it and a completion will retire it;
//   - a completion for WR n (signaled, or an error / flush of any WR) retires n and every earlier WR.
// Tags are the caller's (a pointer to its slice record): retire and drop return them in posting order.
// One thread (the rail's progress thread) owns each SendQueue.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace conduit::verbs {

class SendQueue {
 public:
  SendQueue(std::uint32_t depth, std::uint32_t signal_every);

  std::uint32_t depth() const { return depth_; }
  std::uint32_t signal_every() const { return signal_every_; }
  std::uint32_t outstanding() const { return static_cast<std::uint32_t>(entries_.size()); }
  std::uint32_t room() const { return depth_ - outstanding(); }
  std::uint32_t signaled_outstanding() const;  // how many completions are still to come

  // Records the next WR (room() must be > 0) and returns its sequence number, which the caller puts in
  // the WR (wr_id leads to it) and later hands to retire_through().
  std::uint64_t push(std::uint64_t tag);
  // Marks the newest WR signaled if it is not: called once the chain about to be posted is complete.
  void seal();
  bool signaled(std::uint64_t seq) const;
  bool holds(std::uint64_t seq) const;  // posted and not yet retired or dropped

  // A completion arrived for WR `seq`: retires it and every earlier WR; returns their tags, oldest first.
  // A sequence already retired (a duplicate) retires nothing.
  std::vector<std::uint64_t> retire_through(std::uint64_t seq);
  // ibv_post_send refused the chain from WR `seq` on: those WRs were never posted; forget them.
  std::vector<std::uint64_t> drop_unposted(std::uint64_t seq);
  // Posted WRs that no signaled WR follows (only after a partial post): no completion will name them.
  std::vector<std::uint64_t> drop_uncovered();

 private:
  struct Entry {
    std::uint64_t seq;
    std::uint64_t tag;
    bool signaled;
  };
  const Entry* find(std::uint64_t seq) const;

  std::uint32_t depth_;
  std::uint32_t signal_every_;
  std::uint64_t next_seq_ = 0;
  std::uint32_t unsignaled_run_ = 0;  // WRs pushed since the last signaled one
  std::deque<Entry> entries_;
};

}  // namespace conduit::verbs
