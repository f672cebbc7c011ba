// A submitted batch dealt over the rails, for any backend: per rail the slices to post in order and the
// batch's window there, plus the rail-side accounting both backends follow. A rail's part closes once
// nothing of it is in flight and everything is posted (or the batch failed or was cancelled); a part with
// work left and no completion for the stall timeout fails the batch. A backend supplies only what one
// posted slice carries (`Op`: its work request or libfabric call, with a pointer back to the batch).
//
// Threads: submit() fills the parts before any rail sees the batch; after that each part is touched only
// by its rail's progress thread, and the BatchProgress counters are what the threads share.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "batch_progress.h"
#include "conduit/slicer.h"
#include "conduit/window.h"

namespace conduit {

template <class Op>
struct RailPart {
  std::vector<Op> ops;  // slices, posted in order
  std::size_t next = 0;
  Window window{16};
  bool done = false;

  bool idle() const { return window.in_flight() == 0; }
  bool all_posted() const { return next == ops.size(); }
};

template <class Op>
class SlicedBatch : public BatchProgress {
 public:
  std::vector<RailPart<Op>> parts;  // one per rail of the transport

  SlicedBatch(std::uint32_t rails, const BatchOptions& options) : parts(rails) {
    for (RailPart<Op>& part : parts) part.window = Window(options.window);
    on_finished = options.on_finished;
  }

  // submit(): sizes each rail's list for `slices` (Slice::rail: the transport's rail) and counts the bytes.
  void reserve(std::span<const Slice> slices) {
    std::vector<std::size_t> per_rail(parts.size(), 0);
    for (const Slice& s : slices) {
      ++per_rail[s.rail];
      bytes_total += s.length;
    }
    for (std::size_t r = 0; r < parts.size(); ++r) parts[r].ops.reserve(per_rail[r]);
  }
  // submit(), once every op is in place: the rails with work are open and the stall clock starts.
  void open() {
    int open_parts = 0;
    for (const RailPart<Op>& part : parts) open_parts += part.ops.empty() ? 0 : 1;
    parts_open.store(open_parts);
    touch();
    notify_if_finished();  // nothing to post: finished already
  }

  // The rest is for rail `rail`'s progress thread alone.

  // The next slice to post there, or nullptr: all posted, the window full, or the batch stopped.
  Op* next_to_post(std::uint32_t rail) {
    RailPart<Op>& part = parts[rail];
    if (stopped() || part.all_posted() || !part.window.has_room()) return nullptr;
    return &part.ops[part.next];
  }
  // The slice next_to_post() returned is in flight.
  void posted(std::uint32_t rail) {
    RailPart<Op>& part = parts[rail];
    part.window.try_acquire();
    ++part.next;
  }
  // A posted slice of `bytes` completed, or failed with `error`.
  void complete(std::uint32_t rail, std::uint64_t bytes, const Error* error) {
    parts[rail].window.release();
    if (error != nullptr) {
      fail(*error);
    } else {
      bytes_done.fetch_add(bytes, std::memory_order_relaxed);
      touch();
    }
    close_if_done(rail);
  }
  // Closes the rail's part once nothing of it is in flight and nothing more will be posted.
  void close_if_done(std::uint32_t rail) {
    RailPart<Op>& part = parts[rail];
    if (part.done || !part.idle()) return;
    if (part.all_posted() || stopped()) {
      part.done = true;
      parts_open.fetch_sub(1);
      notify_if_finished();
    }
  }
  bool done(std::uint32_t rail) const { return parts[rail].done; }
  // Fails the batch with `stall_error()` when the rail still has work in it (slices in flight that never
  // complete, or slices the provider keeps refusing: a peer that accepted the connection but never
  // answers) and no slice has completed for `timeout`.
  template <class StallError>
  void fail_if_stalled(std::uint32_t rail, std::chrono::milliseconds timeout, StallError&& stall_error) {
    const RailPart<Op>& part = parts[rail];
    if (part.done || (part.idle() && (part.all_posted() || stopped())) || failed()) return;
    if (since_progress() > timeout) {
      fail(stall_error());
      close_if_done(rail);
    }
  }
};

}  // namespace conduit
