#include "conduit/slicer.h"

namespace conduit {

std::vector<Slice> slice_ops(std::span<const Op> ops, std::uint64_t slice_bytes, std::uint32_t rails) {
  std::vector<Slice> slices;
  std::uint64_t count = 0;
  for (const Op& op : ops) count += (op.length + slice_bytes - 1) / slice_bytes;
  slices.reserve(count);
  std::uint32_t next_rail = 0;
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    for (std::uint64_t done = 0; done < op.length; done += slice_bytes) {
      const std::uint64_t len = std::min(slice_bytes, op.length - done);
      slices.push_back(Slice{i, next_rail, op.local_offset + done, op.remote_offset + done, len});
      next_rail = (next_rail + 1) % rails;
    }
  }
  return slices;
}

RailSlices slice_on_rails(std::span<const Op> ops, std::uint64_t slice_bytes,
                          std::span<const std::span<const std::uint32_t>> rails_of) {
  RailSlices out;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::span<const std::uint32_t> rails = rails_of[i];
    const auto n = static_cast<std::uint32_t>(rails.size());
    // Starting where the previous op left off keeps the round-robin going from op to op.
    const std::uint64_t start = out.slices.size();
    for (Slice s : slice_ops(ops.subspan(i, 1), slice_bytes, n)) {
      const auto k = static_cast<std::uint32_t>((s.rail + start) % n);
      s.op = static_cast<std::uint32_t>(i);
      s.rail = rails[k];
      out.slices.push_back(s);
      out.lanes.push_back(k);
    }
  }
  return out;
}

}  // namespace conduit
