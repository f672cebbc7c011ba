// The controller loop: a watcher thread turns store changes and periodic resyncs into keys on a work queue;
// workers reconcile them, several jobs at once but never one job twice at once, and schedule the next look
// each reconcile asks for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "reconciler.h"
#include "store/object_store.h"

namespace conduit::controller {

// Keys with the time each is due; a key is queued at most once, at its earliest time. A key handed out by
// pop() is not handed out again until done() returns it, even if added meanwhile (it is then due again).
class WorkQueue {
 public:
  void add(const ObjectKey& key,
           std::chrono::steady_clock::time_point due = std::chrono::steady_clock::now());
  // Queues the key due now unless it is queued already (at whatever time) or held by a worker: a periodic
  // resync must not pull forward the looks reconciles scheduled, nor pile onto jobs being reconciled.
  void add_if_absent(const ObjectKey& key);
  // The next due key no worker holds, waiting for one; nullopt once shut down.
  std::optional<ObjectKey> pop();
  void done(const ObjectKey& key);
  void shutdown();
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<ObjectKey, std::chrono::steady_clock::time_point> due_;
  std::set<ObjectKey> held_;
  bool shutdown_ = false;
};

struct ControllerOptions {
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

class Controller {
 public:
  Controller(ObjectStore& store, Reconciler& reconciler, ControllerOptions options = {});
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

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
  ControllerOptions options_;
  WorkQueue queue_;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
  std::vector<std::thread> workers_;
};

}  // namespace conduit::controller
