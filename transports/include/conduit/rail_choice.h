// Which of a transport's rails carry one region's bytes: the rails whose NIC is nearest the region's memory
// (conduit/nic_choice.h). A region is registered only on those rails, so its RemoteKey names only them and
// the writes from it go out only on them; traffic that would cross a host bridge or the socket interconnect
// to reach a farther NIC stays off the wire unless striping over every rail is asked for.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/nic_choice.h"

namespace conduit {

enum class RailPolicy : std::uint8_t {
  Nearest,  // only the rails of the nearest distance class among the rails' NICs
  All,      // every rail (agent: --stripe-all-rails)
};

struct RailChoice {
  std::vector<std::uint32_t> rails;  // ascending; never empty for a transport with rails
  std::vector<std::string> nics;     // the distinct NICs of those rails in rail order; empty when unknown
  bool all = true;                   // every rail was chosen
  std::string why;                   // one line for logs and the region's JSON
};

// `rail_nics`: the NIC of each rail (Capabilities::rail_nics); empty, or all "", where the rails share one
// interface and there is nothing to choose. `ranked`: choose_nics(topology, place, {kind, false}) for the
// region's memory, or why it could not be ranked. Falls back to every rail when the ranking knows none of
// the rails' NICs, so a topology that cannot be read never stops a transfer.
RailChoice choose_rails(std::span<const std::string> rail_nics, const Result<NicChoice>& ranked,
                        RailPolicy policy = RailPolicy::Nearest);

}  // namespace conduit
