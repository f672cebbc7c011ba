// An eventfd that wakes a progress thread sleeping in poll(): another thread notifies (a batch handed
// over, the transport shutting down), the sleeper includes fd() in its poll set and drains it on waking.
#pragma once

namespace conduit {

class WakeEvent {
 public:
  WakeEvent();
  ~WakeEvent();
  WakeEvent(const WakeEvent&) = delete;
  WakeEvent& operator=(const WakeEvent&) = delete;

  int fd() const { return fd_; }  // -1 if the eventfd could not be made (poll() then ignores it)
  void notify() const;            // any thread
  void drain() const;             // the sleeper, after poll() saw fd() readable

 private:
  int fd_ = -1;
};

}  // namespace conduit
