// Which NICs should carry a region's bytes: the ones nearest its memory. GPUDirect traffic that stays below
// a PCIe switch runs at full rate; crossing the host bridge or the socket interconnect costs bandwidth, so
// rails are striped only over the NICs of the nearest distance class unless asked otherwise.
#pragma once

#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/topology.h"

namespace conduit {

// Where a region's memory lives: host memory on a NUMA node (-1: not known), or a GPU by PCI address.
struct MemoryPlace {
  std::string gpu_pci;  // empty: host memory
  int numa_node = -1;
};

struct NicChoice {
  std::vector<std::string> nics;                      // nearest first, then by name
  std::vector<PcieDistance> distances;                // of each NIC in `nics`
  PcieDistance distance = PcieDistance::CrossSocket;  // of the farthest NIC chosen
  std::string why;                                    // one line for logs and /v1/node
};

struct NicChoiceOptions {
  std::string kind = "infiniband";  // RDMA devices (ConnectX, EFA); "net" for plain Ethernet interfaces
  bool best_class_only = true;      // false: every NIC of the kind, nearest first
};

// NotFound when the topology has no NIC of the kind, or the GPU is not in it.
Result<NicChoice> choose_nics(const Topology& topology, const MemoryPlace& place,
                              const NicChoiceOptions& options = {});

}  // namespace conduit
