// What an agent identity may do on this node (docs/security.md, "Identities"): exactly what a live grant made
// for it (a grant's `peer` naming its node, or naming no node) allows, on that grant's range and nothing
// more.
//
//   a read grant   lets its agent read the range: fabric reads through its key, checksums of the range,
//                  this agent sending the range on (a transfer from the region), staging copies to host;
//   a write grant  lets its agent write the range: fabric writes, landing reports and the commit, a
//                  transfer that reads into the region (op "read"), staging copies to the device; and read
//                  the same range back (checksums of what it wrote, a Chain hop sending on what it received).
//
// A read grant never makes its region a write target, by any route or op. A grant that is revoked or past its
// expiry allows nothing. Pure: the handlers give it the grant table's list and the caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grants.h"
#include "rest/identity.h"

namespace conduit::agent::rest {

enum class Reach : std::uint8_t { Read, Write };

// Why `caller` (an agent) may not `reach` bytes [offset, offset + length) of region `region`, or nullopt when
// one live grant made for it allows that whole range. A caller that is not an agent is never refused here.
std::optional<std::string> peer_refusal(const std::vector<std::shared_ptr<const Grant>>& grants,
                                        const Caller& caller, const std::string& region, Reach reach,
                                        std::uint64_t offset, std::uint64_t length,
                                        std::chrono::system_clock::time_point now);

}  // namespace conduit::agent::rest
