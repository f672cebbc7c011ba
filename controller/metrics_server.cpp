#include "metrics_server.h"

#include <map>
#include <nlohmann/json.hpp>

namespace conduit::controller {

using json = nlohmann::json;

MetricsServer::MetricsServer(const std::atomic<bool>& ready, std::function<bool()> leading,
                             std::function<std::size_t()> queue_depth, ObjectStore& store)
    : ready_(ready), leading_(std::move(leading)), queue_depth_(std::move(queue_depth)), store_(store) {
  server_.Get("/healthz",
              [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  server_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_ ? 200 : 503;
    res.set_content(ready_ ? "ok\n" : "caches not synced\n", "text/plain");
  });
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(scrape(), "text/plain; version=0.0.4");
  });
}

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::listen(const std::string& address, std::string& error) {
  const auto colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    try {
      port = std::stoi(address.substr(colon + 1));
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port <= 0 || port > 65535) {
    error = "--metrics-listen: want HOST:PORT, got \"" + address + "\"";
    return false;
  }
  if (!server_.bind_to_port(address.substr(0, colon), port)) {
    error = "--metrics-listen: cannot listen on " + address;
    return false;
  }
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  return true;
}

void MetricsServer::stop() {
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

void MetricsServer::reconciled(double seconds, const char* error) { metrics_.reconciled(seconds, error); }

void MetricsServer::set_nodes(int reachable, int unreachable) {
  metrics_.set_fabric_nodes(reachable, unreachable);
}

std::string MetricsServer::scrape() {
  std::lock_guard lock(mu_);
  metrics_.set_leader(leading_());
  metrics_.set_queue_depth(static_cast<double>(queue_depth_()));
  std::map<std::string, int> counts;
  if (auto jobs = store_.list_jobs()) {
    for (const auto& job : *jobs) {
      const std::string phase = job.value("status", json::object()).value("phase", "Pending");
      ++counts[phase.empty() ? "Pending" : phase];
    }
  }
  metrics_.set_jobs(counts);
  return metrics_.serialize();
}

}  // namespace conduit::controller
