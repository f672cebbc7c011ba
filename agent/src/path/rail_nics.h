// Which NIC each rail of a transport sits on, as its counters are found: the rail's own NIC where the
// provider names one (verbs, EFA: an infiniband device), else the interface that holds the address the
// rail's endpoint is bound to (tcp: "lo" for 127.0.0.1). shm names neither: it crosses no NIC.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "conduit/nic_counters.h"
#include "conduit/transport.h"
#include "path/judge.h"

namespace conduit::agent::path {

struct RailNics {
  std::vector<std::optional<NicRef>> per_rail;  // one per rail; nullopt: no NIC known for it
  std::string why_none;                         // when no rail has one: why
};

RailNics rail_nics(const Transport& transport);

// `bytes` a transfer put on the wire through a transport, split over the NICs of the rails it used
// (`used`: rail indices; empty: every rail) as the transport stripes slices, evenly over its rails; the
// NICs of rails it did not use come with 0 bytes. Merged into `into` by NIC.
void add_planned(std::vector<Planned>& into, const RailNics& nics, const std::vector<std::uint32_t>& used,
                 std::uint64_t bytes);

}  // namespace conduit::agent::path
