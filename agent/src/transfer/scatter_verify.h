// The CRC32C check of a scatter-gather transfer asked for with verify crc32c (docs/kv-cache.md), once every
// op has landed: one running CRC32C over this agent's ranges in op order against the one the target's agent
// computes over the grant's ranges in the same order (POST /v1/grants/{id}/checksum), both the sum of the
// ops' bytes end to end. Whichever way the ops moved the bytes (a write's source, a read's destination is
// the local side) both ends hold the same bytes, so one comparison serves both. A mismatch fails the
// transfer with both sums named; nothing is re-sent (the caller retries the batch).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/agent_client.h"
#include "conduit/cuda_staging.h"
#include "transfer/run.h"

namespace conduit::agent {

// The ranges each end sums, in op order: the local region's and the grant's.
std::vector<cuda::CrcRange> local_ranges(const std::vector<ScatterOp>& ops);
api::GrantChecksumRequest grant_ranges(const std::vector<ScatterOp>& ops);

// Who holds which sum, for the verdict's words.
struct ScatterSums {
  std::uint32_t local = 0;  // this agent's, over region `region`
  std::uint32_t grant = 0;  // the grant's agent's
  std::string region{};
  std::string grant_id{};
  std::string url{};
  OpKind op = OpKind::Write;  // write: the local side is the source; read: the target
};

// nullopt when the two sums agree; otherwise Failed, ChecksumMismatch, a message that starts "crc32c
// mismatch" and says both sums and whose each is.
std::optional<run::Failure> compare_scatter_sums(const ScatterSums& sums, const std::vector<ScatterOp>& ops);

// The whole check, for a transfer whose batch ended well: this agent's sum computed while the grant's agent
// computes its own, then compared. A peer that cannot be asked fails it as a verify of a whole range does
// (run.cpp): refused, unreachable, or ChecksumMismatch saying why there is no sum.
std::optional<run::Failure> verify_scatter(const TransferRun& t, const api::ClientOptions& peers);

}  // namespace conduit::agent
