// Waiting for something another process or thread does: true as soon as `pred` holds, false if it still does
// not after `timeout`. Every wait in the tests is bounded by one of these.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace conduit::testing {

inline bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace conduit::testing
