#include "work_queue.h"

namespace conduit::controller {

using Steady = std::chrono::steady_clock;

void WorkQueue::add(const ObjectKey& key, Steady::time_point due) {
  {
    std::lock_guard lock(mu_);
    auto [it, inserted] = due_.emplace(key, due);
    if (!inserted && due < it->second) it->second = due;
  }
  cv_.notify_all();
}

void WorkQueue::add_if_absent(const ObjectKey& key) {
  {
    std::lock_guard lock(mu_);
    if (held_.contains(key)) return;
    if (!due_.emplace(key, Steady::now()).second) return;
  }
  cv_.notify_all();
}

std::optional<ObjectKey> WorkQueue::pop() {
  std::unique_lock lock(mu_);
  while (!shutdown_) {
    auto first = due_.end();
    for (auto it = due_.begin(); it != due_.end(); ++it) {
      if (held_.contains(it->first)) continue;
      if (first == due_.end() || it->second < first->second) first = it;
    }
    if (first == due_.end()) {
      cv_.wait(lock);
      continue;
    }
    if (first->second <= Steady::now()) {
      ObjectKey key = first->first;
      due_.erase(first);
      held_.insert(key);
      return key;
    }
    // A copy: another worker may erase that entry while this one waits.
    const auto due = first->second;
    cv_.wait_until(lock, due);
  }
  return std::nullopt;
}

void WorkQueue::done(const ObjectKey& key) {
  {
    std::lock_guard lock(mu_);
    held_.erase(key);
  }
  // The key may have been added while held: another worker can take it now.
  cv_.notify_all();
}

void WorkQueue::shutdown() {
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

std::size_t WorkQueue::size() const {
  std::lock_guard lock(mu_);
  return due_.size();
}

}  // namespace conduit::controller
