// A transfer as this agent runs it: the body the caller sent, as it came (api::TransferRequest, read and
// checked by its strict from_json), and the little only this agent can resolve from it: the targets' grant
// keys as the transports read them, the grant a Chain hop follows, and who asked. A Chain hop forwards the
// body itself, so a field added to the body reaches every hop without being copied across.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/transfer.h"
#include "conduit/common/result.h"
#include "conduit/remote_key.h"
#include "transfer/stream/landing.h"

namespace conduit::agent {

using api::ScatterOp;
using api::Verify;

struct ResolvedRequest {
  api::TransferRequest wire;
  std::vector<RemoteKey> grants;  // wire.targets[i].grant, read: what the transport writes or reads with
  // wire.follow_grant found in this agent's grant table (rest/transfer_routes.cpp): what has landed in the
  // source region, and whether the grant still exists.
  struct Follow {
    std::shared_ptr<const Landing> landing;
    std::function<bool()> granted;
  };
  std::optional<Follow> follow;
  // Who asked for it when that was an agent or a tenant's controller (rest/identity.h), which may then look
  // at it and cancel it; not on the wire. Empty: the controller or an operator.
  std::string requested_by;

  // The body read strictly (api::TransferRequest::from_json), then each target's grant key read and what
  // needs the key checked: a ring no larger than its grant, a Chain hop's region host memory. Errors name
  // the field ("targets[1].grant: ...").
  static Result<ResolvedRequest> from_json(const nlohmann::json& body);
};

}  // namespace conduit::agent
