// Long-polls: a request that waits for a region (its making, next version or acks) or a transfer's end holds
// a worker thread, so at most kMaxLongPolls wait at once (half the server's threads) and waiters never starve
// the API. Each waits at most --long-poll-max, whatever it asked for.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "rest/rest.h"

namespace conduit::agent::rest {

inline constexpr int kMaxLongPolls = 32;

// One of kMaxLongPolls waits under way, for as long as it lives; false when there are that many already.
class LongPoll {
 public:
  explicit LongPoll(AgentState& state);
  ~LongPoll();
  LongPoll(const LongPoll&) = delete;
  LongPoll& operator=(const LongPoll&) = delete;
  explicit operator bool() const { return held_; }

 private:
  AgentState& state_;
  bool held_;
};

// What `wait(limit)` returns, run in a long-poll slot with `asked` bounded by --long-poll-max; nullopt when
// every slot is taken (the caller answers busy() or does not wait).
template <class Wait>
auto long_poll(AgentState& state, std::chrono::seconds asked, Wait wait)
    -> std::optional<decltype(wait(asked))> {
  LongPoll slot(state);
  if (!slot) return std::nullopt;
  return wait(std::min(asked, state.config.long_poll_max));
}

// 429 with Retry-After: every slot is taken.
void busy(httplib::Response& res);

}  // namespace conduit::agent::rest
