#include "path/prover.h"

#include <algorithm>

#include "conduit/net_interface.h"
#include "metrics/agent_metrics.h"

namespace conduit::agent::path {

Prover::Prover(std::unique_ptr<CounterSource> counters, Candidates candidates, metrics::AgentMetrics* metrics)
    : counters_(std::move(counters)), candidates_(std::move(candidates)), metrics_(metrics) {}

std::unique_ptr<Prover> Prover::for_node(const std::string& sysfs_root, metrics::AgentMetrics* metrics) {
  auto counters = std::make_unique<SysfsCounters>(sysfs_root);
  const SysfsCounters* source = counters.get();
  Candidates candidates = [source] {
    std::vector<NicRef> out = source->infiniband();
    for (std::string& name : interfaces_with_an_address()) out.push_back({std::move(name), NicClass::Net});
    return out;
  };
  return std::make_unique<Prover>(std::move(counters), std::move(candidates), metrics);
}

Sample Prover::sample(const std::vector<NicRef>& nics) const {
  Sample out;
  out.reserve(nics.size());
  for (const NicRef& nic : nics) out.emplace_back(nic, counters_->read(nic));
  return out;
}

Prover::Window Prover::begin(const std::vector<NicRef>& rail_nics, std::string why_no_nic) {
  Window w;
  if (rail_nics.empty()) {
    w.why_no_nic = why_no_nic.empty() ? "the transport's rails name no NIC" : std::move(why_no_nic);
    return w;
  }
  std::vector<NicRef> nics = rail_nics;
  for (NicRef& nic : candidates_()) nics.push_back(std::move(nic));
  std::sort(nics.begin(), nics.end());
  nics.erase(std::unique(nics.begin(), nics.end()), nics.end());
  // The ledger's window opens before the first read, so a transfer nested in it is nested in the reads.
  w.ticket = ledger_.open(Ledger::Clock::now());
  w.start = sample(nics);
  return w;
}

api::TransferPath Prover::end(Window window, OpKind op, const std::vector<Planned>& planned) {
  namespace pv = api::path_verdict;
  if (window.ticket == 0) {
    api::TransferPath out{.verdict = std::string(pv::kNotApplicable),
                          .message = window.why_no_nic,
                          .counted = op == OpKind::Write ? "tx" : "rx"};
    count(out, op);
    return out;
  }
  std::vector<NicRef> nics;
  for (const auto& [nic, _] : window.start) nics.push_back(nic);
  const Sample finish = sample(nics);
  // Closed after the last read, for the same reason begin() opens before the first.
  NicBytes own;
  for (const Planned& p : planned) {
    if (p.bytes > 0) own[p.nic.name] += p.bytes;
  }
  const NicBytes nested = ledger_.close(window.ticket, Ledger::Clock::now(), own);
  api::TransferPath out = judge(op, planned, nested, window.start, finish);
  count(out, op);
  return out;
}

void Prover::count(const api::TransferPath& judged, OpKind op) {
  std::lock_guard lock(totals_mu_);
  ++verdicts_[judged.verdict];
  if (metrics_ != nullptr) metrics_->path_judged(judged.verdict);
  for (const api::NicPath& n : judged.nics) {
    NicTotals& t = nic_totals_[n.nic];
    const bool mismatch = n.verdict != api::nic_verdict::kCarried;
    if (mismatch) ++t.mismatches;
    if (n.planned) {
      const std::uint64_t counted =
          !n.counter_delta ? 0
                           : (op == OpKind::Write ? n.counter_delta->tx_bytes : n.counter_delta->rx_bytes);
      t.planned += n.planned_bytes;
      t.counted += counted;
      if (metrics_ != nullptr)
        metrics_->nic_path(n.nic, static_cast<double>(n.planned_bytes), static_cast<double>(counted));
    }
    if (mismatch && metrics_ != nullptr) metrics_->nic_mismatch(n.nic, n.verdict);
  }
}

nlohmann::json Prover::totals() const {
  std::lock_guard lock(totals_mu_);
  nlohmann::json nics = nlohmann::json::array();
  for (const auto& [nic, t] : nic_totals_) {
    nics.push_back({{"nic", nic},
                    {"plannedBytes", t.planned},
                    {"countedBytes", t.counted},
                    {"mismatches", t.mismatches}});
  }
  return {{"transfers", verdicts_}, {"nics", std::move(nics)}};
}

}  // namespace conduit::agent::path
