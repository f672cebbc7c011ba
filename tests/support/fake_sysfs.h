// A fake sysfs tree laid out the way the kernel lays it out: real device directories under devices/, the
// class/ and bus/ views as symlinks into them. Topology::scan reads it as it reads /sys. Also the shapes of
// real GPU servers, for tests of what is chosen on them.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace conduit::testing {

class FakeSysfs {
 public:
  explicit FakeSysfs(const std::string& tag)
      : root_(std::filesystem::temp_directory_path() /
              ("conduit-sysfs-" + tag + "-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(root_);
  }
  ~FakeSysfs() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::filesystem::path& root() const { return root_; }

  static void write(const std::filesystem::path& file, const std::string& content) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << content << "\n";
  }
  static void link(const std::filesystem::path& target, const std::filesystem::path& at) {
    std::filesystem::create_directories(at.parent_path());
    std::filesystem::create_symlink(target, at);
  }

  // `chain` runs from the root port to the device, e.g. {"0000:00:01.0", "0000:01:00.0"}.
  std::filesystem::path pci_device(const std::string& host_bridge, const std::vector<std::string>& chain,
                                   int numa) {
    std::filesystem::path rel = std::filesystem::path("devices") / host_bridge;
    for (const auto& dev : chain) rel /= dev;
    write(root_ / rel / "numa_node", std::to_string(numa));
    return rel;
  }

  // Mirrors /sys/class/<kind>/<name> -> ../../devices/.../<kind>/<name>, whose device -> ../../../<pci>.
  void add_nic(const std::string& kind, const std::string& name, const std::string& host_bridge,
               const std::vector<std::string>& chain, int numa) {
    const std::filesystem::path dev = pci_device(host_bridge, chain, numa);
    const std::filesystem::path iface = dev / kind / name;
    link(std::filesystem::path("../../..") / chain.back(), root_ / iface / "device");
    link(std::filesystem::path("../..") / iface, root_ / "class" / kind / name);
  }

  void add_pci_function(const std::string& host_bridge, const std::vector<std::string>& chain, int numa,
                        const std::string& vendor, const std::string& cls, const std::string& device,
                        bool absolute_link = false) {
    const std::filesystem::path dev = pci_device(host_bridge, chain, numa);
    write(root_ / dev / "vendor", vendor);
    write(root_ / dev / "class", cls);
    write(root_ / dev / "device", device);
    const std::filesystem::path at = root_ / "bus" / "pci" / "devices" / chain.back();
    link(absolute_link ? root_ / dev : std::filesystem::path("../../..") / dev, at);
  }

  void add_gpu(const std::string& host_bridge, const std::vector<std::string>& chain, int numa) {
    add_pci_function(host_bridge, chain, numa, "0x10de", "0x030200", "0x2330");
  }

  void add_numa_nodes(int n) {
    for (int i = 0; i < n; ++i)
      std::filesystem::create_directories(root_ / "devices/system/node" / ("node" + std::to_string(i)));
  }

  // An 8-GPU, 8-NIC, 2-socket server (DGX H100-like): four PCIe switches per socket's root complexes, each
  // switch holding one GPU and one ConnectX NIC. GPU i (PCI bus 0x1N/0x9N) shares its switch with mlx5_i.
  void build_eight_gpu_eight_nic_server() {
    for (int i = 0; i < 8; ++i) {
      const int socket = i / 4;
      const std::string bridge = socket == 0 ? "pci0000:00" : "pci0000:80";
      const int base = (socket == 0 ? 0x10 : 0x90) + (i % 4) * 0x08;
      const std::string root_port = hex_bdf(socket == 0 ? 0x00 : 0x80, 1 + i % 4);
      const std::string upstream = hex_bdf(base, 0);
      const std::string down_nic = hex_bdf(base + 1, 0);
      const std::string down_gpu = hex_bdf(base + 1, 1);
      add_nic("infiniband", "mlx5_" + std::to_string(i), bridge,
              {root_port, upstream, down_nic, hex_bdf(base + 2, 0)}, socket);
      add_gpu(bridge, {root_port, upstream, down_gpu, hex_bdf(base + 3, 0)}, socket);
    }
    add_numa_nodes(2);
  }

  // An AWS p5.48xlarge-like layout: 8 GPUs and 32 EFA devices (rdmap*), four EFAs under each GPU's PCIe
  // switch, GPUs 0-3 on socket 0 and 4-7 on socket 1.
  void build_p5_like_server() {
    for (int i = 0; i < 8; ++i) {
      const int socket = i / 4;
      const std::string bridge = "pci0000:" + hex2(0x10 * (i + 1));
      const int base = 0x10 * (i + 1);
      const std::string root_port = hex_bdf(base, 1);
      const std::string upstream = hex_bdf(base + 1, 0);
      add_gpu(bridge, {root_port, upstream, hex_bdf(base + 2, 0), hex_bdf(base + 3, 0)}, socket);
      for (int e = 0; e < 4; ++e) {
        const int efa = i * 4 + e;
        add_nic("infiniband", "rdmap" + std::to_string(efa), bridge,
                {root_port, upstream, hex_bdf(base + 2, 1 + e), hex_bdf(base + 4 + e, 0)}, socket);
      }
    }
    add_numa_nodes(2);
  }

 private:
  static std::string hex2(int v) {
    char b[8];
    std::snprintf(b, sizeof b, "%02x", v & 0xff);
    return b;
  }
  // "0000:BB:DD.0" for bus BB and device DD.
  static std::string hex_bdf(int bus, int device) {
    char b[32];
    std::snprintf(b, sizeof b, "0000:%02x:%02x.0", bus & 0xff, device & 0x1f);
    return b;
  }

  std::filesystem::path root_;
};

}  // namespace conduit::testing
