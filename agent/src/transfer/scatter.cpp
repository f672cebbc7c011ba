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

}  // namespace

Status check_scatter_ops(const std::vector<ScatterOp>& ops, OpKind kind, std::uint64_t source_bytes,
                         std::uint64_t target_bytes) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ScatterOp& op = ops[i];
    const std::string name = "ops[" + std::to_string(i) + "]";
    if (op.source_offset > source_bytes || op.length > source_bytes - op.source_offset) {
      return bad(name + ": source " + range(op.source_offset, op.length) + " is outside the " +
                 std::to_string(source_bytes) + "-byte region");
    }
    if (op.target_offset > target_bytes || op.length > target_bytes - op.target_offset) {
      return bad(name + ": target " + range(op.target_offset, op.length) + " is outside the " +
                 std::to_string(target_bytes) + "-byte grant");
    }
  }
  // Sorted by where they write, each must end before the next begins.
  const auto written = [kind](const ScatterOp& op) {
    return kind == OpKind::Write ? op.target_offset : op.source_offset;
  };
  std::vector<std::size_t> order(ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return written(ops[a]) < written(ops[b]); });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const ScatterOp& before = ops[order[k - 1]];
    const ScatterOp& op = ops[order[k]];
    if (written(before) + before.length > written(op)) {
      return bad("ops[" + std::to_string(order[k]) + "] overlaps ops[" + std::to_string(order[k - 1]) +
                 "] in the " + (kind == OpKind::Write ? "target" : "local region") + " at " +
                 range(written(op), op.length) + ": each byte is written by one op");
    }
  }
  return {};
}

}  // namespace conduit::agent
