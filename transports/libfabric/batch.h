// A submitted batch as the libfabric progress threads see it: the backend-neutral per-rail parts and
// counters (../src/sliced_batch.h) over slices resolved to ready-to-post libfabric operations.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

#include "../src/sliced_batch.h"
#include "conduit/transport.h"

namespace conduit::fabric {

struct PostedOp;
using Batch = SlicedBatch<PostedOp>;

// One libfabric operation, fully resolved at submit time so posting is a single call.
struct PostedOp {
  fi_context2 context{};  // first member: libfabric returns its address as op_context
  Batch* batch = nullptr;
  std::uint32_t rail = 0;
  bool deliver = false;  // write with FI_DELIVERY_COMPLETE: completes only once visible at the target
  OpKind kind = OpKind::Write;
  void* buffer = nullptr;
  std::uint64_t length = 0;
  void* desc = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::uint64_t remote_address = 0;
  std::uint64_t key = 0;
};

}  // namespace conduit::fabric
