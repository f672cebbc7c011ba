// The controller's Prometheus metrics (prefix conduit_controller_, base units, bounded labels), served as
// text by the controller's metrics endpoint. Every series a dashboard or alert reads exists from the start,
// at 0 where nothing happened yet.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

namespace conduit::metrics {

class ControllerMetrics {
 public:
  ControllerMetrics();

  void set_leader(bool leading);
  void set_queue_depth(double n);
  // TransferJobs by status.phase. The known phases are always written, at 0 when none is in them; any
  // other phase keeps its last count until it is given again.
  void set_jobs(const std::map<std::string, int>& by_phase);
  void set_fabric_nodes(int reachable, int unreachable);
  // One reconcile took `seconds`; `error` is its failure reason ("exception"), or nullptr.
  void reconciled(double seconds, const char* error);

  // Prometheus text exposition format 0.0.4 of everything above.
  std::string serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge& is_leader_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Histogram& duration_;
  prometheus::Family<prometheus::Counter>& errors_;
};

}  // namespace conduit::metrics
