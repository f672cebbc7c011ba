// What a Chain's source asks hop `feeder`'s agent to forward on to hop `hop` (run_chain.cpp): the body the
// source received, with only what changes for the hop changed. Everything else (op, chunkBytes, window,
// verify, maxBytesPerSecond, and any field the body gains later) reaches the hop as the caller sent it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "conduit/api/transfer.h"

namespace conduit::agent {

// `chain` a Chain's body; `committed` the bytes hop `hop` already holds (sending starts there);
// `deadline_left` the seconds left of the deadline, 0 for none. Changed for the hop: the source (the
// feeder's region, followed through its grant), the one target (hop `hop`'s, which the source alone
// releases), the deadline, and the tenancy fields, which were checked at the source: the hop's
// forwarding transfer is this agent's, asked with its grants there.
api::TransferRequest hop_request(const api::TransferRequest& chain, std::size_t feeder, std::size_t hop,
                                 std::uint64_t length, std::uint64_t committed, std::uint64_t deadline_left);

}  // namespace conduit::agent
