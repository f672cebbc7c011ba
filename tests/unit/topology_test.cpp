#include "conduit/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace conduit {
namespace {

namespace fs = std::filesystem;

// Builds a fake sysfs tree the way the kernel lays it out: real device directories under devices/, and the
// class/ and bus/ views as symlinks into them.
class TopologyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("conduit-topology-" + std::string(info->name()) + "-" + std::to_string(::getpid()) + "-" +
             std::to_string(std::random_device{}()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const fs::path& file, const std::string& content) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << content << "\n";
  }
  static void link(const fs::path& target, const fs::path& at) {
    fs::create_directories(at.parent_path());
    fs::create_symlink(target, at);
  }

  // `chain` runs from the root port to the device, e.g. {"0000:00:01.0", "0000:01:00.0"}.
  fs::path pci_device(const std::string& host_bridge, const std::vector<std::string>& chain, int numa) {
    fs::path rel = fs::path("devices") / host_bridge;
    for (const auto& dev : chain) rel /= dev;
    write(root_ / rel / "numa_node", std::to_string(numa));
    return rel;
  }

  // Mirrors /sys/class/<kind>/<name> -> ../../devices/.../<kind>/<name>, whose device -> ../../../<pci>.
  void add_nic(const std::string& kind, const std::string& name, const std::string& host_bridge,
               const std::vector<std::string>& chain, int numa) {
    const fs::path dev = pci_device(host_bridge, chain, numa);
    const fs::path iface = dev / kind / name;
    link(fs::path("../../..") / chain.back(), root_ / iface / "device");
    link(fs::path("../..") / iface, root_ / "class" / kind / name);
  }

  void add_pci_function(const std::string& host_bridge, const std::vector<std::string>& chain, int numa,
                        const std::string& vendor, const std::string& cls, const std::string& device,
                        bool absolute_link = false) {
    const fs::path dev = pci_device(host_bridge, chain, numa);
    write(root_ / dev / "vendor", vendor);
    write(root_ / dev / "class", cls);
    write(root_ / dev / "device", device);
    const fs::path at = root_ / "bus" / "pci" / "devices" / chain.back();
    link(absolute_link ? root_ / dev : fs::path("../../..") / dev, at);
  }

  void add_gpu(const std::string& host_bridge, const std::vector<std::string>& chain, int numa) {
    add_pci_function(host_bridge, chain, numa, "0x10de", "0x030200", "0x2330");
  }

  // Socket 0: root pci0000:00 with a PCIe switch (upstream 01:00.0) holding mlx5_0, eth0 and one GPU, plus a
  // GPU on a second root port. Socket 0 also owns root pci0000:80; socket 1 owns pci0000:c0.
  void build_two_socket_machine() {
    add_nic("infiniband", "mlx5_0", "pci0000:00",
            {"0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}, 0);
    add_nic("net", "eth0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"}, 0);
    add_gpu("pci0000:00", {"0000:00:01.0", "0000:01:00.0", "0000:02:02.0", "0000:05:00.0"}, 0);
    add_gpu("pci0000:00", {"0000:00:02.0", "0000:06:00.0"}, 0);
    add_gpu("pci0000:80", {"0000:80:01.0", "0000:81:00.0"}, 0);
    add_gpu("pci0000:c0", {"0000:c0:01.0", "0000:c1:00.0"}, 1);
    fs::create_directories(root_ / "devices/system/node/node0");
    fs::create_directories(root_ / "devices/system/node/node1");
  }

  Topology scan() {
    auto topology = Topology::scan(root_);
    EXPECT_TRUE(topology.ok()) << topology.error().message;
    return topology.ok() ? std::move(topology).value() : Topology{};
  }

  static std::string distance(const Topology& topology, const std::string& gpu, const std::string& nic) {
    for (const auto& d : topology.distances()) {
      if (d.gpu == gpu && d.nic == nic) return std::string(to_string(d.distance));
    }
    return "missing";
  }

  fs::path root_;
};

TEST_F(TopologyTest, FindsNicsWithResolvedPciDevices) {
  build_two_socket_machine();
  const Topology topology = scan();

  ASSERT_EQ(topology.nics.size(), 2u);
  const Nic& ib = topology.nics[0];
  EXPECT_EQ(ib.name, "mlx5_0");
  EXPECT_EQ(ib.kind, "infiniband");
  EXPECT_EQ(ib.pci_address, "0000:03:00.0");
  EXPECT_EQ(ib.numa_node, 0);
  EXPECT_EQ(ib.device_path,
            fs::canonical(root_ / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"));
  EXPECT_EQ(topology.nics[1].name, "eth0");
  EXPECT_EQ(topology.nics[1].kind, "net");
  EXPECT_EQ(topology.nics[1].pci_address, "0000:04:00.0");

  ASSERT_EQ(topology.gpus.size(), 4u);
  EXPECT_EQ(topology.gpus[0].pci_address, "0000:05:00.0");
  EXPECT_EQ(topology.gpus[0].vendor_id, 0x10de);
  EXPECT_EQ(topology.gpus[0].device_id, 0x2330);
  EXPECT_EQ(topology.gpus[3].numa_node, 1);
}

TEST_F(TopologyTest, GpuBehindTheNicsSwitchIsSameSwitch) {
  build_two_socket_machine();
  const Topology topology = scan();
  EXPECT_EQ(distance(topology, "0000:05:00.0", "mlx5_0"), "SameSwitch");
  EXPECT_EQ(distance(topology, "0000:05:00.0", "eth0"), "SameSwitch");
}

TEST_F(TopologyTest, GpuOnAnotherRootPortIsSameRootComplex) {
  build_two_socket_machine();
  EXPECT_EQ(distance(scan(), "0000:06:00.0", "mlx5_0"), "SameRootComplex");
}

TEST_F(TopologyTest, GpuOnAnotherRootOfTheSameSocketIsSameNumaNode) {
  build_two_socket_machine();
  EXPECT_EQ(distance(scan(), "0000:81:00.0", "mlx5_0"), "SameNumaNode");
}

TEST_F(TopologyTest, GpuOnTheOtherSocketIsCrossSocket) {
  build_two_socket_machine();
  const Topology topology = scan();
  EXPECT_EQ(distance(topology, "0000:c1:00.0", "mlx5_0"), "CrossSocket");
  EXPECT_EQ(topology.distances().size(), 8u);
}

TEST_F(TopologyTest, SkipsVirtualInterfacesAndNonGpuFunctions) {
  add_nic("net", "eth0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0"}, 0);
  link("../../devices/virtual/net/lo", root_ / "class/net/lo");
  fs::create_directories(root_ / "devices/virtual/net/lo");
  write(root_ / "class/net/bonding_masters", "");
  add_gpu("pci0000:00", {"0000:00:02.0", "0000:02:00.0"}, 0);
  add_pci_function("pci0000:00", {"0000:00:02.0", "0000:02:00.1"}, 0, "0x10de", "0x040300",
                   "0x22ba");  // audio
  add_pci_function("pci0000:00", {"0000:00:03.0", "0000:03:00.0"}, 0, "0x1a03", "0x030000",
                   "0x2000");  // BMC VGA

  const Topology topology = scan();
  ASSERT_EQ(topology.nics.size(), 1u);
  EXPECT_EQ(topology.nics[0].name, "eth0");
  ASSERT_EQ(topology.gpus.size(), 1u);
  EXPECT_EQ(topology.gpus[0].pci_address, "0000:02:00.0");
}

TEST_F(TopologyTest, FollowsAbsoluteSymlinksInsideTheRoot) {
  add_pci_function("pci0000:00", {"0000:00:01.0", "0000:01:00.0"}, 1, "0x10de", "0x030200", "0x2330",
                   /*absolute_link=*/true);
  const Topology topology = scan();
  ASSERT_EQ(topology.gpus.size(), 1u);
  EXPECT_EQ(topology.gpus[0].numa_node, 1);
  EXPECT_EQ(topology.gpus[0].device_path,
            fs::canonical(root_ / "devices/pci0000:00/0000:00:01.0/0000:01:00.0"));
}

TEST_F(TopologyTest, NicBelowAPciFunctionTakesItsNumaNodeButNoAddress) {
  // virtio-net: class/net/eth0/device -> .../0000:00:03.0/virtio2, which has no numa_node of its own.
  const fs::path pci = pci_device("pci0000:00", {"0000:00:03.0"}, 1);
  fs::create_directories(root_ / pci / "virtio2/net/eth0");
  link("../../../virtio2", root_ / pci / "virtio2/net/eth0/device");
  link(fs::path("../..") / pci / "virtio2/net/eth0", root_ / "class/net/eth0");

  const Topology topology = scan();
  ASSERT_EQ(topology.nics.size(), 1u);
  EXPECT_EQ(topology.nics[0].pci_address, "");
  EXPECT_EQ(topology.nics[0].numa_node, 1);
}

TEST_F(TopologyTest, NumaNodesAreSortedNumerically) {
  for (const char* node : {"node10", "node1", "node0"})
    fs::create_directories(root_ / "devices/system/node" / node);
  fs::create_directories(root_ / "devices/system/node/power");
  write(root_ / "devices/system/node/online", "0-1,10");
  write(root_ / "devices/system/node/node7", "a file, not a node");
  EXPECT_EQ(scan().numa_nodes, (std::vector<int>{0, 1, 10}));
}

TEST_F(TopologyTest, EmptyRootGivesEmptyLists) {
  const Topology topology = scan();
  EXPECT_TRUE(topology.nics.empty());
  EXPECT_TRUE(topology.gpus.empty());
  EXPECT_TRUE(topology.numa_nodes.empty());
}

TEST_F(TopologyTest, MissingRootIsNotFound) {
  const fs::path missing = root_ / "no-such-sysfs";
  const auto topology = Topology::scan(missing);
  ASSERT_FALSE(topology.ok());
  EXPECT_EQ(topology.error().code, ErrorCode::NotFound);
  EXPECT_NE(topology.error().message.find(missing.string()), std::string::npos) << topology.error().message;
}

TEST_F(TopologyTest, JsonCarriesTheDistanceTable) {
  build_two_socket_machine();
  const nlohmann::json json = scan().to_json();
  EXPECT_EQ(json["nics"][0]["name"], "mlx5_0");
  EXPECT_EQ(json["nics"][0]["pciAddress"], "0000:03:00.0");
  EXPECT_EQ(json["gpus"][0]["vendorId"], "0x10de");
  EXPECT_EQ(json["numaNodes"], nlohmann::json({0, 1}));
  ASSERT_EQ(json["distances"].size(), 8u);
  EXPECT_EQ(json["distances"][0],
            nlohmann::json({{"gpu", "0000:05:00.0"}, {"nic", "mlx5_0"}, {"distance", "SameSwitch"}}));
}

TEST(TopologyRealSysfs, ScanSucceeds) {
  const auto topology = Topology::scan("/sys");
  ASSERT_TRUE(topology.ok()) << topology.error().message;
}

}  // namespace
}  // namespace conduit
