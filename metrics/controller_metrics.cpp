#include "metrics/controller_metrics.h"

#include <prometheus/text_serializer.h>

namespace conduit::metrics {

namespace {

constexpr const char* kPhases[] = {"Pending", "Running", "Succeeded", "Failed", "Suspended"};

}  // namespace

ControllerMetrics::ControllerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      is_leader_(prometheus::BuildGauge()
                     .Name("conduit_controller_is_leader")
                     .Help("Whether this replica reconciles: it leads, or runs without leader election")
                     .Register(*registry_)
                     .Add({})),
      jobs_(prometheus::BuildGauge()
                .Name("conduit_controller_transferjobs")
                .Help("TransferJobs seen by this replica, by status.phase")
                .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("conduit_controller_queue_depth")
                       .Help("TransferJobs waiting in the work queue (0 while not reconciling)")
                       .Register(*registry_)
                       .Add({})),
      nodes_(prometheus::BuildGauge()
                 .Name("conduit_controller_fabricnodes")
                 .Help("FabricNodes by whether their agent answered at the last look")
                 .Register(*registry_)),
      duration_(prometheus::BuildHistogram()
                    .Name("conduit_controller_reconcile_duration_seconds")
                    .Help("Time one reconcile of one TransferJob took")
                    .Register(*registry_)
                    .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5,
                                                                     30})),
      errors_(prometheus::BuildCounter()
                  .Name("conduit_controller_reconcile_errors_total")
                  .Help("Reconciles that failed, by reason")
                  .Register(*registry_)) {
  for (const char* reason : {"exception", "store_read", "store_write"}) errors_.Add({{"reason", reason}});
  for (const char* phase : kPhases) jobs_.Add({{"phase", phase}});
  set_fabric_nodes(0, 0);
}

void ControllerMetrics::set_leader(bool leading) { is_leader_.Set(leading ? 1 : 0); }

void ControllerMetrics::set_queue_depth(double n) { queue_depth_.Set(n); }

void ControllerMetrics::set_jobs(const std::map<std::string, int>& by_phase) {
  for (const char* phase : kPhases) {
    if (by_phase.count(phase) == 0) jobs_.Add({{"phase", phase}}).Set(0);
  }
  for (const auto& [phase, n] : by_phase) jobs_.Add({{"phase", phase}}).Set(n);
}

void ControllerMetrics::set_fabric_nodes(int reachable, int unreachable) {
  nodes_.Add({{"reachable", "true"}}).Set(reachable);
  nodes_.Add({{"reachable", "false"}}).Set(unreachable);
}

void ControllerMetrics::reconciled(double seconds, const char* error) {
  duration_.Observe(seconds);
  if (error != nullptr) errors_.Add({{"reason", error}}).Increment();
}

std::string ControllerMetrics::serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace conduit::metrics
