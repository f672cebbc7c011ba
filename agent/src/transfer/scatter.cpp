#include "transfer/scatter.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace conduit::agent {

namespace {

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }

std::string range(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

// Where an op's last run ends on one side, in 128 bits: offset, stride and count are the client's, and
// (count - 1) * stride + length may pass 2^64.
unsigned __int128 extent_end(std::uint64_t offset, std::uint64_t stride, const ScatterOp& op) {
  return static_cast<unsigned __int128>(offset) + static_cast<unsigned __int128>(op.count - 1) * stride +
         op.length;
}

std::string runs_text(const ScatterOp& op, std::uint64_t offset, std::uint64_t stride) {
  if (op.count == 1) return range(offset, op.length);
  return std::to_string(op.count) + " runs of " + std::to_string(op.length) + " bytes " +
         std::to_string(stride) + " apart from " + std::to_string(offset);
}

// One run of an op on the written side, for the overlap check of ops whose extents interleave.
struct Run {
  std::uint64_t offset;
  std::uint64_t length;
  std::size_t op;
};

}  // namespace

Status check_scatter_ops(const std::vector<ScatterOp>& ops, OpKind kind, std::uint64_t source_bytes,
                         std::uint64_t target_bytes) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ScatterOp& op = ops[i];
    const std::string name = "ops[" + std::to_string(i) + "]";
    if (extent_end(op.source_offset, op.source_stride, op) > source_bytes) {
      return bad(name + ": source " + runs_text(op, op.source_offset, op.source_stride) +
                 " reaches outside the " + std::to_string(source_bytes) + "-byte region");
    }
    if (extent_end(op.target_offset, op.target_stride, op) > target_bytes) {
      return bad(name + ": target " + runs_text(op, op.target_offset, op.target_stride) +
                 " reaches outside the " + std::to_string(target_bytes) + "-byte grant");
    }
  }
  // The side being written: each op's extent there (first byte to the last run's end, all inside now).
  const bool writes = kind == OpKind::Write;
  const auto start = [writes](const ScatterOp& op) { return writes ? op.target_offset : op.source_offset; };
  const auto stride = [writes](const ScatterOp& op) { return writes ? op.target_stride : op.source_stride; };
  const auto end = [&](const ScatterOp& op) {
    return static_cast<std::uint64_t>(extent_end(start(op), stride(op), op));
  };
  const std::string side = writes ? "target" : "local region";
  const auto overlap = [&](std::size_t a, std::size_t b, std::uint64_t at, std::uint64_t length) {
    return bad("ops[" + std::to_string(a) + "] overlaps ops[" + std::to_string(b) + "] in the " + side +
               " at " + range(at, length) + ": each byte is written by one op");
  };
  std::vector<std::size_t> order(ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return start(ops[a]) < start(ops[b]); });
  // Ops whose extents overlap form a cluster. A cluster of one is fine (a strided op's own runs never
  // overlap: its stride is at least its length); a cluster of plain ranges overlaps; one with a strided op
  // may only interleave (column pieces side by side), so its runs are compared one by one: bounded by
  // kMaxScatterRuns in all.
  std::vector<Run> runs;
  for (std::size_t k = 0; k < order.size();) {
    std::size_t last = k + 1;
    std::uint64_t reach = end(ops[order[k]]);
    bool strided = ops[order[k]].strided();
    while (last < order.size() && start(ops[order[last]]) < reach) {
      reach = std::max(reach, end(ops[order[last]]));
      strided = strided || ops[order[last]].strided();
      ++last;
    }
    if (last - k > 1) {
      if (!strided) {
        const ScatterOp& op = ops[order[k + 1]];
        return overlap(order[k + 1], order[k], start(op), op.length);
      }
      runs.clear();
      for (std::size_t c = k; c < last; ++c) {
        const ScatterOp& op = ops[order[c]];
        for (std::uint64_t r = 0, at = start(op); r < op.count; ++r, at += stride(op))
          runs.push_back({at, op.length, order[c]});
      }
      std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
      for (std::size_t r = 1; r < runs.size(); ++r) {
        if (runs[r - 1].offset + runs[r - 1].length > runs[r].offset)
          return overlap(runs[r].op, runs[r - 1].op, runs[r].offset, runs[r].length);
      }
    }
    k = last;
  }
  return {};
}

}  // namespace conduit::agent
