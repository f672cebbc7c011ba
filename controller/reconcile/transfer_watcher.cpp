#include "transfer_watcher.h"

#include <algorithm>
#include <vector>

#include "conduit/common/log.h"

namespace conduit::controller {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

TransferWatcher::TransferWatcher(AgentApi& agents, TransferWatcherOptions options)
    : agents_(agents), options_(options) {}

TransferWatcher::~TransferWatcher() { stop(); }

void TransferWatcher::start(OnEnd on_end) {
  std::lock_guard lock(mu_);
  on_end_ = std::move(on_end);
  running_ = true;
}

void TransferWatcher::stop() {
  std::vector<std::shared_ptr<Watch>> all;
  {
    std::lock_guard lock(mu_);
    running_ = false;
    for (auto& [job, w] : watches_) all.push_back(std::move(w));
    watches_.clear();
    all.insert(all.end(), finished_.begin(), finished_.end());
    finished_.clear();
    for (const auto& w : all) w->cancelled = true;
  }
  cancelled_cv_.notify_all();
  // Each thread returns when its long-poll does (at most options_.wait): nothing of ours is used after.
  for (const auto& w : all) {
    if (w->thread.joinable()) w->thread.join();
  }
}

bool TransferWatcher::watch(const ObjectKey& job, const WatchedTransfer& transfer) {
  std::lock_guard lock(mu_);
  if (!running_) return false;
  reap_locked();
  if (auto it = watches_.find(job); it != watches_.end()) {
    if (it->second->transfer == transfer) return true;
    it->second->cancelled = true;  // an earlier attempt's transfer
    finished_.push_back(std::move(it->second));
    watches_.erase(it);
    cancelled_cv_.notify_all();
  }
  std::size_t total = 0;
  for (const auto& [key, w] : watches_) total += w->done ? 0 : 1;
  for (const auto& w : finished_) total += w->done ? 0 : 1;
  // A cancelled watch's long-poll still holds its slot at the agent until it returns: it counts.
  if (total >= options_.max_watches || count_locked(transfer.node) >= options_.per_node) return false;
  auto w = std::make_shared<Watch>();
  w->transfer = transfer;
  w->thread = std::thread([this, job, w] { run(job, w); });
  watches_[job] = std::move(w);
  return true;
}

void TransferWatcher::unwatch(const ObjectKey& job) {
  std::lock_guard lock(mu_);
  reap_locked();
  const auto it = watches_.find(job);
  if (it == watches_.end()) return;
  it->second->cancelled = true;
  finished_.push_back(std::move(it->second));
  watches_.erase(it);
  cancelled_cv_.notify_all();
}

std::size_t TransferWatcher::watching() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [job, w] : watches_) n += w->done ? 0 : 1;
  return n;
}

std::size_t TransferWatcher::count_locked(const std::string& node) const {
  std::size_t n = 0;
  for (const auto& [job, w] : watches_) n += !w->done && w->transfer.node == node ? 1 : 0;
  for (const auto& w : finished_) n += !w->done && w->transfer.node == node ? 1 : 0;
  return n;
}

void TransferWatcher::reap_locked() {
  // A done thread no longer takes mu_, so joining it here cannot wait on us.
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (!it->second->done) {
      ++it;
      continue;
    }
    if (it->second->thread.joinable()) it->second->thread.join();
    it = watches_.erase(it);
  }
  std::erase_if(finished_, [](const std::shared_ptr<Watch>& w) {
    if (!w->done) return false;
    if (w->thread.joinable()) w->thread.join();
    return true;
  });
}

bool TransferWatcher::pause(const std::shared_ptr<Watch>& w, milliseconds delay) {
  std::unique_lock lock(mu_);
  return !cancelled_cv_.wait_for(lock, delay, [&] { return w->cancelled; });
}

void TransferWatcher::run(const ObjectKey& job, std::shared_ptr<Watch> w) {
  const WatchedTransfer& t = w->transfer;
  milliseconds backoff = options_.backoff;
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (w->cancelled) break;
    }
    const auto asked = Steady::now();
    auto r = agents_.wait_transfer(t.node, t.id, options_.wait, t.ns);
    // NotFound: the agent lost it (restarted); the reconcile says so at once instead of at its next look.
    const bool ended = r ? r->finished() : r.error().code == ErrorCode::NotFound;
    if (ended) {
      std::lock_guard lock(mu_);
      if (!w->cancelled && on_end_) on_end_(job);
      break;
    }
    // An answer well before the wait was up, the transfer still going, is an agent that would not wait (it
    // holds its most long-polls): asking again at once would poll it in a loop.
    const bool waited = r && Steady::now() - asked >= options_.wait / 2;
    if (waited) {
      backoff = options_.backoff;
      continue;
    }
    if (!r) {
      log::debug("watching a transfer's end failed; the job's timer looks meanwhile",
                 {{"job", job.ns + "/" + job.name}, {"transfer", t.id}, {"error", r.error().message}});
    }
    if (!pause(w, backoff)) break;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  std::lock_guard lock(mu_);
  w->done = true;
}

}  // namespace conduit::controller
