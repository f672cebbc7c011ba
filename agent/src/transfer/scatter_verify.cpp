#include "transfer/scatter_verify.h"

#include <cstdio>
#include <future>
#include <system_error>

namespace conduit::agent {

using run::Failure;

namespace {

std::string hex(std::uint32_t crc) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", crc);
  return text;
}

}  // namespace

std::vector<cuda::CrcRange> local_ranges(const std::vector<ScatterOp>& ops) {
  std::vector<cuda::CrcRange> out;
  out.reserve(ops.size());
  for (const ScatterOp& op : ops) {
    op.for_each_run([&out](std::uint64_t s, std::uint64_t, std::uint64_t n) { out.push_back({s, n}); });
  }
  return out;
}

// A strided op's target side is one strided range: the request stays one range an op.
api::GrantChecksumRequest grant_ranges(const std::vector<ScatterOp>& ops) {
  api::GrantChecksumRequest out;
  out.ranges.reserve(ops.size());
  for (const ScatterOp& op : ops)
    out.ranges.push_back({op.target_offset, op.length, op.count, op.target_stride});
  return out;
}

std::optional<Failure> compare_scatter_sums(const ScatterSums& sums, const std::vector<ScatterOp>& ops) {
  if (sums.local == sums.grant) return std::nullopt;
  std::uint64_t bytes = 0;
  for (const ScatterOp& op : ops) bytes += op.bytes();
  const bool writes = sums.op == OpKind::Write;
  const std::string local = std::string(writes ? "the source" : "the target") + " (region \"" + sums.region +
                            "\" on this agent) sums " + hex(sums.local);
  const std::string grant = std::string(writes ? "the target" : "the source") + " (grant " + sums.grant_id +
                            " at " + sums.url + ") sums " + hex(sums.grant);
  return Failure{TransferState::Failed, reason::kChecksumMismatch,
                 "crc32c mismatch over the " + std::to_string(ops.size()) + " ops' " + std::to_string(bytes) +
                     " bytes in op order: " + local + ", " + grant +
                     "; nothing was re-sent: retry the batch"};
}

std::optional<Failure> verify_scatter(const TransferRun& t, const api::ClientOptions& peers) {
  const std::vector<ScatterOp>& ops = t.request.wire.ops;
  const api::TransferTarget& target = t.request.wire.targets[0];
  const MemoryRegion& memory = t.source->memory();
  const auto local_sum = [&memory, &ops] { return cuda::region_crc32c_ranges(memory, local_ranges(ops)); };
  // This agent sums its ranges while the grant's agent sums its own: the check costs the longer of the two
  // and a round trip, not both. Without a thread to spare, one after the other.
  std::future<Result<std::uint32_t>> local;
  try {
    local = std::async(std::launch::async, local_sum);
  } catch (const std::system_error&) {
    local = std::async(std::launch::deferred, local_sum);
  }
  auto theirs = api::AgentClient(target.url, peers).grant_checksum(target.grant_id, grant_ranges(ops));
  Result<std::uint32_t> mine = local.get();
  if (!mine) {
    return Failure{TransferState::Failed, reason::kChecksumMismatch,
                   "verify: crc32c of the ops' ranges of region \"" + t.request.wire.source_region +
                       "\": " + mine.error().message};
  }
  if (!theirs) {
    // A target that refuses us (403: the grant is not made for this node) is no checksum mismatch.
    const ErrorCode code = theirs.error().code;
    const bool refused =
        code == ErrorCode::PeerUnreachable || code == ErrorCode::RemoteAccess || code == ErrorCode::Forbidden;
    return Failure{TransferState::Failed, refused ? run::reason_for(code) : reason::kChecksumMismatch,
                   "verify: " + theirs.error().message};
  }
  return compare_scatter_sums({.local = *mine,
                               .grant = theirs->crc32c,
                               .region = t.request.wire.source_region,
                               .grant_id = target.grant_id,
                               .url = target.url,
                               .op = t.request.wire.op},
                              ops);
}

}  // namespace conduit::agent
