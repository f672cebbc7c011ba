// The agent's Prometheus metrics (prefix conduit_agent_, base units, bounded labels), served as text on
// the agent's own /metrics route.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

namespace conduit::metrics {

class AgentMetrics {
 public:
  AgentMetrics(const std::string& version, const std::string& node);

  // A transport the agent opened: its byte counters start at 0 in both directions, so dashboards list it
  // and rate() works before its first transfer.
  void add_transport(const std::string& transport);
  // transport: provider name ("tcp;ofi_rxm"); direction: "write" | "read"
  void add_bytes(const std::string& transport, const std::string& direction, double bytes);
  // Bytes this agent wrote on as a Chain hop, from its own region to the next hop (source.followGrant).
  void add_forwarded(double bytes);
  // result: "succeeded" | "failed" | "cancelled"
  void transfer_finished(const std::string& result, double seconds);
  // One segment (a batch of slices kept in flight, the unit of retry) reached its target in `seconds`.
  void observe_segment(double seconds);
  void slice_retried(double n = 1);
  void staged_fallback(double n = 1);
  void set_active_transfers(double n);
  void set_region_bytes(const std::string& memory, double bytes);  // memory: "host" | "cuda" | "file"
  void set_region_pool_bytes(double bytes);  // memory of deleted regions kept for new ones
  void observe_registration(double seconds);
  // A source file's bytes as read: path "page_cache" (copied out of it) | "direct" (O_DIRECT, around it).
  void add_file_read(const std::string& path, double bytes);
  // A saved file's bytes as written: path "direct" (O_DIRECT, around the page cache) | "page_cache".
  void add_file_write(const std::string& path, double bytes);
  void error(const std::string& reason);
  // The proof of path (docs/path.md). A transfer judged, by its overall verdict ("Matched", "Misrouted",
  // ...).
  void path_judged(const std::string& verdict);
  // Per NIC of a judged transfer: the bytes it planned there, and the NIC's counter delta over its window
  // in the direction counted (tx for a write, rx for a read).
  void nic_path(const std::string& nic, double planned_bytes, double counted_bytes);
  // A NIC's verdict other than Carried: "NotCarried", "Unplanned", "EmulatedSendRecv", "Unreadable".
  void nic_mismatch(const std::string& nic, const std::string& verdict);

  // Prometheus text exposition format 0.0.4 of everything above.
  std::string serialize() const;
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Counter& forwarded_;
  prometheus::Family<prometheus::Counter>& transfers_;
  prometheus::Histogram& duration_;
  prometheus::Histogram& segment_;
  prometheus::Counter& slice_retries_;
  prometheus::Counter& staged_fallback_;
  prometheus::Gauge& active_;
  prometheus::Family<prometheus::Gauge>& region_bytes_;
  prometheus::Gauge& region_pool_;
  prometheus::Histogram& registration_;
  prometheus::Family<prometheus::Counter>& file_read_;
  prometheus::Family<prometheus::Counter>& file_write_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& paths_;
  prometheus::Family<prometheus::Counter>& nic_planned_;
  prometheus::Family<prometheus::Counter>& nic_counted_;
  prometheus::Family<prometheus::Counter>& nic_mismatches_;
};

}  // namespace conduit::metrics
