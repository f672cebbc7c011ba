// LIST + WATCH as an explicit state machine (after kube-rs's watcher), keeping a cache of the objects and
// telling a callback which keys changed:
//
//   Empty --list--> Listed --watch--> Watching --stream ends--> Watching (re-watch from the last RV)
//                                        |
//                                        +--410 Gone (HTTP status or ERROR event)--> Relisting --list-->
//                                        Listed
//
// The last resourceVersion is that of the last event, BOOKMARKs included, so a reconnect resumes exactly
// there; resourceVersions are opaque and only ever compared for equality. Failures back off exponentially
// and stay in their state. step() performs one transition, so tests drive each path without a thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "controller/store/object_store.h"
#include "watch_source.h"

namespace conduit::kube {

enum class WatchState { Empty, Listed, Watching, Relisting };
std::string_view to_string(WatchState state);

struct WatcherOptions {
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  // A stream that ends sooner than this having delivered nothing is treated as a failure (backs off), so a
  // server that closes at once is not hammered.
  std::chrono::milliseconds min_healthy_stream{1000};
};

struct WatcherStats {
  std::uint64_t lists = 0;      // LISTs that succeeded, the first and every relist
  std::uint64_t relists = 0;    // of which after a 410
  std::uint64_t watches = 0;    // watch streams started
  std::uint64_t bookmarks = 0;  // BOOKMARK events seen
  std::uint64_t gone = 0;       // 410s seen, as HTTP status or ERROR event
  std::uint64_t failures = 0;   // failed LISTs, failed streams and non-410 ERROR events
  std::string last_watch_rv;    // the resourceVersion the latest stream started from
};

class Watcher {
 public:
  using OnChange = std::function<void(const std::vector<controller::ObjectKey>& keys)>;

  Watcher(ListWatchSource& source, OnChange on_change, WatcherOptions options = {});
  ~Watcher();  // stops the thread
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  void start();  // step() in a loop on a thread of its own
  void stop();   // breaks a blocked watch or backoff and joins; idempotent

  // Performs the transition out of the current state and returns the new state. Either start() or step(),
  // never both: the transitions assume one caller.
  WatchState step(std::stop_token stop = {});

  WatchState state() const;
  bool synced() const;  // a LIST has landed: the cache is complete (maybe stale while relisting)
  bool wait_synced(std::chrono::milliseconds timeout) const;
  std::string resource_version() const;
  std::vector<nlohmann::json> objects() const;
  std::optional<nlohmann::json> get(const controller::ObjectKey& key) const;
  WatcherStats stats() const;

 private:
  enum class EventOutcome { Continue, Gone, Failed };

  // The transitions, one function each.
  WatchState list_initial(std::stop_token stop);       // Empty -> Listed | Empty (backoff)
  WatchState watch_from_rv(std::stop_token stop);      // Listed | Watching -> Watching | Relisting
  WatchState relist_after_gone(std::stop_token stop);  // Relisting -> Listed | Relisting (backoff)

  // What one event does to the cache and the resourceVersion.
  EventOutcome apply_event(const WatchEvent& ev, std::vector<controller::ObjectKey>& changed);
  // Replaces the cache by a LIST's items; the keys whose object changed or vanished go to `changed`.
  void replace_cache(std::vector<nlohmann::json> items, std::string rv,
                     std::vector<controller::ObjectKey>& changed);
  void remember_rv(std::string rv);  // under mutex_
  void set_state(WatchState s);
  void notify(const std::vector<controller::ObjectKey>& keys);
  void back_off(std::stop_token stop);
  void reset_backoff();

  ListWatchSource& source_;
  OnChange on_change_;
  WatcherOptions options_;

  mutable std::mutex mutex_;
  mutable std::condition_variable_any changed_cv_;  // state or sync changes
  WatchState state_ = WatchState::Empty;
  bool synced_ = false;
  std::string rv_;
  std::map<controller::ObjectKey, nlohmann::json> cache_;
  WatcherStats stats_;
  std::chrono::milliseconds backoff_{0};

  std::jthread thread_;
};

controller::ObjectKey key_of(const nlohmann::json& object);

}  // namespace conduit::kube
