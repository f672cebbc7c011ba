// A submitted batch as the progress threads see it: per-rail lists of ready-to-post operations with their
// window, and the shared counters poll() reads. Each RailPart is touched only by its rail's thread.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "conduit/transport.h"
#include "conduit/window.h"

namespace conduit::fabric {

struct Batch;

// One libfabric operation, fully resolved at submit time so posting is a single call.
struct PostedOp {
  fi_context2 context{};  // first member: libfabric returns its address as op_context
  Batch* batch = nullptr;
  std::uint32_t rail = 0;
  bool deliver = false;  // write with FI_DELIVERY_COMPLETE: completes only once visible at the target
  OpKind kind = OpKind::Write;
  void* buffer = nullptr;
  std::uint64_t length = 0;
  void* desc = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::uint64_t remote_address = 0;
  std::uint64_t key = 0;
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

  // First error wins; later ones (the same peer failing every in-flight slice) add nothing.
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

}  // namespace conduit::fabric
