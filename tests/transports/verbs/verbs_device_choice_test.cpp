// Which RDMA devices the ibverbs rails open: the ones named, else the ones nearest the memory served, on a
// topology shaped like a two-socket server (GPU and mlx5_0 below one PCIe switch on socket 0, mlx5_1 on
// the same root complex, mlx5_2 on socket 1), and the environment variables that set the options.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "device_choice.h"

namespace conduit::verbs {
namespace {

using Names = std::vector<std::string>;

Topology server() {
  Topology t;
  const std::string s0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";  // a PCIe switch
  t.gpus.push_back(Gpu{"0000:03:00.0", 0x10de, 0x2335, 0, s0 + "/0000:02:00.0/0000:03:00.0"});
  t.nics.push_back(Nic{"mlx5_0", "infiniband", "0000:04:00.0", 0, s0 + "/0000:02:01.0/0000:04:00.0"});
  t.nics.push_back(
      Nic{"mlx5_1", "infiniband", "0000:21:00.0", 0, "/sys/devices/pci0000:00/0000:00:03.0/0000:21:00.0"});
  t.nics.push_back(
      Nic{"mlx5_2", "infiniband", "0000:81:00.0", 1, "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"});
  t.nics.push_back(
      Nic{"eth0", "net", "0000:05:00.0", 0, "/sys/devices/pci0000:00/0000:00:05.0/0000:05:00.0"});
  t.numa_nodes = {0, 1};
  return t;
}

const Names kPresent{"mlx5_2", "mlx5_0", "mlx5_1"};

TEST(VerbsDeviceChoice, NamedDevicesInTheOrderGivenRepeatedOverRails) {
  VerbsOptions o;
  o.devices = {"mlx5_1", "mlx5_0"};
  auto c = choose_devices(kPresent, o, nullptr, 3);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->rails, (Names{"mlx5_1", "mlx5_0", "mlx5_1"}));
}

TEST(VerbsDeviceChoice, AnAbsentNamedDeviceIsNotFoundListingWhatIsThere) {
  VerbsOptions o;
  o.devices = {"mlx5_9"};
  auto c = choose_devices(kPresent, o, nullptr, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::NotFound);
  EXPECT_EQ(c.error().message,
            "RDMA device mlx5_9 not found (RC-capable devices here: mlx5_2, mlx5_0, mlx5_1)");
}

TEST(VerbsDeviceChoice, NoDeviceIsTheNoRdmaDeviceReason) {
  auto c = choose_devices({}, VerbsOptions{}, nullptr, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::Unavailable);
  EXPECT_EQ(c.error().message, "no RDMA device (ibv_get_device_list found none)");
}

TEST(VerbsDeviceChoice, NearAGpuTakesTheNicBelowItsSwitchFirst) {
  const Topology t = server();
  VerbsOptions o;
  o.near = "0000:03:00.0";
  auto c = choose_devices(kPresent, o, &t, 1);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->rails, Names{"mlx5_0"});
  // More rails than NICs in the nearest class: the next nearest join, cross-socket last.
  c = choose_devices(kPresent, o, &t, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rails, (Names{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_0"}));
}

TEST(VerbsDeviceChoice, NearANumaNodeTakesItsNics) {
  const Topology t = server();
  VerbsOptions o;
  o.near = "numa:1";
  auto c = choose_devices(kPresent, o, &t, 1);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->rails, Names{"mlx5_2"});
}

TEST(VerbsDeviceChoice, OnlyDevicesThatRunRcAreChosen) {
  // mlx5_0 is absent from the RC-capable list (say it were an EFA): the next nearest serves.
  const Topology t = server();
  VerbsOptions o;
  o.near = "0000:03:00.0";
  auto c = choose_devices(Names{"mlx5_1", "mlx5_2"}, o, &t, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rails, Names{"mlx5_1"});
}

TEST(VerbsDeviceChoice, UnknownGpuIsAnErrorButNoTopologyFallsBackToNameOrder) {
  const Topology t = server();
  VerbsOptions o;
  o.near = "0000:99:00.0";
  auto c = choose_devices(kPresent, o, &t, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("no GPU at PCI address 0000:99:00.0"), std::string::npos)
      << c.error().message;

  c = choose_devices(kPresent, VerbsOptions{}, nullptr, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rails, (Names{"mlx5_0", "mlx5_1"}));
}

TEST(VerbsDeviceChoice, ParsesNear) {
  EXPECT_EQ(parse_near("numa:3")->numa_node, 3);
  EXPECT_EQ(parse_near("0000:1b:00.0")->gpu_pci, "0000:1b:00.0");
  EXPECT_TRUE(parse_near("")->gpu_pci.empty());
  EXPECT_FALSE(parse_near("numa:").ok());
  EXPECT_FALSE(parse_near("numa:-1").ok());
  EXPECT_FALSE(parse_near("gpu0").ok());
}

class VerbsOptionsEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {"CONDUIT_IB_DEVICES", "CONDUIT_IB_GID_INDEX", "CONDUIT_IB_QPS_PER_PEER",
                             "CONDUIT_IB_SIGNAL_EVERY", "CONDUIT_IB_PORT", "CONDUIT_IB_NEAR"}) {
      unsetenv(name);
    }
  }
};

TEST_F(VerbsOptionsEnv, DefaultsAndOverrides) {
  auto o = VerbsOptions::from_environment();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->devices.empty());
  EXPECT_EQ(o->gid_index, -1);
  EXPECT_EQ(o->qps_per_peer, 2u);

  setenv("CONDUIT_IB_DEVICES", "mlx5_0, mlx5_3,", 1);
  setenv("CONDUIT_IB_GID_INDEX", "3", 1);
  setenv("CONDUIT_IB_QPS_PER_PEER", "4", 1);
  setenv("CONDUIT_IB_NEAR", "numa:1", 1);
  o = VerbsOptions::from_environment();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->devices, (Names{"mlx5_0", "mlx5_3"}));
  EXPECT_EQ(o->gid_index, 3);
  EXPECT_EQ(o->qps_per_peer, 4u);
  EXPECT_EQ(o->near, "numa:1");
}

TEST_F(VerbsOptionsEnv, BadValuesNameTheVariable) {
  setenv("CONDUIT_IB_SIGNAL_EVERY", "0", 1);
  auto o = VerbsOptions::from_environment();
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error().message, "CONDUIT_IB_SIGNAL_EVERY=\"0\": want an integer in 1..32768");
  unsetenv("CONDUIT_IB_SIGNAL_EVERY");
  setenv("CONDUIT_IB_PORT", "one", 1);
  o = VerbsOptions::from_environment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message.find("CONDUIT_IB_PORT"), std::string::npos);
}

}  // namespace
}  // namespace conduit::verbs
