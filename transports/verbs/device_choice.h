// Which RDMA devices the rails use: the ones named, or the ones nearest the memory the transport serves
// (conduit/nic_choice.h over the sysfs topology), restricted to the devices rdma-core can drive as RC.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/nic_choice.h"
#include "conduit/topology.h"
#include "conduit/verbs.h"

namespace conduit::verbs {

struct DeviceChoice {
  std::vector<std::string> rails;  // device of each rail, rail order
  std::string why;                 // one line for logs
};

// "numa:1" -> host memory on node 1; "0000:1b:00.0" -> that GPU; "" -> host memory, node unknown.
Result<MemoryPlace> parse_near(const std::string& near);

// `present`: the RC-capable devices found (names, any order). `topology` may be null (no sysfs). Named
// devices must all be present (NotFound listing what is); without names, devices are ranked nearest first
// from the topology, falling back to name order when it knows none of them and `near` was not given.
// Rails beyond the chosen devices reuse them round-robin.
Result<DeviceChoice> choose_devices(std::span<const std::string> present, const VerbsOptions& options,
                                    const Topology* topology, int rails);

}  // namespace conduit::verbs
