// Cuts a batch of ops into slices of at most `slice_bytes` and deals them round-robin over the rails, so one
// large op keeps every rail busy and a failed slice can be retried or resumed on its own.
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

// Zero-length ops produce no slices. `slice_bytes` and `rails` must be > 0.
std::vector<Slice> slice_ops(std::span<const Op> ops, std::uint64_t slice_bytes, std::uint32_t rails);

// As slice_ops, but op i goes out only on the rails `rails_of[i]` lists (the transport's rails its local
// registration was made on, at least one), the round-robin carrying on from op to op. Slice::rail is the
// transport's rail; lanes[j] says which entry of its op's rails_of slice j took, the index a backend uses
// for the registration's per-rail handle and the remote key's rail. Both backends submit this way.
struct RailSlices {
  std::vector<Slice> slices;
  std::vector<std::uint32_t> lanes;
};
RailSlices slice_on_rails(std::span<const Op> ops, std::uint64_t slice_bytes,
                          std::span<const std::span<const std::uint32_t>> rails_of);

}  // namespace conduit
