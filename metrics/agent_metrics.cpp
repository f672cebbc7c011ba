#include "metrics/agent_metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace conduit::metrics {

namespace {

// `count` bounds from `start` to `end`, each a constant factor apart, rounded to two significant digits so
// the `le` labels stay readable (0.01, 0.025, 0.063, ...).
prometheus::Histogram::BucketBoundaries exponential_buckets(double start, double end, int count) {
  prometheus::Histogram::BucketBoundaries bounds;
  const double factor = std::pow(end / start, 1.0 / (count - 1));
  for (int i = 0; i < count; ++i) {
    // Through text, so each bound is the double nearest its short decimal form and prints as that.
    char text[32];
    std::snprintf(text, sizeof text, "%.2g", start * std::pow(factor, i));
    bounds.push_back(i == count - 1 ? end : std::strtod(text, nullptr));
  }
  return bounds;
}

prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& registry, const std::string& name,
                                                 const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Gauge>& gauge(prometheus::Registry& registry, const std::string& name,
                                             const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Histogram& histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help, prometheus::Histogram::BucketBoundaries buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, std::move(buckets));
}

}  // namespace

AgentMetrics::AgentMetrics(const std::string& version, const std::string& node)
    : registry_(std::make_shared<prometheus::Registry>()),
      bytes_(counter(*registry_, "conduit_agent_transfer_bytes_total",
                     "Bytes moved by transfers this agent ran, by transport and direction.")),
      forwarded_(
          counter(*registry_, "conduit_agent_forwarded_bytes_total",
                  "Bytes this agent forwarded as a Chain hop: what landed in its region, written on to "
                  "the next hop.")
              .Add({})),
      transfers_(counter(*registry_, "conduit_agent_transfers_total", "Transfers finished, by result.")),
      duration_(histogram(*registry_, "conduit_agent_transfer_duration_seconds",
                          "Time from a transfer's start to its end.", exponential_buckets(0.01, 600, 13))),
      segment_(histogram(*registry_, "conduit_agent_segment_duration_seconds",
                         "Time to move one segment (a batch of slices kept in flight, the unit of retry) to "
                         "its target, from submit to the last completion.",
                         exponential_buckets(0.001, 60, 13))),
      slice_retries_(
          counter(*registry_, "conduit_agent_slice_retries_total",
                  "Segments (the unit of retry) sent again after a transport error; each retry re-sends "
                  "the segment's slices.")
              .Add({})),
      staged_fallback_(counter(*registry_, "conduit_agent_staged_fallback_total",
                               "Transfers staged through a bounce buffer because the provider cannot reach "
                               "the memory directly.")
                           .Add({})),
      active_(
          gauge(*registry_, "conduit_agent_active_transfers", "Transfers queued or running now.").Add({})),
      region_bytes_(
          gauge(*registry_, "conduit_agent_region_bytes", "Bytes held in regions, by memory kind.")),
      region_pool_(
          gauge(*registry_, "conduit_agent_region_pool_bytes",
                "Bytes of deleted regions' host memory kept, zeroed or being zeroed, for new regions "
                "of the same size (--region-pool).")
              .Add({})),
      registration_(histogram(*registry_, "conduit_agent_registration_duration_seconds",
                              "Time to register memory with a transport.",
                              exponential_buckets(1e-5, 10, 13))),
      file_read_(
          counter(*registry_, "conduit_agent_file_read_bytes_total",
                  "Bytes of source files read by transfers, by path: out of the page cache or around it "
                  "(O_DIRECT, where the page cache did not hold them).")),
      file_write_(counter(*registry_, "conduit_agent_file_write_bytes_total",
                          "Bytes of saved files written, by path: around the page cache (O_DIRECT, whole "
                          "blocks from aligned memory) or through it.")),
      errors_(counter(*registry_, "conduit_agent_errors_total", "Errors by reason code.")),
      paths_(counter(*registry_, "conduit_agent_transfer_paths_total",
                     "Transfers whose path was judged from the NICs' own counters, by verdict: Matched, or "
                     "the mismatch named (docs/path.md).")),
      nic_planned_(counter(*registry_, "conduit_agent_nic_planned_bytes_total",
                           "Bytes judged transfers put on the rails of each NIC.")),
      nic_counted_(counter(*registry_, "conduit_agent_nic_counted_bytes_total",
                           "Each NIC's own counter delta (tx for writes, rx for reads) over the judged "
                           "transfers' lifetimes; windows of concurrent transfers overlap, so it can exceed "
                           "the NIC's traffic.")),
      nic_mismatches_(
          counter(*registry_, "conduit_agent_nic_path_mismatches_total",
                  "NICs of judged transfers whose verdict was not Carried, by NIC and verdict.")) {
  // Known label values start at 0, so rate() and absent() work before the first event.
  for (const char* result : {"succeeded", "failed", "cancelled"}) transfers_.Add({{"result", result}});
  for (const char* memory : {"host", "cuda", "file"}) region_bytes_.Add({{"memory", memory}});
  for (const char* verdict :
       {"Matched", "NotCarried", "Misrouted", "EmulatedSendRecv", "Unreadable", "NotApplicable"})
    paths_.Add({{"verdict", verdict}});
  for (const char* path : {"page_cache", "direct"}) {
    file_read_.Add({{"path", path}});
    file_write_.Add({{"path", path}});
  }
  gauge(*registry_, "conduit_agent_build_info", "Always 1; labels say which agent build runs on which node.")
      .Add({{"version", version}, {"node", node}})
      .Set(1);
}

void AgentMetrics::add_transport(const std::string& transport) {
  for (const char* direction : {"write", "read"})
    bytes_.Add({{"transport", transport}, {"direction", direction}});
}

void AgentMetrics::add_bytes(const std::string& transport, const std::string& direction, double bytes) {
  bytes_.Add({{"transport", transport}, {"direction", direction}}).Increment(bytes);
}

void AgentMetrics::add_forwarded(double bytes) { forwarded_.Increment(bytes); }

void AgentMetrics::transfer_finished(const std::string& result, double seconds) {
  transfers_.Add({{"result", result}}).Increment();
  duration_.Observe(seconds);
}

void AgentMetrics::observe_segment(double seconds) { segment_.Observe(seconds); }

void AgentMetrics::slice_retried(double n) { slice_retries_.Increment(n); }

void AgentMetrics::staged_fallback(double n) { staged_fallback_.Increment(n); }

void AgentMetrics::set_active_transfers(double n) { active_.Set(n); }

void AgentMetrics::set_region_bytes(const std::string& memory, double bytes) {
  region_bytes_.Add({{"memory", memory}}).Set(bytes);
}

void AgentMetrics::set_region_pool_bytes(double bytes) { region_pool_.Set(bytes); }

void AgentMetrics::observe_registration(double seconds) { registration_.Observe(seconds); }

void AgentMetrics::add_file_read(const std::string& path, double bytes) {
  file_read_.Add({{"path", path}}).Increment(bytes);
}

void AgentMetrics::add_file_write(const std::string& path, double bytes) {
  file_write_.Add({{"path", path}}).Increment(bytes);
}

void AgentMetrics::error(const std::string& reason) { errors_.Add({{"reason", reason}}).Increment(); }

void AgentMetrics::path_judged(const std::string& verdict) { paths_.Add({{"verdict", verdict}}).Increment(); }

void AgentMetrics::nic_path(const std::string& nic, double planned_bytes, double counted_bytes) {
  nic_planned_.Add({{"nic", nic}}).Increment(planned_bytes);
  nic_counted_.Add({{"nic", nic}}).Increment(counted_bytes);
}

void AgentMetrics::nic_mismatch(const std::string& nic, const std::string& verdict) {
  nic_mismatches_.Add({{"nic", nic}, {"verdict", verdict}}).Increment();
}

std::string AgentMetrics::serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace conduit::metrics
