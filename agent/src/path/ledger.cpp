#include "path/ledger.h"

#include <algorithm>

namespace conduit::agent::path {

std::uint64_t Ledger::open(Clock::time_point start) {
  std::lock_guard lock(mu_);
  const std::uint64_t ticket = next_++;
  open_.emplace(ticket, start);
  return ticket;
}

NicBytes Ledger::close(std::uint64_t ticket, Clock::time_point end, const NicBytes& own) {
  std::lock_guard lock(mu_);
  const auto it = open_.find(ticket);
  if (it == open_.end()) return {};
  const Clock::time_point start = it->second;
  open_.erase(it);
  NicBytes nested;
  for (const Record& r : records_) {
    if (r.start < start || r.end > end) continue;
    for (const auto& [nic, bytes] : r.bytes) nested[nic] += bytes;
  }
  if (!own.empty()) records_.push_back({start, end, own});
  prune();
  return nested;
}

void Ledger::abandon(std::uint64_t ticket) {
  std::lock_guard lock(mu_);
  open_.erase(ticket);
  prune();
}

std::size_t Ledger::records() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

void Ledger::prune() {
  // A record is only ever counted by a window that opened no later than it: once every open window opened
  // after it (and later ones open later still), it can never be counted again.
  if (open_.empty()) {
    records_.clear();
    return;
  }
  Clock::time_point oldest = Clock::time_point::max();
  for (const auto& [_, start] : open_) oldest = std::min(oldest, start);
  std::erase_if(records_, [&](const Record& r) { return r.start < oldest; });
}

}  // namespace conduit::agent::path
