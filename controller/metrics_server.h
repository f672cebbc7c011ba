// conduit-controller's /healthz (the process answers), /readyz (the caches synced) and /metrics, on a
// thread of its own. Used by both modes: what it reports comes from the callbacks and the store it is given.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "metrics/controller_metrics.h"
#include "store/object_store.h"

namespace conduit::controller {

class MetricsServer {
 public:
  // `leading`: whether this replica reconciles now; `queue_depth`: jobs waiting in its work queue. Both are
  // asked at scrape time, as are the jobs by phase (from `store`), so nothing is kept to drift from the
  // truth.
  MetricsServer(const std::atomic<bool>& ready, std::function<bool()> leading,
                std::function<std::size_t()> queue_depth, ObjectStore& store);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds HOST:PORT and serves until stop(); false with `error` set when the address is bad or taken.
  bool listen(const std::string& address, std::string& error);
  void stop();

  // From the controller's worker thread (prometheus-cpp metrics are thread-safe).
  void reconciled(double seconds, const char* error);
  void set_nodes(int reachable, int unreachable);

 private:
  std::string scrape();

  const std::atomic<bool>& ready_;
  std::function<bool()> leading_;
  std::function<std::size_t()> queue_depth_;
  ObjectStore& store_;
  std::mutex mu_;
  metrics::ControllerMetrics metrics_;
  httplib::Server server_;
  std::thread thread_;
};

}  // namespace conduit::controller
