// What submit() checks before posting anything, alike in every backend: the batch options against the
// transport's largest message, and for each op that its local registration is live and this transport's,
// that its remote key is for this provider and names rails, and that both ranges lie inside what they
// address. The backend supplies what only it knows: whether a registration is its own, and what its keys
// must look like. Failures are InvalidArgument, naming the op.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "conduit/transport.h"

namespace conduit {

struct OpRules {
  std::string_view provider;          // a remote key must be for this provider (Capabilities::provider)
  std::string_view transport;         // the transport's name, for messages
  std::uint64_t max_message = 0;      // the largest slice size allowed
  std::string_view max_message_what;  // how messages name that limit ("the maximum message")
  // The registration was made by this transport (its handles are this backend's, on its rails).
  std::function<bool(const Registration&)> owns;
  // Why a remote key (already known to be for this provider, with rails) cannot be used; empty: it can.
  std::function<std::optional<std::string>(const RemoteKey&)> key_problem;
};

Status validate_ops(std::span<const Op> ops, const BatchOptions& options, const OpRules& rules);

}  // namespace conduit
