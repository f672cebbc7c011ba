// What every rail's progress thread and poll() share about one submitted batch, in any backend: bytes
// done, how many rails still have work in it, when a slice last completed, and the first error. Written
// once because the accounting rules are the backends' common contract: bytes count only on success, the
// first error wins (the slices a dead peer fails after it add nothing), and a batch has finished once it
// failed or every rail's part of it has closed. A cancelled batch stops posting like a failed one but
// finishes only once every part has closed (nothing in flight), or once a stall fails it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "conduit/common/result.h"
#include "conduit/transport.h"

namespace conduit {

class BatchProgress {
 public:
  using Clock = std::chrono::steady_clock;

  BatchId id = 0;
  std::uint64_t bytes_total = 0;      // set by submit() before any rail sees the batch
  std::function<void()> on_finished;  // BatchOptions::on_finished, likewise
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<int> parts_open{0};  // rails whose part is not yet closed

  // A slice completed: restarts the stall clock.
  void touch() { last_progress_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  Clock::duration since_progress() const {
    return Clock::now().time_since_epoch() - Clock::duration(last_progress_.load(std::memory_order_relaxed));
  }

  // First error wins; later ones add nothing.
  void fail(Error error);
  // Transport::cancel: records ErrorCode::Cancelled (unless an error came first) and stops posting; the
  // slices in flight are still reaped before the batch counts as finished.
  void cancel();
  std::optional<Error> error() const;
  // Cheap check for the progress threads: stop posting once anything failed or the batch was cancelled.
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  bool finished() const { return failed_.load(std::memory_order_acquire) || parts_open.load() == 0; }
  // Runs on_finished the first time it finds the batch finished: after each change that can finish it.
  void notify_if_finished();

  // What poll() reports now.
  BatchStatus status() const;

 private:
  std::atomic<Clock::rep> last_progress_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopped_{false};  // failed_ or cancelled
  std::atomic<bool> notified_{false};
  mutable std::mutex mu_;
  std::optional<Error> error_;
};

}  // namespace conduit
