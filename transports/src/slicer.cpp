#include "conduit/slicer.h"

namespace conduit {

std::vector<Slice> slice_ops(std::span<const Op> ops, std::uint64_t chunk_bytes, std::uint32_t rails) {
  std::vector<Slice> slices;
  std::uint64_t count = 0;
  for (const Op& op : ops) count += (op.length + chunk_bytes - 1) / chunk_bytes;
  slices.reserve(count);
  std::uint32_t next_rail = 0;
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    for (std::uint64_t done = 0; done < op.length; done += chunk_bytes) {
      const std::uint64_t len = std::min(chunk_bytes, op.length - done);
      slices.push_back(Slice{i, next_rail, op.local_offset + done, op.remote_offset + done, len});
      next_rail = (next_rail + 1) % rails;
    }
  }
  return slices;
}

}  // namespace conduit
