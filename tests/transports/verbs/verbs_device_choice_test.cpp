// Which RDMA devices the ibverbs rails open: the ones named, else the ones nearest the memory served, on a
// topology shaped like a two-socket server (GPU and mlx5_0 below one PCIe switch on socket 0, mlx5_1 on
// the same root complex, mlx5_2 on socket 1), and the settings (conduit/data_plane_settings.h: the agent's
// --ib-* options and CONDUIT_IB_* variables, conduit-bench's flags) that fill the options.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "conduit/data_plane_settings.h"
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

// Sets one setting from its text, as the agent and conduit-bench do.
Status set(DataPlaneSettings& s, std::string_view name, const std::string& text) {
  for (const DataPlaneSetting& setting : data_plane_settings()) {
    if (setting.name == name) return setting.apply(s, text);
  }
  return make_error(ErrorCode::NotFound, "no setting " + std::string(name));
}

TEST(VerbsSettings, DefaultsAndOverrides) {
  DataPlaneSettings s;
  const VerbsOptions& o = s.ibverbs;
  EXPECT_TRUE(o.devices.empty());
  EXPECT_EQ(o.gid_index, -1);
  EXPECT_EQ(o.qps_per_peer, 2u);

  ASSERT_TRUE(set(s, "ib-devices", "mlx5_0, mlx5_3,").ok());
  ASSERT_TRUE(set(s, "ib-gid-index", "3").ok());
  ASSERT_TRUE(set(s, "ib-qps-per-peer", "4").ok());
  ASSERT_TRUE(set(s, "ib-near", "numa:1").ok());
  EXPECT_EQ(o.devices, (Names{"mlx5_0", "mlx5_3"}));
  EXPECT_EQ(o.gid_index, 3);
  EXPECT_EQ(o.qps_per_peer, 4u);
  EXPECT_EQ(o.near, "numa:1");
  // What a transport is opened with.
  EXPECT_EQ(s.applied_to({}).ibverbs.devices, (Names{"mlx5_0", "mlx5_3"}));
}

TEST(VerbsSettings, BadValuesSayWhatIsWanted) {
  DataPlaneSettings s;
  Status bad = set(s, "ib-signal-every", "0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(bad.error().message, "want an integer in 1..32768, got \"0\"");
  bad = set(s, "ib-port", "one");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "want an integer in 1..255, got \"one\"");
  bad = set(s, "ib-near", "gpu0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("want a GPU's PCI address"), std::string::npos) << bad.error().message;
  EXPECT_EQ(s.ibverbs.signal_every, 16u);  // a refused value changes nothing
  EXPECT_EQ(s.ibverbs.port, 1);
  EXPECT_TRUE(s.ibverbs.near.empty());
}

// Every range the table accepts is one VerbsOptions::validate() accepts too: a setting the agent took never
// fails when the transport opens.
TEST(VerbsSettings, TheTableAndValidateAgree) {
  for (const auto& [name, low, high] :
       std::vector<std::tuple<const char*, long, long>>{{"ib-port", 1, 255},
                                                        {"ib-gid-index", -1, 255},
                                                        {"ib-qps-per-peer", 1, 64},
                                                        {"ib-sq-depth", 2, 32768},
                                                        {"ib-signal-every", 1, 32768},
                                                        {"ib-traffic-class", 0, 255},
                                                        {"ib-sl", 0, 15},
                                                        {"ib-timeout", 1, 31},
                                                        {"ib-retry-count", 0, 7}}) {
    for (const long v : {low, high}) {
      DataPlaneSettings s;
      ASSERT_TRUE(set(s, name, std::to_string(v)).ok()) << name << "=" << v;
      EXPECT_TRUE(s.ibverbs.validate().ok()) << name << "=" << v;
    }
    for (const long v : {low - 1, high + 1}) {
      DataPlaneSettings s;
      EXPECT_FALSE(set(s, name, std::to_string(v)).ok()) << name << "=" << v;
    }
  }
}

}  // namespace
}  // namespace conduit::verbs
