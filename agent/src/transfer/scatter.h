// Scatter-gather transfers (docs/kv-cache.md): one request carries many ops {sourceOffset, targetOffset,
// length} between one local region and one granted range, run as one batch on the transport. The body's
// op list is read by conduit/api/transfer.h; checked here against the region and the grant, before
// anything is sent: every op inside both ranges, and no two ops writing the same bytes (the target's
// for a write, the local region's for a read), naming the ops that break the rule.
#pragma once

#include <cstdint>
#include <vector>

#include "conduit/api/transfer.h"
#include "conduit/common/result.h"
#include "conduit/transport.h"

namespace conduit::agent {

using api::ScatterOp;  // read from the body by conduit/api/transfer.h

// Every op inside [0, source_bytes) of the region and [0, target_bytes) of the grant, and the side being
// written (the target for a write, the region for a read) written by one op at most.
Status check_scatter_ops(const std::vector<ScatterOp>& ops, OpKind kind, std::uint64_t source_bytes,
                         std::uint64_t target_bytes);

}  // namespace conduit::agent
