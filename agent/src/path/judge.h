// The verdict of a transfer's proof of path (docs/path.md), a pure function of the plan and two counter
// samples: which NICs carried the bytes, and the mismatch named when they did not go where planned.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conduit/api/transfer_path.h"
#include "conduit/common/op_kind.h"
#include "conduit/common/result.h"
#include "conduit/nic_counters.h"
#include "path/ledger.h"

namespace conduit::agent::path {

// The counters of each NIC read at one moment; an entry whose read failed says why.
using Sample = std::vector<std::pair<NicRef, Result<NicCounters>>>;

// A NIC the transfer's rails sit on and the bytes it put on them (0: a rail of its transports it did not
// use).
struct Planned {
  NicRef nic;
  std::uint64_t bytes = 0;
};

// Counters count headers and all other traffic too, so a NIC carried its share when its delta reached the
// bytes judged against less this fraction of them (1 / kToleranceDivisor): the payload the kernel may still
// hold in a socket's send buffer when the end is sampled. docs/path.md says why 1%.
inline constexpr std::uint64_t kToleranceDivisor = 100;
inline std::uint64_t required(std::uint64_t bytes) { return bytes - bytes / kToleranceDivisor; }

// `op`: Write counts what this node sends (tx), Read what it receives (rx). `nested`: the ledger's bytes of
// the transfers that ran wholly inside this one, per NIC. Every NIC of `start`/`end` not planned is where
// a planned NIC's missing bytes are looked for.
api::TransferPath judge(OpKind op, const std::vector<Planned>& planned, const NicBytes& nested,
                        const Sample& start, const Sample& end);

}  // namespace conduit::agent::path
