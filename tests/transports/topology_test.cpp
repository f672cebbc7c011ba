#include "conduit/topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fake_sysfs.h"

namespace conduit {
namespace {

namespace fs = std::filesystem;
using conduit::testing::FakeSysfs;

// The fake sysfs tree (tests/support/fake_sysfs.h) under the names these tests use.
class TopologyTest : public ::testing::Test {
 protected:
  TopologyTest()
      : sysfs_(::testing::UnitTest::GetInstance()->current_test_info()->name()), root_(sysfs_.root()) {}

  static void write(const fs::path& file, const std::string& content) { FakeSysfs::write(file, content); }
  static void link(const fs::path& target, const fs::path& at) { FakeSysfs::link(target, at); }
  fs::path pci_device(const std::string& host_bridge, const std::vector<std::string>& chain, int numa) {
    return sysfs_.pci_device(host_bridge, chain, numa);
  }
  void add_nic(const std::string& kind, const std::string& name, const std::string& host_bridge,
               const std::vector<std::string>& chain, int numa) {
    sysfs_.add_nic(kind, name, host_bridge, chain, numa);
  }
  void add_pci_function(const std::string& host_bridge, const std::vector<std::string>& chain, int numa,
                        const std::string& vendor, const std::string& cls, const std::string& device,
                        bool absolute_link = false) {
    sysfs_.add_pci_function(host_bridge, chain, numa, vendor, cls, device, absolute_link);
  }
  void add_gpu(const std::string& host_bridge, const std::vector<std::string>& chain, int numa) {
    sysfs_.add_gpu(host_bridge, chain, numa);
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

  FakeSysfs sysfs_;
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
