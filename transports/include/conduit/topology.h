// Topology: which NICs, GPUs and NUMA nodes this machine has, and how far apart each GPU and NIC sit on PCIe.
// Everything is read through a sysfs root so tests can hand in a fake tree instead of "/sys".
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"

namespace conduit {

// Ordered nearest first: GPUDirect RDMA is fastest when peer traffic stays below a PCIe switch and degrades
// as it has to cross the host bridge, then the socket interconnect.
enum class PcieDistance { SameSwitch, SameRootComplex, SameNumaNode, CrossSocket };

std::string_view to_string(PcieDistance distance);

struct Nic {
  std::string name;                   // "mlx5_0", "eth0"
  std::string kind;                   // "infiniband" or "net"
  std::string pci_address;            // "0000:03:00.0"; "" when the device is not itself a PCI function
  int numa_node = -1;                 // -1 when the kernel does not know
  std::filesystem::path device_path;  // resolved real path of the device
};

struct Gpu {
  std::string pci_address;
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  int numa_node = -1;
  std::filesystem::path device_path;
};

struct GpuNicDistance {
  std::string gpu;  // GPU PCI address
  std::string nic;  // NIC name
  PcieDistance distance;
};

struct Topology {
  std::vector<Nic> nics;        // infiniband first, then net; each sorted by name
  std::vector<Gpu> gpus;        // sorted by PCI address
  std::vector<int> numa_nodes;  // ascending

  static Result<Topology> scan(const std::filesystem::path& sysfs_root = "/sys");

  // Pure function of the resolved device paths and NUMA nodes; touches no filesystem.
  static PcieDistance distance(const Gpu& gpu, const Nic& nic);

  std::vector<GpuNicDistance> distances() const;  // every GPU x NIC pair
  nlohmann::json to_json() const;                 // {nics, gpus, numaNodes, distances}
};

}  // namespace conduit
