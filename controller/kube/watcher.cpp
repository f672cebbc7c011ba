#include "watcher.h"

#include <algorithm>

#include "kube_client/log.h"
#include "kube_client/resource.h"

namespace conduit::kube {

using nlohmann::json;

std::string_view to_string(WatchState state) {
  switch (state) {
    case WatchState::Empty:
      return "Empty";
    case WatchState::Listed:
      return "Listed";
    case WatchState::Watching:
      return "Watching";
    case WatchState::Relisting:
      return "Relisting";
  }
  return "?";
}

controller::ObjectKey key_of(const json& object) {
  return {kube_client::meta_string(object, "namespace"), kube_client::meta_string(object, "name")};
}

namespace {

std::string rv_of(const json& object) { return kube_client::meta_string(object, "resourceVersion"); }

}  // namespace

Watcher::Watcher(ListWatchSource& source, OnChange on_change, WatcherOptions options)
    : source_(source), on_change_(std::move(on_change)), options_(options) {}

Watcher::~Watcher() { stop(); }

void Watcher::start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      try {
        step(stop);
      } catch (const std::exception& e) {
        // Malformed data or a throwing callback must not end the process (an exception leaving a thread
        // does); the state is unchanged, so the same transition is tried again after a backoff.
        kube_client::log(kube_client::LogLevel::Error, std::string("watch: ") + e.what());
        back_off(stop);
      }
    }
  });
}

void Watcher::stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();  // fires the stop callbacks that break a blocked read or backoff wait
  thread_.join();
}

WatchState Watcher::step(std::stop_token stop) {
  switch (state()) {
    case WatchState::Empty:
      return list_initial(stop);
    case WatchState::Listed:
    case WatchState::Watching:
      return watch_from_rv(stop);
    case WatchState::Relisting:
      return relist_after_gone(stop);
  }
  return state();
}

// ---- transitions ------------------------------------------------------------------------------------------

WatchState Watcher::list_initial(std::stop_token stop) {
  auto listed = source_.list();
  if (!listed) {
    kube_client::log(kube_client::LogLevel::Warn, "watch: initial list failed: " + listed.error().message);
    {
      std::lock_guard lock(mutex_);
      ++stats_.failures;
    }
    back_off(stop);
    return WatchState::Empty;
  }
  std::vector<controller::ObjectKey> changed;
  replace_cache(std::move(listed->items), std::move(listed->resource_version), changed);
  reset_backoff();
  set_state(WatchState::Listed);
  notify(changed);
  return WatchState::Listed;
}

WatchState Watcher::watch_from_rv(std::stop_token stop) {
  std::string from;
  {
    std::lock_guard lock(mutex_);
    from = rv_;
    ++stats_.watches;
    stats_.last_watch_rv = from;
  }
  set_state(WatchState::Watching);

  EventOutcome outcome = EventOutcome::Continue;
  std::uint64_t delivered = 0;
  auto started = std::chrono::steady_clock::now();
  kube_client::WatchEnd end = source_.watch(
      from,
      [&](const WatchEvent& ev) {
        std::vector<controller::ObjectKey> changed;
        outcome = apply_event(ev, changed);
        ++delivered;
        notify(changed);
        return outcome == EventOutcome::Continue;
      },
      stop);

  if (stop.stop_requested()) return WatchState::Watching;
  bool gone = outcome == EventOutcome::Gone ||
              (end.kind == kube_client::WatchEnd::Kind::HttpError && end.http_status == 410);
  if (gone) {
    kube_client::log(kube_client::LogLevel::Info,
                     "watch: resourceVersion " + from + " is gone (410): relisting");
    {
      std::lock_guard lock(mutex_);
      ++stats_.gone;
    }
    set_state(WatchState::Relisting);
    return WatchState::Relisting;
  }
  bool failed = outcome == EventOutcome::Failed || end.kind == kube_client::WatchEnd::Kind::HttpError ||
                end.kind == kube_client::WatchEnd::Kind::Transport;
  bool too_short = delivered == 0 && std::chrono::steady_clock::now() - started < options_.min_healthy_stream;
  if (failed) {
    if (!end.message.empty())
      kube_client::log(kube_client::LogLevel::Warn, "watch: stream failed: " + end.message);
    std::lock_guard lock(mutex_);
    ++stats_.failures;
  }
  // Closed (the server's timeout) is the normal end: re-watch from the last resourceVersion at once.
  if (failed || too_short) {
    back_off(stop);
  } else {
    reset_backoff();
  }
  return WatchState::Watching;
}

WatchState Watcher::relist_after_gone(std::stop_token stop) {
  auto listed = source_.list();
  if (!listed) {
    kube_client::log(kube_client::LogLevel::Warn, "watch: relist failed: " + listed.error().message);
    {
      std::lock_guard lock(mutex_);
      ++stats_.failures;
    }
    back_off(stop);
    return WatchState::Relisting;
  }
  std::vector<controller::ObjectKey> changed;
  replace_cache(std::move(listed->items), std::move(listed->resource_version), changed);
  {
    std::lock_guard lock(mutex_);
    ++stats_.relists;
  }
  reset_backoff();
  set_state(WatchState::Listed);
  notify(changed);
  return WatchState::Listed;
}

// ---- events and cache -------------------------------------------------------------------------------------

Watcher::EventOutcome Watcher::apply_event(const WatchEvent& ev,
                                           std::vector<controller::ObjectKey>& changed) {
  std::lock_guard lock(mutex_);
  switch (ev.type) {
    case WatchEvent::Type::Added:
    case WatchEvent::Type::Modified: {
      controller::ObjectKey key = key_of(ev.object);
      remember_rv(rv_of(ev.object));
      cache_[key] = ev.object;
      changed.push_back(std::move(key));
      return EventOutcome::Continue;
    }
    case WatchEvent::Type::Deleted: {
      controller::ObjectKey key = key_of(ev.object);
      remember_rv(rv_of(ev.object));
      cache_.erase(key);
      changed.push_back(std::move(key));
      return EventOutcome::Continue;
    }
    case WatchEvent::Type::Bookmark:
      // Nothing changed, but the server vouches that nothing before this RV is left unsent: resuming here
      // after a disconnect avoids a 410 on a quiet resource whose last event has left the watch cache.
      remember_rv(rv_of(ev.object));
      ++stats_.bookmarks;
      return EventOutcome::Continue;
    case WatchEvent::Type::Error: {
      // A Status: code 410 means our resourceVersion fell out of the server's window.
      auto code = ev.object.find("code");
      if (code != ev.object.end() && code->is_number_integer() && code->get<int>() == 410) {
        return EventOutcome::Gone;
      }
      kube_client::log(kube_client::LogLevel::Warn, "watch: ERROR event: " + ev.object.dump());
      return EventOutcome::Failed;
    }
  }
  return EventOutcome::Continue;
}

void Watcher::remember_rv(std::string rv) {
  // An event without one (never seen from a real server) must not turn the next watch into "from now".
  if (!rv.empty()) rv_ = std::move(rv);
}

void Watcher::replace_cache(std::vector<json> items, std::string rv,
                            std::vector<controller::ObjectKey>& changed) {
  std::map<controller::ObjectKey, json> fresh;
  for (auto& item : items) {
    controller::ObjectKey key = key_of(item);
    fresh.emplace(std::move(key), std::move(item));
  }
  std::lock_guard lock(mutex_);
  // Only what differs is reported: after a relist the keys whose resourceVersion moved or which vanished.
  for (const auto& [key, obj] : fresh) {
    auto old = cache_.find(key);
    if (old == cache_.end() || rv_of(old->second) != rv_of(obj)) changed.push_back(key);
  }
  for (const auto& [key, obj] : cache_) {
    if (!fresh.contains(key)) changed.push_back(key);
  }
  cache_ = std::move(fresh);
  rv_ = std::move(rv);
  synced_ = true;
  ++stats_.lists;
}

void Watcher::set_state(WatchState s) {
  {
    std::lock_guard lock(mutex_);
    state_ = s;
  }
  changed_cv_.notify_all();
}

void Watcher::notify(const std::vector<controller::ObjectKey>& keys) {
  if (!keys.empty() && on_change_) on_change_(keys);
}

void Watcher::back_off(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  backoff_ = backoff_.count() == 0 ? options_.initial_backoff : std::min(backoff_ * 2, options_.max_backoff);
  auto wait = backoff_;
  // Wakes early only for stop: nothing else changes while this thread is the one that would change it.
  changed_cv_.wait_for(lock, stop, wait, [] { return false; });
}

void Watcher::reset_backoff() {
  std::lock_guard lock(mutex_);
  backoff_ = std::chrono::milliseconds(0);
}

// ---- queries ----------------------------------------------------------------------------------------------

WatchState Watcher::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

bool Watcher::synced() const {
  std::lock_guard lock(mutex_);
  return synced_;
}

bool Watcher::wait_synced(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_cv_.wait_for(lock, timeout, [this] { return synced_; });
}

std::string Watcher::resource_version() const {
  std::lock_guard lock(mutex_);
  return rv_;
}

std::vector<json> Watcher::objects() const {
  std::lock_guard lock(mutex_);
  std::vector<json> out;
  out.reserve(cache_.size());
  for (const auto& [key, obj] : cache_) out.push_back(obj);
  return out;
}

std::optional<json> Watcher::get(const controller::ObjectKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

WatcherStats Watcher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace conduit::kube
