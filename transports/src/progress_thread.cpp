#include "progress_thread.h"

#include <sys/prctl.h>

namespace conduit {

ProgressThread::ProgressThread(const WakeEvent& wake, std::function<void()> round)
    : wake_(wake), round_(std::move(round)), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  stop_.store(true);
  wake_.notify();
  if (thread_.joinable()) thread_.join();
}

void ProgressThread::run() {
  // Idle sleeps may be a few microseconds long (libfabric's backoff: 1, 2, 4 ... us); the default 50 us
  // timer slack would stretch every one of them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  while (!stop_.load(std::memory_order_relaxed)) round_();
}

}  // namespace conduit
