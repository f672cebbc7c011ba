// Scatter-gather transfers (docs/kv-cache.md): one request carries many ops {sourceOffset, targetOffset,
// length} between one local region and one granted range, run as one batch on the transport. Checked here,
// before anything is sent: every op inside both ranges, and no two ops writing the same bytes (the target's
// for a write, the local region's for a read), naming the ops that break the rule.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/transport.h"

namespace conduit::agent {

struct ScatterOp {
  std::uint64_t source_offset = 0;  // in the local region
  std::uint64_t target_offset = 0;  // in the granted range
  std::uint64_t length = 0;
};

inline constexpr std::size_t kMaxScatterOps = 65536;
inline constexpr std::uint64_t kMaxScatterBytes = 16ULL << 30;

// The `ops` array of POST /v1/transfers: 1 to kMaxScatterOps objects, each length >= 1, kMaxScatterBytes in
// all. InvalidArgument naming the op ("ops[12].length: ...").
Result<std::vector<ScatterOp>> parse_scatter_ops(const nlohmann::json& ops);

// The `opsPacked` string of POST /v1/transfers: the same ops as little-endian uint64 triples (sourceOffset,
// targetOffset, length), 24 bytes an op, base64. A caller holding block tables in arrays (numpy) sends them
// as they are, and the agent reads 1,000 ops in a fraction of the time JSON objects take. The ops are
// numbered in the order of the triples; the same limits and errors as `ops`.
Result<std::vector<ScatterOp>> parse_packed_scatter_ops(const nlohmann::json& packed);

// Every op inside [0, source_bytes) of the region and [0, target_bytes) of the grant, and the side being
// written (the target for a write, the region for a read) written by one op at most.
Status check_scatter_ops(const std::vector<ScatterOp>& ops, OpKind kind, std::uint64_t source_bytes,
                         std::uint64_t target_bytes);

}  // namespace conduit::agent
