// The control loop: a watcher thread turns store changes and periodic resyncs into keys on a work queue;
// workers reconcile them, several jobs at once but never one job twice at once, and schedule the next look
// each reconcile asks for.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "reconciler.h"
#include "store/object_store.h"
#include "work_queue.h"

namespace conduit::controller {

struct ControlLoopOptions {
  std::chrono::milliseconds active_resync{1000};  // while a job is not finished: polls progress, deadlines
  std::chrono::milliseconds idle_resync{10000};   // otherwise: catches missed changes
  std::chrono::milliseconds watch_timeout{500};
  // Jobs reconciled at once. Each reconcile mostly waits on the apiserver and the agents, so a few workers
  // keep many small jobs moving; measured in bench/controller_bench.py.
  unsigned workers = 4;
  // Called on a worker after each reconcile with its duration and why it failed ("exception", "store_read",
  // "store_write"; nullptr when it did not); for metrics. Must not block.
  std::function<void(double seconds, const char* error)> on_reconciled;
};

class ControlLoop {
 public:
  ControlLoop(ObjectStore& store, Reconciler& reconciler, ControlLoopOptions options = {});
  ~ControlLoop();
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  void start();
  // Lets the reconcile in progress finish, then joins both threads. Agent transfers keep running: the next
  // controller reattaches to them.
  void stop();

  std::size_t queue_depth() const { return queue_.size(); }

 private:
  void watch_loop();
  void work_loop();
  bool resync();  // queues every job; true if any is unfinished

  ObjectStore& store_;
  Reconciler& reconciler_;
  ControlLoopOptions options_;
  WorkQueue queue_;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
  std::vector<std::thread> workers_;
};

}  // namespace conduit::controller
