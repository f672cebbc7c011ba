// A submitted batch as the libfabric progress threads see it: the backend-neutral per-rail parts and
// counters (../src/sliced_batch.h) over slices resolved to ready-to-post libfabric operations.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include <array>
#include <cstdint>

#include "../src/sliced_batch.h"
#include "conduit/transport.h"

namespace conduit::fabric {

struct PostedOp;
using Batch = SlicedBatch<PostedOp>;

// Most ranges one posted operation carries (a scattered write or read of several slices in one message).
inline constexpr std::uint32_t kMaxRanges = 4;

// One libfabric operation, fully resolved at submit time so posting is a single call. Usually one slice;
// small slices that follow one another on a rail, to the same peer and key, share one operation of up to
// kMaxRanges (local iov, remote iov) pairs, so a message carries several of them.
struct PostedOp {
  fi_context2 context{};  // first member: libfabric returns its address as op_context
  Batch* batch = nullptr;
  std::uint32_t rail = 0;
  bool deliver = false;  // write with FI_DELIVERY_COMPLETE: completes only once visible at the target
  OpKind kind = OpKind::Write;
  std::uint32_t ranges = 1;
  std::uint64_t length = 0;  // all ranges together
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::uint64_t key = 0;
  std::array<iovec, kMaxRanges> local{};
  std::array<void*, kMaxRanges> desc{};
  std::array<fi_rma_iov, kMaxRanges> remote{};
};

}  // namespace conduit::fabric
