#include "rest/long_poll.h"

#include <string>

#include "conduit/api/errors.h"
#include "rest/reply.h"

namespace conduit::agent::rest {

LongPoll::LongPoll(AgentState& state) : state_(state), held_(state.long_polls.fetch_add(1) < kMaxLongPolls) {
  if (!held_) state_.long_polls.fetch_sub(1);
}

LongPoll::~LongPoll() {
  if (held_) state_.long_polls.fetch_sub(1);
}

void busy(httplib::Response& res) {
  res.set_header("Retry-After", "1");
  send_error(
      res, 429, api::wire_code(ErrorCode::ResourceExhausted),
      "already " + std::to_string(kMaxLongPolls) + " long-polls under way; retry, or ask without waiting");
}

}  // namespace conduit::agent::rest
