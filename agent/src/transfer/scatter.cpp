#include "transfer/scatter.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "conduit/common/base64.h"
#include "conduit/common/json_fields.h"
#include "kube_client/kube_config.h"

namespace conduit::agent {

namespace {

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }

std::string range(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

// The limits both forms of the op list share, worded alike.
Error op_count_error(const std::string& field, std::size_t got) {
  return bad(field + ": must hold 1 to " + std::to_string(kMaxScatterOps) + " ops, got " +
             std::to_string(got));
}
Error total_error(std::size_t i) {
  return bad("ops: more than " + std::to_string(kMaxScatterBytes) + " bytes in all (up to ops[" +
             std::to_string(i) + "]): split the request");
}

}  // namespace

Result<std::vector<ScatterOp>> parse_scatter_ops(const nlohmann::json& ops) {
  if (!ops.is_array()) return bad("ops: must be an array");
  if (ops.empty() || ops.size() > kMaxScatterOps) return op_count_error("ops", ops.size());
  std::vector<ScatterOp> out;
  out.reserve(ops.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    // Thousands per request: the common, well-formed op is read directly; anything else goes through the
    // strict reader, which names the field and what is wrong with it.
    const nlohmann::json& j = ops[i];
    if (j.is_object() && j.size() == 3) {
      const auto s = j.find("sourceOffset"), t = j.find("targetOffset"), n = j.find("length");
      if (s != j.end() && t != j.end() && n != j.end() && s->is_number_unsigned() &&
          t->is_number_unsigned() && n->is_number_unsigned()) {
        const ScatterOp op{s->get<std::uint64_t>(), t->get<std::uint64_t>(), n->get<std::uint64_t>()};
        if (op.length >= 1 && op.length <= kMaxScatterBytes - total) {
          total += op.length;
          out.push_back(op);
          continue;
        }
      }
    }
    JsonFields f(ops[i], "ops[" + std::to_string(i) + "]");
    f.only({"sourceOffset", "targetOffset", "length"});
    ScatterOp op;
    op.source_offset = f.u64("sourceOffset", Need::Required).value_or(0);
    op.target_offset = f.u64("targetOffset", Need::Required).value_or(0);
    op.length = f.u64("length", Need::Required, 1, kMaxScatterBytes).value_or(0);
    if (!f.ok()) return f.status().error();
    total += op.length;
    if (total > kMaxScatterBytes) return total_error(i);
    out.push_back(op);
  }
  return out;
}

Result<std::vector<ScatterOp>> parse_packed_scatter_ops(const nlohmann::json& packed) {
  constexpr std::size_t kOpBytes = 3 * sizeof(std::uint64_t);
  if (!packed.is_string()) return bad("opsPacked: must be a base64 string");
  auto bytes = base64_decode(packed.get_ref<const std::string&>());
  if (!bytes) return bad("opsPacked: " + bytes.error().message);
  if (bytes->empty() || bytes->size() % kOpBytes != 0) {
    return bad(
        "opsPacked: must decode to whole ops of 24 bytes (three little-endian uint64: sourceOffset, "
        "targetOffset, length), got " +
        std::to_string(bytes->size()) + " bytes");
  }
  const std::size_t count = bytes->size() / kOpBytes;
  if (count > kMaxScatterOps) return op_count_error("opsPacked", count);
  const auto* in = reinterpret_cast<const unsigned char*>(bytes->data());
  auto u64 = [&in] {
    std::uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | in[b];  // little-endian whatever this machine is
    in += sizeof(std::uint64_t);
    return v;
  };
  std::vector<ScatterOp> out(count);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    ScatterOp& op = out[i];
    op.source_offset = u64();
    op.target_offset = u64();
    op.length = u64();
    if (op.length == 0) return bad("ops[" + std::to_string(i) + "].length: must be at least 1");
    if (op.length > kMaxScatterBytes - total) return total_error(i);
    total += op.length;
  }
  return out;
}

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
