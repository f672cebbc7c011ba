// Acknowledgements of a region's versions: each reader (a free string: "host/pid", a rank) says which version
// it applied, and a publisher waits until enough readers applied version K. The agent keeps, per region, the
// latest version each reader acked; a reader's later ack replaces its earlier one. Bounded (kMaxReaders
// readers per region) and dropped with the region, whose member it is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::agent {

class RegionAcks {
 public:
  static constexpr std::size_t kMaxReaders = 1024;

  struct Entry {
    std::string reader;
    std::uint64_t version = 0;
    std::chrono::system_clock::time_point at{};
  };

  // Records that `reader` applied `version` (replacing its earlier ack, even a higher one: a reader that
  // restarted says where it is now). ResourceExhausted, saying so, for a new reader past kMaxReaders.
  Status record(const std::string& reader, std::uint64_t version);
  // Every reader's latest ack, by reader.
  std::vector<Entry> list() const;
  // Whether at least `readers` readers acked a version >= `version`.
  bool done(std::uint64_t version, std::uint64_t readers) const;
  // The acks once done(version, readers), or as they are after `wait` or when `stop()` says so (checked
  // every 200 ms); woken by record().
  std::vector<Entry> wait_done(std::uint64_t version, std::uint64_t readers, std::chrono::milliseconds wait,
                               const std::function<bool()>& stop) const;

 private:
  bool done_locked(std::uint64_t version, std::uint64_t readers) const;
  std::vector<Entry> list_locked() const;

  mutable std::mutex mu_;
  mutable std::condition_variable acked_;
  std::map<std::string, Entry> by_reader_;
};

}  // namespace conduit::agent
