#include "control_loop.h"

#include <algorithm>

#include "conduit/common/log.h"
#include "job_status.h"

namespace conduit::controller {

using Steady = std::chrono::steady_clock;

ControlLoop::ControlLoop(ObjectStore& store, Reconciler& reconciler, ControlLoopOptions options)
    : store_(store), reconciler_(reconciler), options_(options) {}

ControlLoop::~ControlLoop() { stop(); }

void ControlLoop::start() {
  stopping_ = false;
  // A watched transfer's end queues its job at once, as a store change would.
  reconciler_.transfer_watcher().start([this](const ObjectKey& key) { queue_.add(key); });
  watcher_ = std::thread([this] { watch_loop(); });
  for (unsigned i = 0; i < std::max(1U, options_.workers); ++i)
    workers_.emplace_back([this] { work_loop(); });
}

void ControlLoop::stop() {
  stopping_ = true;
  queue_.shutdown();
  store_.wake();  // the watch thread's wait for changes ends now, not at its timeout
  if (watcher_.joinable()) watcher_.join();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  workers_.clear();
  // After the workers: none starts a watch after this. Returns once the long-polls under way came back.
  reconciler_.transfer_watcher().stop();
}

bool ControlLoop::resync() {
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

void ControlLoop::watch_loop() {
  auto next_resync = Steady::now();
  while (!stopping_) {
    if (Steady::now() >= next_resync) {
      const bool active = resync();
      next_resync = Steady::now() + (active ? options_.active_resync : options_.idle_resync);
    }
    for (const auto& key : store_.wait_for_changes(options_.watch_timeout)) queue_.add(key);
  }
}

void ControlLoop::work_loop() {
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
