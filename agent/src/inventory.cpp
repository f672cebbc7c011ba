#include "inventory.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "conduit/common/random.h"
#include "conduit/cuda_device.h"
#include "conduit/nic_choice.h"
#include "conduit/topology.h"
#include "conduit/verbs.h"

namespace conduit::agent {

namespace {

namespace fs = std::filesystem;

nlohmann::json check(const char* name, bool ok, const std::string& message) {
  return {{"name", name}, {"ok", ok}, {"message", ok ? "" : message}};
}

bool has_entries(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::directory_iterator(dir, ec) != fs::directory_iterator();
}

// RDMA needs both halves: the kernel's view of a device (sysfs) and a verbs device node this process may
// open, which a pod only has when /dev/infiniband is mounted in and the container may use it.
nlohmann::json rdma_check(const fs::path& sysfs_root, const fs::path& dev_dir) {
  const fs::path ib = sysfs_root / "class" / "infiniband";
  std::error_code ec;
  if (!fs::exists(ib, ec)) return check("rdma", false, "no RDMA device (" + ib.string() + " does not exist)");
  if (!has_entries(ib)) return check("rdma", false, "no RDMA device (" + ib.string() + " is empty)");

  std::vector<fs::path> uverbs;
  for (const auto& entry : fs::directory_iterator(dev_dir, ec)) {
    if (entry.path().filename().string().starts_with("uverbs")) uverbs.push_back(entry.path());
  }
  if (uverbs.empty()) {
    return check("rdma", false,
                 "no verbs device node (" + (dev_dir / "uverbs*").string() +
                     " is missing: mount /dev/infiniband into the agent)");
  }
  std::sort(uverbs.begin(), uverbs.end());
  const int fd = ::open(uverbs.front().c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      return check("rdma", false, "no permission to open " + uverbs.front().string());
    }
    return check("rdma", false, "cannot open " + uverbs.front().string() + ": " + std::strerror(err));
  }
  ::close(fd);
  return check("rdma", true, "");
}

// OK when this agent can allocate CUDA memory; otherwise the first reason a person would fix.
nlohmann::json gpu_check(const Result<Topology>& topology) {
  const cuda::Availability& gpu = cuda::availability();
  if (gpu.usable()) return check("gpu", true, "");
  if (!topology) return check("gpu", false, "topology unknown: " + topology.error().message);
  if (topology->gpus.empty()) return check("gpu", false, "no NVIDIA GPU found");
  if (!gpu.built) return check("gpu", false, "built without CUDA");
  return check("gpu", false, gpu.reason);
}

nlohmann::json cuda_json() {
  const cuda::Availability& gpu = cuda::availability();
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : gpu.devices) {
    devices.push_back({{"ordinal", d.ordinal},
                       {"name", d.name},
                       {"pciBusId", d.pci_bus_id},
                       {"memoryBytes", d.memory_bytes},
                       {"dmabuf", d.dmabuf}});
  }
  return {{"built", gpu.built},
          {"driver", gpu.driver},
          {"driverVersion", gpu.driver_version},
          {"reason", gpu.reason},
          {"devices", std::move(devices)}};
}

// TransportSet::to_json with how each transport reaches CUDA memory (never silent: docs/gpu.md).
nlohmann::json fabric_json(const TransportSet& set) {
  nlohmann::json out = set.to_json();
  const auto& transports = set.transports();
  for (std::size_t i = 0; i < out.size() && i < transports.size(); ++i) {
    const Capabilities& caps = transports[i]->capabilities();
    out[i]["gpuDirect"] = std::string(to_string(caps.gpu_path));
    out[i]["gpuDirectDetail"] = caps.gpu_path_detail;
  }
  return out;
}

nlohmann::json memlock_check(std::uint64_t cap) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    return check("memlock", false, std::string("getrlimit(RLIMIT_MEMLOCK): ") + std::strerror(errno));
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= cap) return check("memlock", true, "");
  return check("memlock", false,
               "memlock limit " + std::to_string(limit.rlim_cur) + " bytes is below the memory cap " +
                   std::to_string(cap) + " bytes (run with ulimit -l unlimited)");
}

// CAP_IPC_LOCK lets registration pin memory beyond the memlock limit.
nlohmann::json ipc_lock_check() {
  constexpr int kCapIpcLock = 14;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (!line.starts_with("CapEff:")) continue;
    std::uint64_t caps = 0;
    try {
      caps = std::stoull(line.substr(7), nullptr, 16);
    } catch (const std::exception&) {
      return check("ipcLock", false, "cannot parse CapEff in /proc/self/status");
    }
    if ((caps >> kCapIpcLock) & 1U) return check("ipcLock", true, "");
    return check("ipcLock", false,
                 "CAP_IPC_LOCK is not in the effective capability set (add it to the container's "
                 "securityContext)");
  }
  return check("ipcLock", false, "no CapEff line in /proc/self/status");
}

// For each GPU and each NUMA node, the RDMA NICs its memory's rails go over (conduit/nic_choice.h): what a
// planner needs to place a transfer, and what an operator checks against the server's wiring.
nlohmann::json nic_choice(const Topology& topology) {
  auto entry = [](const Result<NicChoice>& c) {
    if (!c) return nlohmann::json{{"nics", nlohmann::json::array()}, {"why", c.error().message}};
    return nlohmann::json{
        {"nics", c->nics}, {"distance", std::string(to_string(c->distance))}, {"why", c->why}};
  };
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& gpu : topology.gpus) {
    auto e = entry(choose_nics(topology, {gpu.pci_address, -1}));
    e["gpu"] = gpu.pci_address;
    gpus.push_back(std::move(e));
  }
  nlohmann::json numa = nlohmann::json::array();
  for (const int node : topology.numa_nodes) {
    auto e = entry(choose_nics(topology, {"", node}));
    e["numaNode"] = node;
    numa.push_back(std::move(e));
  }
  return {{"gpus", std::move(gpus)}, {"numaNodes", std::move(numa)}};
}

// The native rdma-core backend: usable when this agent opened it, otherwise whether it could be opened here
// and, when not, the same reason opening it gives ("no RDMA device (ibv_get_device_list found none)").
nlohmann::json ibverbs_check(const TransportSet& transports, const verbs::VerbsOptions& options) {
  if (transports.find(verbs::kProviderName) != nullptr) return check("ibverbs", true, "");
  const Status usable = verbs::probe(options);
  return check("ibverbs", usable.ok(), usable.ok() ? "" : usable.error().message);
}

}  // namespace

const std::string& instance_id() {
  static const std::string id = random_hex(16);
  return id;
}

nlohmann::json node_inventory(const AgentConfig& config, const TransportSet& transports,
                              const RegionStore& regions, const std::string& sysfs_root) {
  const auto topology = Topology::scan(sysfs_root);
  nlohmann::json out;
  out["node"] = config.node_name;
  out["instance"] = instance_id();
  out["version"] = kAgentVersion;
  out["fabric"] = fabric_json(transports);
  out["cuda"] = cuda_json();
  out["topology"] = topology ? topology->to_json() : nlohmann::json(nullptr);
  if (topology) out["topology"]["nicChoice"] = nic_choice(*topology);
  if (config.link_bytes_per_second > 0) out["linkBytesPerSecond"] = config.link_bytes_per_second;
  out["memory"] = {
      {"cap", regions.cap()}, {"used", regions.used_bytes()}, {"pooled", regions.pool().held_bytes()}};
  out["checks"] = nlohmann::json::array({rdma_check(sysfs_root, "/dev/infiniband"), gpu_check(topology),
                                         memlock_check(regions.cap()), ipc_lock_check(),
                                         ibverbs_check(transports, config.data_plane.ibverbs)});
  return out;
}

}  // namespace conduit::agent
