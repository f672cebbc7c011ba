#include "controller.h"

#include <algorithm>

#include "conduit/log.h"
#include "job_status.h"

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

Controller::Controller(ObjectStore& store, Reconciler& reconciler, ControllerOptions options)
    : store_(store), reconciler_(reconciler), options_(options) {}

Controller::~Controller() { stop(); }

void Controller::start() {
  stopping_ = false;
  watcher_ = std::thread([this] { watch_loop(); });
  for (unsigned i = 0; i < std::max(1U, options_.workers); ++i)
    workers_.emplace_back([this] { work_loop(); });
}

void Controller::stop() {
  stopping_ = true;
  queue_.shutdown();
  if (watcher_.joinable()) watcher_.join();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  workers_.clear();
}

bool Controller::resync() {
  auto jobs = store_.list_jobs();
  if (!jobs) {
    log::warn("listing jobs failed", {{"error", jobs.error().message}});
    return true;
  }
  bool active = false;
  for (const auto& job : *jobs) {
    const auto& meta = job.value("metadata", nlohmann::json::object());
    queue_.add_if_absent({meta.value("namespace", ""), meta.value("name", "")});
    const std::string phase = job.value("status", nlohmann::json::object()).value("phase", "");
    active = active || !is_terminal_phase(phase) || meta.contains("deletionTimestamp");
  }
  return active;
}

void Controller::watch_loop() {
  auto next_resync = Steady::now();
  while (!stopping_) {
    if (Steady::now() >= next_resync) {
      const bool active = resync();
      next_resync = Steady::now() + (active ? options_.active_resync : options_.idle_resync);
    }
    for (const auto& key : store_.wait_for_changes(options_.watch_timeout)) queue_.add(key);
  }
}

void Controller::work_loop() {
  while (auto key = queue_.pop()) {
    std::optional<std::chrono::milliseconds> again;
    const auto started = Steady::now();
    const char* error = nullptr;
    try {
      Reconciler::Error failed = Reconciler::Error::None;
      again = reconciler_.reconcile(*key, &failed);
      if (failed == Reconciler::Error::StoreRead) error = "store_read";
      if (failed == Reconciler::Error::StoreWrite) error = "store_write";
    } catch (const std::exception& e) {
      // A malformed object must not take the controller down; it is looked at again later.
      log::error("reconcile failed", {{"job", key->ns + "/" + key->name}, {"error", e.what()}});
      again = std::chrono::seconds(5);
      error = "exception";
    }
    if (options_.on_reconciled) {
      options_.on_reconciled(std::chrono::duration<double>(Steady::now() - started).count(), error);
    }
    if (again && !stopping_) queue_.add(*key, Steady::now() + *again);
    queue_.done(*key);
  }
}

}  // namespace conduit::controller
