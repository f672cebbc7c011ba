// Cuts a batch of ops into chunk-sized slices and deals them round-robin over the rails, so one large op
// keeps every rail busy and a failed slice can be retried or resumed on its own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "conduit/transport.h"

namespace conduit {

struct Slice {
  std::uint32_t op = 0;  // index into the batch's ops
  std::uint32_t rail = 0;
  std::uint64_t local_offset = 0;
  std::uint64_t remote_offset = 0;
  std::uint64_t length = 0;
};

// Zero-length ops produce no slices. `chunk_bytes` and `rails` must be > 0.
std::vector<Slice> slice_ops(std::span<const Op> ops, std::uint64_t chunk_bytes, std::uint32_t rails);

}  // namespace conduit
