#include "conduit/topology.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <optional>
#include <system_error>

namespace conduit {
namespace {

namespace fs = std::filesystem;

constexpr std::uint16_t kNvidiaVendorId = 0x10de;

bool all_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c); });
}

// "DDDD:BB:DD.F". The domain may be wider than four digits: Intel VMD puts devices in domain 10000.
bool looks_like_pci_address(std::string_view s) {
  const auto dot = s.rfind('.');
  const auto colon2 = s.rfind(':', dot);
  if (dot == std::string_view::npos || colon2 == std::string_view::npos || colon2 == 0) return false;
  const auto colon1 = s.rfind(':', colon2 - 1);
  if (colon1 == std::string_view::npos) return false;
  const auto domain = s.substr(0, colon1);
  const auto bus = s.substr(colon1 + 1, colon2 - colon1 - 1);
  const auto dev = s.substr(colon2 + 1, dot - colon2 - 1);
  const auto fn = s.substr(dot + 1);
  return domain.size() >= 4 && all_hex(domain) && bus.size() == 2 && all_hex(bus) && dev.size() == 2 &&
         all_hex(dev) && fn.size() == 1 && fn[0] >= '0' && fn[0] <= '7';
}

// A host bridge directory: "pci0000:00".
bool looks_like_pci_root(std::string_view s) {
  if (!s.starts_with("pci")) return false;
  s.remove_prefix(3);
  const auto colon = s.find(':');
  return colon != std::string_view::npos && colon >= 4 && all_hex(s.substr(0, colon)) &&
         s.size() - colon - 1 == 2 && all_hex(s.substr(colon + 1));
}

std::optional<std::string> read_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// sysfs prints ids as "0x10de" and NUMA nodes as "-1" or "0".
std::optional<long> read_number(const fs::path& file, int base) {
  const auto line = read_line(file);
  if (!line) return std::nullopt;
  std::string_view s = *line;
  if (base == 16 && (s.starts_with("0x") || s.starts_with("0X"))) s.remove_prefix(2);
  long value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

int read_numa_node(const fs::path& device) {
  // Functions hanging below a PCI device (virtio-net's "virtio2") have no numa_node file of their own, so ask
  // the nearest PCI ancestor; stop there, or at the host bridge, rather than wander up the tree.
  for (fs::path p = device; p.has_relative_path(); p = p.parent_path()) {
    if (const auto node = read_number(p / "numa_node", 10)) return static_cast<int>(*node);
    const std::string name = p.filename().string();
    if (looks_like_pci_address(name) || looks_like_pci_root(name)) break;
  }
  return -1;
}

// Entries of a directory in name order, so scans are reproducible; an absent directory just has none.
std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

void scan_nics(const fs::path& class_dir, const std::string& kind, std::vector<Nic>& nics) {
  for (const auto& entry : entries(class_dir)) {
    std::error_code ec;
    // Virtual interfaces (lo, bridges, veths) and plain files such as bonding_masters have no device link.
    const fs::path device = fs::canonical(entry / "device", ec);
    if (ec) continue;
    const std::string last = device.filename().string();
    nics.push_back(Nic{entry.filename().string(), kind, looks_like_pci_address(last) ? last : std::string(),
                       read_numa_node(device), device});
  }
}

std::vector<Gpu> scan_gpus(const fs::path& pci_devices) {
  std::vector<Gpu> gpus;
  for (const auto& entry : entries(pci_devices)) {
    const auto vendor = read_number(entry / "vendor", 16);
    if (vendor != kNvidiaVendorId) continue;
    // The same board also exposes an HDMI audio function (0x0403) that must not count as a second GPU.
    const auto cls = read_line(entry / "class");
    if (!cls || !(cls->starts_with("0x0300") || cls->starts_with("0x0302"))) continue;
    const auto device_id = read_number(entry / "device", 16);
    std::error_code ec;
    const fs::path device = fs::canonical(entry, ec);
    if (!device_id || ec) continue;
    gpus.push_back(Gpu{entry.filename().string(), kNvidiaVendorId, static_cast<std::uint16_t>(*device_id),
                       read_numa_node(device), device});
  }
  return gpus;
}

std::vector<int> scan_numa_nodes(const fs::path& node_dir) {
  std::vector<int> nodes;
  for (const auto& entry : entries(node_dir)) {
    const std::string name = entry.filename().string();
    if (!name.starts_with("node") || !fs::is_directory(entry)) continue;
    int id = 0;
    const auto [end, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), id);
    if (ec == std::errc{} && end == name.data() + name.size() && name.size() > 4) nodes.push_back(id);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

struct PciChain {
  std::string root;                  // "pci0000:00"
  std::vector<std::string> devices;  // bridges from the root port down to the endpoint
};

// The last host-bridge component anchors the chain, so a sysfs root that itself lives under a directory with
// PCI-looking names cannot leak into it.
PciChain pci_chain(const fs::path& device_path) {
  PciChain chain;
  bool in_chain = false;
  for (const auto& component : device_path) {
    const std::string name = component.string();
    if (looks_like_pci_root(name)) {
      chain = PciChain{name, {}};
      in_chain = true;
    } else if (in_chain && looks_like_pci_address(name)) {
      chain.devices.push_back(name);
    } else {
      in_chain = false;
    }
  }
  return chain;
}

std::string hex16(std::uint16_t value) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%04x", value);
  return buf;
}

}  // namespace

std::string_view to_string(PcieDistance distance) {
  switch (distance) {
    case PcieDistance::SameSwitch:
      return "SameSwitch";
    case PcieDistance::SameRootComplex:
      return "SameRootComplex";
    case PcieDistance::SameNumaNode:
      return "SameNumaNode";
    case PcieDistance::CrossSocket:
      return "CrossSocket";
  }
  return "Unknown";
}

Result<Topology> Topology::scan(const std::filesystem::path& sysfs_root) {
  try {
    if (!fs::is_directory(sysfs_root)) {
      return make_error(ErrorCode::NotFound, "sysfs root " + sysfs_root.string() + " is not a directory");
    }
    Topology topology;
    scan_nics(sysfs_root / "class" / "infiniband", "infiniband", topology.nics);
    scan_nics(sysfs_root / "class" / "net", "net", topology.nics);
    topology.gpus = scan_gpus(sysfs_root / "bus" / "pci" / "devices");
    topology.numa_nodes = scan_numa_nodes(sysfs_root / "devices" / "system" / "node");
    return topology;
  } catch (const fs::filesystem_error& e) {
    return make_error(ErrorCode::Io, "scanning " + sysfs_root.string() + ": " + e.what());
  }
}

PcieDistance Topology::distance(const Gpu& gpu, const Nic& nic) {
  const PciChain g = pci_chain(gpu.device_path);
  const PciChain n = pci_chain(nic.device_path);
  if (!g.root.empty() && g.root == n.root) {
    // A shared bridge above both endpoints means peer-to-peer traffic turns around below the host bridge.
    if (g.devices.size() > 1 && n.devices.size() > 1 && g.devices[0] == n.devices[0]) {
      return PcieDistance::SameSwitch;
    }
    return PcieDistance::SameRootComplex;
  }
  // Equal values include -1 == -1: single-socket boxes often report no node at all, and calling them
  // cross-socket would steer rail selection away from perfectly local NICs.
  if (gpu.numa_node == nic.numa_node) return PcieDistance::SameNumaNode;
  return PcieDistance::CrossSocket;
}

std::vector<GpuNicDistance> Topology::distances() const {
  std::vector<GpuNicDistance> out;
  out.reserve(gpus.size() * nics.size());
  for (const auto& gpu : gpus) {
    for (const auto& nic : nics) out.push_back({gpu.pci_address, nic.name, distance(gpu, nic)});
  }
  return out;
}

nlohmann::json Topology::to_json() const {
  nlohmann::json out = {{"nics", nlohmann::json::array()},
                        {"gpus", nlohmann::json::array()},
                        {"numaNodes", numa_nodes},
                        {"distances", nlohmann::json::array()}};
  for (const auto& nic : nics) {
    out["nics"].push_back({{"name", nic.name},
                           {"kind", nic.kind},
                           {"pciAddress", nic.pci_address},
                           {"numaNode", nic.numa_node},
                           {"devicePath", nic.device_path.string()}});
  }
  for (const auto& gpu : gpus) {
    out["gpus"].push_back({{"pciAddress", gpu.pci_address},
                           {"vendorId", hex16(gpu.vendor_id)},
                           {"deviceId", hex16(gpu.device_id)},
                           {"numaNode", gpu.numa_node},
                           {"devicePath", gpu.device_path.string()}});
  }
  for (const auto& d : distances()) {
    out["distances"].push_back(
        {{"gpu", d.gpu}, {"nic", d.nic}, {"distance", std::string(to_string(d.distance))}});
  }
  return out;
}

}  // namespace conduit
