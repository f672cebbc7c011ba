// The proof of path of the transfers this agent runs (docs/path.md): the counters of the NICs its rails
// use, and of every other NIC that could carry them, read at a transfer's start and end; the bytes it put
// on each NIC's rails; the verdict (path/judge.h) under the attribution rule (path/ledger.h); metrics per
// NIC. A handful of sysfs reads at each end of a transfer, nothing per segment.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "conduit/api/transfer_path.h"
#include "conduit/common/op_kind.h"
#include "conduit/nic_counters.h"
#include "path/judge.h"
#include "path/ledger.h"

namespace conduit::metrics {
class AgentMetrics;
}

namespace conduit::agent::path {

class Prover {
 public:
  // Where a planned NIC's missing bytes are looked for, besides the rails' own NICs.
  using Candidates = std::function<std::vector<NicRef>()>;
  Prover(std::unique_ptr<CounterSource> counters, Candidates candidates, metrics::AgentMetrics* metrics);
  // The node's: counters under `sysfs_root`; candidates the interfaces that hold an address that is not
  // IPv6 link-local (pods' host-side veths hold none, so a busy node stays a handful of reads) and every
  // infiniband device.
  static std::unique_ptr<Prover> for_node(const std::string& sysfs_root, metrics::AgentMetrics* metrics);

  struct Window {
    std::uint64_t ticket = 0;
    Sample start;
    std::string why_no_nic;  // the rails name no NIC: nothing was sampled
  };
  // At a transfer's start. `rail_nics`: the NICs of every rail of its transports (what it may plan);
  // empty with `why_no_nic` where they name none.
  Window begin(const std::vector<NicRef>& rail_nics, std::string why_no_nic);
  // At its end: the bytes it put on each NIC's rails, judged; metrics counted.
  api::TransferPath end(Window window, OpKind op, const std::vector<Planned>& planned);

  // What every transfer judged so far adds up to: {"transfers": {verdict: n}, "nics": [{nic, plannedBytes,
  // countedBytes, mismatches}]}, GET /v1/node's "paths", which the controller copies into the FabricNode.
  nlohmann::json totals() const;

 private:
  struct NicTotals {
    std::uint64_t planned = 0;
    std::uint64_t counted = 0;
    std::uint64_t mismatches = 0;
  };
  void count(const api::TransferPath& judged, OpKind op);

  Sample sample(const std::vector<NicRef>& nics) const;

  std::unique_ptr<CounterSource> counters_;
  Candidates candidates_;
  metrics::AgentMetrics* metrics_;
  Ledger ledger_;
  mutable std::mutex totals_mu_;
  std::map<std::string, std::uint64_t> verdicts_;
  std::map<std::string, NicTotals> nic_totals_;
};

}  // namespace conduit::agent::path
