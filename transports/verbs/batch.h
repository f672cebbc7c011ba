// A submitted batch as the ibverbs progress threads see it: the backend-neutral per-rail parts and
// counters (../src/sliced_batch.h) over slices resolved to what an RDMA WRITE/READ work request needs.
#pragma once

#include <cstdint>
#include <memory>

#include "../src/sliced_batch.h"
#include "conduit/transport.h"
#include "connection.h"

namespace conduit::verbs {

struct PostedOp;
using Batch = SlicedBatch<PostedOp>;

// One slice, resolved at submit time to what a work request needs.
struct PostedOp {
  Batch* batch = nullptr;
  std::shared_ptr<Connection> connection;
  OpKind kind = OpKind::Write;
  std::uint64_t local_address = 0;
  std::uint32_t lkey = 0;
  std::uint64_t remote_address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t length = 0;
  std::uint64_t seq = 0;  // in its QP's SendQueue, once posted
};

}  // namespace conduit::verbs
