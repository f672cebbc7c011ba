#include "path/judge.h"

#include <algorithm>
#include <optional>

namespace conduit::agent::path {

namespace {

namespace nv = api::nic_verdict;
namespace pv = api::path_verdict;

const Result<NicCounters>* find(const Sample& sample, const NicRef& nic) {
  for (const auto& [ref, counters] : sample) {
    if (ref == nic) return &counters;
  }
  return nullptr;
}

std::string bytes_text(std::uint64_t n) { return std::to_string(n) + " bytes"; }

// The delta between two readings of one NIC, or why there is none.
Result<api::NicPath::Delta> delta_of(const NicRef& nic, const Sample& start, const Sample& end) {
  const Result<NicCounters>* a = find(start, nic);
  const Result<NicCounters>* b = find(end, nic);
  if (a == nullptr || b == nullptr) return make_error(ErrorCode::NotFound, "not sampled");
  if (!*a) return a->error();
  if (!*b) return b->error();
  const NicCounters& s = **a;
  const NicCounters& e = **b;
  auto minus = [&](std::uint64_t later, std::uint64_t earlier, const char* what) -> Result<std::uint64_t> {
    if (later < earlier) {
      return make_error(ErrorCode::Unavailable, std::string(what) + " went back from " +
                                                    std::to_string(earlier) + " to " + std::to_string(later) +
                                                    " (a counter reset or a device replaced)");
    }
    return later - earlier;
  };
  api::NicPath::Delta d;
  auto tx = minus(e.tx_bytes, s.tx_bytes, "tx");
  if (!tx) return tx.error();
  auto rx = minus(e.rx_bytes, s.rx_bytes, "rx");
  if (!rx) return rx.error();
  d.tx_bytes = *tx;
  d.rx_bytes = *rx;
  if (s.efa && e.efa) {
    d.rdma_write_bytes = e.efa->rdma_write_bytes - std::min(e.efa->rdma_write_bytes, s.efa->rdma_write_bytes);
    d.rdma_read_bytes = e.efa->rdma_read_bytes - std::min(e.efa->rdma_read_bytes, s.efa->rdma_read_bytes);
    d.send_bytes = e.efa->send_bytes - std::min(e.efa->send_bytes, s.efa->send_bytes);
    d.recv_bytes = e.efa->recv_bytes - std::min(e.efa->recv_bytes, s.efa->recv_bytes);
  }
  return d;
}

std::string kind_of(const NicRef& nic, const Sample& end) {
  if (const auto* c = find(end, nic); c != nullptr && *c) return std::string(to_string((*c)->kind));
  return nic.cls == NicClass::Net ? "net" : "infiniband";
}

}  // namespace

api::TransferPath judge(OpKind op, const std::vector<Planned>& planned, const NicBytes& nested,
                        const Sample& start, const Sample& end) {
  api::TransferPath out;
  const bool write = op == OpKind::Write;
  out.counted = write ? "tx" : "rx";
  auto counted = [write](const api::NicPath::Delta& d) { return write ? d.tx_bytes : d.rx_bytes; };

  std::uint64_t own_total = 0;
  for (const Planned& p : planned) own_total += p.bytes;
  if (planned.empty()) {
    out.verdict = pv::kNotApplicable;
    out.message = "the transport's rails name no NIC (shm moves bytes through this node's memory)";
    return out;
  }
  if (own_total == 0) {
    out.verdict = pv::kNotApplicable;
    out.message = "no byte went on the wire";
    return out;
  }

  std::uint64_t shortfall = 0;
  std::vector<std::string> short_text, unreadable_text, emulated_text, unplanned_text;
  for (const Planned& p : planned) {
    if (p.bytes == 0) continue;  // a rail it did not use: looked at with the unplanned NICs below
    api::NicPath n;
    n.nic = p.nic.name;
    n.kind = kind_of(p.nic, end);
    n.planned = true;
    n.planned_bytes = p.bytes;
    const auto it = nested.find(p.nic.name);
    n.window_bytes = p.bytes + (it != nested.end() ? it->second : 0);
    auto d = delta_of(p.nic, start, end);
    if (!d) {
      n.verdict = nv::kUnreadable;
      n.message = d.error().message;
      unreadable_text.push_back(n.nic + ": " + n.message);
    } else {
      n.counter_delta = *d;
      const std::uint64_t need = required(n.window_bytes);
      const std::uint64_t moved = counted(*d);
      if (moved < need) {
        n.verdict = nv::kNotCarried;
        n.message = bytes_text(n.window_bytes) + " planned in this window, its " + out.counted +
                    " counter moved " + bytes_text(moved);
        shortfall += need - moved;
        short_text.push_back(n.nic + " (" + n.message + ")");
      } else if (d->rdma_write_bytes) {
        // EFA tells one-sided RDMA from messages: the plan was one-sided.
        const std::uint64_t one_sided = write ? *d->rdma_write_bytes : *d->rdma_read_bytes;
        const std::uint64_t two_sided = write ? *d->send_bytes : *d->recv_bytes;
        if (one_sided < need && two_sided >= need) {
          n.verdict = nv::kEmulatedSendRecv;
          n.message = std::string(write ? "rdma_write_bytes" : "rdma_read_bytes") + " moved " +
                      bytes_text(one_sided) + " and " + (write ? "send_bytes " : "recv_bytes ") +
                      bytes_text(two_sided) + ": the one-sided " + (write ? "writes" : "reads") +
                      " went as send/recv";
          emulated_text.push_back(n.nic + ": " + n.message);
        } else {
          n.verdict = nv::kCarried;
        }
      } else {
        n.verdict = nv::kCarried;
      }
    }
    out.nics.push_back(std::move(n));
  }

  // Only a shortfall makes another NIC's traffic news: with every planned NIC carried, what the others
  // moved is other traffic, never blamed on this transfer. One that moved at least the missing bytes is
  // where they went.
  if (shortfall > 0) {
    auto consider = [&](const NicRef& nic) {
      const bool listed = std::any_of(out.nics.begin(), out.nics.end(),
                                      [&](const api::NicPath& n) { return n.nic == nic.name; });
      if (listed) return;
      auto d = delta_of(nic, start, end);
      if (!d || counted(*d) < required(shortfall)) return;
      api::NicPath n;
      n.nic = nic.name;
      n.kind = kind_of(nic, end);
      n.planned = false;
      n.counter_delta = *d;
      n.verdict = nv::kUnplanned;
      n.message = "not in the plan, its " + out.counted + " counter moved " + bytes_text(counted(*d)) +
                  ", at least the " + bytes_text(shortfall) + " missing from the planned NICs";
      unplanned_text.push_back(n.nic + " (moved " + bytes_text(counted(*d)) + ")");
      out.nics.push_back(std::move(n));
    };
    for (const auto& [nic, _] : end) consider(nic);
  }

  auto joined = [](const std::vector<std::string>& parts) {
    std::string s;
    for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
    return s;
  };
  if (!short_text.empty()) {
    out.verdict = unplanned_text.empty() ? pv::kNotCarried : pv::kMisrouted;
    out.message = "planned NIC not carrying its bytes: " + joined(short_text);
    if (!unplanned_text.empty()) out.message += "; moved instead: " + joined(unplanned_text);
  } else if (!emulated_text.empty()) {
    out.verdict = pv::kEmulatedSendRecv;
    out.message = joined(emulated_text);
  } else if (!unreadable_text.empty()) {
    out.verdict = pv::kUnreadable;
    out.message = "counters not readable: " + joined(unreadable_text);
  } else {
    out.verdict = pv::kMatched;
  }
  if (!unreadable_text.empty() && out.verdict != pv::kUnreadable) {
    out.message += "; counters not readable: " + joined(unreadable_text);
  }
  return out;
}

}  // namespace conduit::agent::path
