// Hears a running transfer's end from its agent when it happens: one long-poll (GET /v1/transfers/{id}
// ?waitSeconds) per watched transfer, on a thread of its own, so no reconcile worker waits. When the
// transfer ends (or its agent no longer knows it) the job's key goes to `on_end`, the control loop's queue,
// and the job is reconciled at once. The reconciler's own looks on a timer go on as before: a watch is a
// shortcut to them, never the only way an end is seen.
//
// Bounded: at most `max_watches` at once and `per_node` at one agent (an agent answers only so many
// long-polls, kMaxLongPolls, and its other callers need some); a transfer over the bound is not watched and
// its job falls back to the timer. An agent that errs or will not wait is asked again after a back-off.
// A watch ends with its transfer, with unwatch() (the job moved on or was deleted) and with stop() (the
// control loop stopping: shutdown, or a lost Lease); stop() returns once every long-poll has come back, at
// most `wait` later.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent_api.h"
#include "store/object_store.h"

namespace conduit::controller {

struct TransferWatcherOptions {
  // One long-poll's wait at the agent; also how long stop() may take. The agent answers at once when the
  // transfer ends, so this sets only how often an unfinished transfer is asked again.
  std::chrono::seconds wait{1};
  std::size_t max_watches = 64;
  std::size_t per_node = 8;
  std::chrono::milliseconds backoff{500};  // first back-off after an error, doubled up to max_backoff
  std::chrono::milliseconds max_backoff{8000};
};

// Which transfer a job runs: what a watch long-polls.
struct WatchedTransfer {
  std::string node;
  std::string id;
  std::string ns;  // the job's namespace: the agent shows a job only its own namespace's transfers
  bool operator==(const WatchedTransfer&) const = default;
};

class TransferWatcher {
 public:
  using OnEnd = std::function<void(const ObjectKey&)>;

  explicit TransferWatcher(AgentApi& agents, TransferWatcherOptions options = {});
  ~TransferWatcher();
  TransferWatcher(const TransferWatcher&) = delete;
  TransferWatcher& operator=(const TransferWatcher&) = delete;

  // Watches from now on report to `on_end` (called on a watch's thread; must not block).
  void start(OnEnd on_end);
  // Cancels every watch and returns once their threads have ended; watch() then refuses until start().
  void stop();

  // Watches `transfer` for `job` until it ends, replacing a watch of another transfer for the same job.
  // True when it is watched (already, or from now); false over the bound or while stopped: the job's timer
  // must look instead.
  bool watch(const ObjectKey& job, const WatchedTransfer& transfer);
  void unwatch(const ObjectKey& job);

  std::size_t watching() const;  // watches under way, for tests and metrics

 private:
  struct Watch {
    WatchedTransfer transfer;
    bool cancelled = false;
    bool done = false;  // its thread has finished; joined at the next reap
    std::thread thread;
  };

  void run(const ObjectKey& job, std::shared_ptr<Watch> watch);
  // Waits `delay` unless the watch is cancelled meanwhile; false when it is.
  bool pause(const std::shared_ptr<Watch>& watch, std::chrono::milliseconds delay);
  void reap_locked();  // joins the threads of finished watches
  std::size_t count_locked(const std::string& node) const;

  AgentApi& agents_;
  const TransferWatcherOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cancelled_cv_;
  bool running_ = false;
  OnEnd on_end_;
  std::map<ObjectKey, std::shared_ptr<Watch>> watches_;
  std::vector<std::shared_ptr<Watch>> finished_;  // unwatched or replaced: their threads still to join
};

}  // namespace conduit::controller
