#include "region_acks.h"

#include <algorithm>

namespace conduit::agent {

Status RegionAcks::record(const std::string& reader, std::uint64_t version) {
  {
    std::lock_guard lock(mu_);
    auto it = by_reader_.find(reader);
    if (it == by_reader_.end()) {
      if (by_reader_.size() >= kMaxReaders) {
        return make_error(
            ErrorCode::ResourceExhausted,
            "already " + std::to_string(kMaxReaders) +
                " readers acked this region: the most it keeps; a reader already among them may "
                "ack again");
      }
      it = by_reader_.emplace(reader, Entry{.reader = reader}).first;
    }
    it->second.version = version;
    it->second.at = std::chrono::system_clock::now();
  }
  acked_.notify_all();
  return {};
}

std::vector<RegionAcks::Entry> RegionAcks::list() const {
  std::lock_guard lock(mu_);
  return list_locked();
}

bool RegionAcks::done(std::uint64_t version, std::uint64_t readers) const {
  std::lock_guard lock(mu_);
  return done_locked(version, readers);
}

std::vector<RegionAcks::Entry> RegionAcks::wait_done(std::uint64_t version, std::uint64_t readers,
                                                     std::chrono::milliseconds wait,
                                                     const std::function<bool()>& stop) const {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mu_);
  while (!done_locked(version, readers) && !stop()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    // Woken by record() at once; the 200 ms bound is only for noticing `stop` (the agent shutting down).
    acked_.wait_for(
        lock, std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(200)));
  }
  return list_locked();
}

bool RegionAcks::done_locked(std::uint64_t version, std::uint64_t readers) const {
  const auto applied = std::count_if(by_reader_.begin(), by_reader_.end(),
                                     [&](const auto& kv) { return kv.second.version >= version; });
  return static_cast<std::uint64_t>(applied) >= readers;
}

std::vector<RegionAcks::Entry> RegionAcks::list_locked() const {
  std::vector<Entry> out;
  out.reserve(by_reader_.size());
  for (const auto& [reader, entry] : by_reader_) out.push_back(entry);
  return out;
}

}  // namespace conduit::agent
