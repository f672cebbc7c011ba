// A submitted batch as the ibverbs progress threads see it: per rail the slices ready to post as RDMA
// WRITE/READ work requests, the batch's window on that rail, and the shared counters poll() reads.
// Each RailPart is touched only by its rail's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "conduit/transport.h"
#include "conduit/window.h"
#include "connection.h"

namespace conduit::verbs {

struct Batch;

// One slice, resolved at submit time to what a work request needs.
struct PostedOp {
  Batch* batch = nullptr;
  std::shared_ptr<Connection> connection;
  OpKind kind = OpKind::Write;
  std::uint64_t local_address = 0;
  std::uint32_t lkey = 0;
  std::uint64_t remote_address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t length = 0;
  std::uint64_t seq = 0;  // in its QP's SendQueue, once posted
};

struct RailPart {
  std::vector<PostedOp> ops;  // slices, posted in order
  std::size_t next = 0;
  Window window{16};
  bool done = false;

  bool idle() const { return window.in_flight() == 0; }
  bool all_posted() const { return next == ops.size(); }
};

struct Batch {
  using Clock = std::chrono::steady_clock;

  BatchId id = 0;
  std::uint64_t bytes_total = 0;
  std::vector<RailPart> parts;  // one per rail
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<int> parts_open{0};
  std::atomic<Clock::rep> last_progress{0};

  void touch() { last_progress.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  Clock::duration since_progress() const {
    return Clock::now().time_since_epoch() - Clock::duration(last_progress.load(std::memory_order_relaxed));
  }

  // First error wins: the WRs flushed after a failure add nothing to it.
  void fail(Error error) {
    std::lock_guard lock(mu);
    if (!error_) error_ = std::move(error);
    failed.store(true, std::memory_order_release);
  }
  std::optional<Error> error() const {
    std::lock_guard lock(mu);
    return error_;
  }
  bool finished() const { return failed.load(std::memory_order_acquire) || parts_open.load() == 0; }

  std::atomic<bool> failed{false};

 private:
  mutable std::mutex mu;
  std::optional<Error> error_;
};

}  // namespace conduit::verbs
