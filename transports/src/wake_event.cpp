#include "wake_event.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace conduit {

WakeEvent::WakeEvent() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

WakeEvent::~WakeEvent() {
  if (fd_ >= 0) close(fd_);
}

void WakeEvent::notify() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = write(fd_, &one, sizeof(one));
}

void WakeEvent::drain() const {
  std::uint64_t drained = 0;
  [[maybe_unused]] auto n = read(fd_, &drained, sizeof(drained));
}

}  // namespace conduit
