// A batch's end, pushed to the thread that watches it: the transport calls BatchOptions::on_finished, which
// wakes the watcher at once; without it the watcher learnt of the end at its next look, up to a poll
// interval late (200 us for a transfer's segment, up to 1 ms for a scatter-gather request).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

namespace conduit::agent {

class BatchWakeup {
 public:
  // For BatchOptions::on_finished. It holds the wakeup: a rail thread may call it after the watcher saw
  // the batch finished and moved on.
  static std::function<void()> notifier(const std::shared_ptr<BatchWakeup>& wakeup) {
    return [wakeup] { wakeup->wake(); };
  }

  void wake() {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    cv_.notify_one();
  }
  // Returns once woken since the last call, or after `timeout` (the watcher's look for progress and stops).
  template <class Rep, class Period>
  void wait_for(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return woken_; });
    woken_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
};

}  // namespace conduit::agent
