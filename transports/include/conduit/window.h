// Bounded in-flight accounting: at most `limit` slices posted and not yet completed. Single-threaded by
// design: each rail's progress thread owns the windows of the batches it drives.
#pragma once

#include <cstdint>

namespace conduit {

class Window {
 public:
  explicit Window(std::uint32_t limit) : limit_(limit == 0 ? 1 : limit) {}

  bool has_room() const { return in_flight_ < limit_; }
  bool try_acquire() {
    if (!has_room()) return false;
    ++in_flight_;
    return true;
  }
  // Returns a slot taken by try_acquire; ignores releases with nothing in flight (a provider reporting one
  // completion twice must not let the window grow past its limit).
  void release() {
    if (in_flight_ > 0) --in_flight_;
  }
  std::uint32_t in_flight() const { return in_flight_; }
  std::uint32_t limit() const { return limit_; }

 private:
  std::uint32_t limit_;
  std::uint32_t in_flight_ = 0;
};

}  // namespace conduit
