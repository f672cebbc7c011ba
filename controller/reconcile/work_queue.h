// Keys of jobs to reconcile with the time each is due: the hand-off between the control loop's watcher and
// its workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>

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

}  // namespace conduit::controller
