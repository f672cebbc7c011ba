// A rail's progress thread, for any backend: calls `round` over and over until destroyed. Destroying it
// stops the loop, wakes the thread (through the WakeEvent its rounds sleep on) and joins it, so the owner
// declares it last: it is built after, and stopped before, everything its rounds touch.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

#include "wake_event.h"

namespace conduit {

class ProgressThread {
 public:
  ProgressThread(const WakeEvent& wake, std::function<void()> round);
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

 private:
  void run();

  const WakeEvent& wake_;
  std::function<void()> round_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts after everything above is constructed
};

}  // namespace conduit
