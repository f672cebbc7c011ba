// The attribution rule of the proof of path (docs/path.md). A NIC's counters are node-wide, so transfers
// that run at once share one delta. Each transfer is judged against its own bytes on a NIC plus those of
// every transfer that ran wholly within its lifetime (sampled start to sampled end): bytes that certainly
// crossed the NIC inside the window the delta spans. A transfer that overlaps it only in part is left out:
// its bytes can only add to the delta, so it may hide a shortfall of at most its own size but never makes
// a false mismatch.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace conduit::agent::path {

using NicBytes = std::map<std::string, std::uint64_t>;  // NIC name -> bytes

class Ledger {
 public:
  using Clock = std::chrono::steady_clock;

  // A transfer's window opens at `start` (its first counter sample). Returns what close() takes.
  std::uint64_t open(Clock::time_point start);
  // It closes at `end` (its last sample) with `own` bytes per NIC: recorded for the transfers still open,
  // and the sums of the transfers recorded wholly inside [start, end] returned (its own not included).
  NicBytes close(std::uint64_t ticket, Clock::time_point end, const NicBytes& own);
  // A window that closes without judging (a transfer that moved nothing): forgotten.
  void abandon(std::uint64_t ticket);

  std::size_t records() const;  // kept for open windows: for tests of the pruning

 private:
  struct Record {
    Clock::time_point start, end;
    NicBytes bytes;
  };
  void prune();  // under mu_: records no open window can contain

  mutable std::mutex mu_;
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, Clock::time_point> open_;  // ticket -> start
  std::deque<Record> records_;                       // in end order
};

}  // namespace conduit::agent::path
