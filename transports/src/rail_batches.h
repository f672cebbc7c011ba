// The batches one rail's progress thread drives, for any backend. submit() hands a batch over from any
// thread (enqueue: into the inbox, then wake the thread); the progress thread alone takes them in at the
// start of each round, walks them, fails the ones stalled on its rail, and lets go of those whose part on
// its rail has closed. `Batch` is a SlicedBatch (sliced_batch.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "wake_event.h"

namespace conduit {

template <class Batch>
class RailBatches {
 public:
  explicit RailBatches(std::uint32_t rail) : rail_(rail) {}

  // Any thread.
  void enqueue(std::shared_ptr<Batch> batch) {
    {
      std::lock_guard lock(inbox_mu_);
      inbox_.push_back(std::move(batch));
    }
    wake_.notify();
  }
  // What the progress thread sleeps on besides its device: enqueue() and shutdown notify it.
  const WakeEvent& wake() const { return wake_; }

  // The rest is for the progress thread alone.

  // One round of the progress loop: takes in what enqueue() handed over, posts what the windows allow
  // (`post`) and retires completions (`reap`), each returning whether anything moved, fails the batches
  // with no completion on this rail for `stall_timeout` with `stall_error()`, and lets go of the batches
  // whose part here has closed. Returns whether anything moved.
  template <class Post, class Reap, class StallError>
  bool round(Post&& post, Reap&& reap, std::chrono::milliseconds stall_timeout, StallError&& stall_error) {
    {
      std::lock_guard lock(inbox_mu_);
      for (auto& b : inbox_) active_.push_back(std::move(b));
      inbox_.clear();
    }
    bool progressed = post();
    progressed |= reap();
    for (auto& b : active_) b->fail_if_stalled(rail_, stall_timeout, stall_error);
    std::erase_if(active_, [this](const std::shared_ptr<Batch>& b) { return b->done(rail_); });
    return progressed;
  }
  bool empty() const { return active_.empty(); }
  auto begin() { return active_.begin(); }
  auto end() { return active_.end(); }

 private:
  std::uint32_t rail_;
  WakeEvent wake_;
  std::mutex inbox_mu_;
  std::vector<std::shared_ptr<Batch>> inbox_;
  std::vector<std::shared_ptr<Batch>> active_;  // progress thread only
};

}  // namespace conduit
