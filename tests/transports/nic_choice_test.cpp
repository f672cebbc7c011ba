// NIC choice on fake sysfs trees shaped like real GPU servers: the rails for a region go over the NICs
// nearest its memory, and only those unless asked otherwise.
#include "conduit/nic_choice.h"

#include <gtest/gtest.h>

#include "fake_sysfs.h"

namespace conduit {
namespace {

using conduit::testing::FakeSysfs;
using Names = std::vector<std::string>;

Topology scan(const FakeSysfs& sysfs) {
  auto t = Topology::scan(sysfs.root());
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(t).value() : Topology{};
}

TEST(NicChoice, EightGpuServerPairsEachGpuWithTheNicBelowItsSwitch) {
  FakeSysfs sysfs("dgx");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  ASSERT_EQ(topology.gpus.size(), 8u);
  ASSERT_EQ(topology.nics.size(), 8u);
  for (std::size_t i = 0; i < topology.gpus.size(); ++i) {
    const auto choice = choose_nics(topology, {topology.gpus[i].pci_address, -1});
    ASSERT_TRUE(choice) << choice.error().message;
    EXPECT_EQ(choice->nics, Names{"mlx5_" + std::to_string(i)}) << choice->why;
    EXPECT_EQ(choice->distance, PcieDistance::SameSwitch);
  }
}

TEST(NicChoice, AllNicsNearestFirstWhenAskedCrossSocketLast) {
  FakeSysfs sysfs("dgx-all");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  const auto choice = choose_nics(topology, {topology.gpus[0].pci_address, -1}, {"infiniband", false});
  ASSERT_TRUE(choice) << choice.error().message;
  ASSERT_EQ(choice->nics.size(), 8u);
  EXPECT_EQ(choice->nics[0], "mlx5_0");
  // Then the other three of socket 0 (same root complex), then socket 1's four.
  EXPECT_EQ(Names(choice->nics.begin() + 1, choice->nics.begin() + 4), (Names{"mlx5_1", "mlx5_2", "mlx5_3"}));
  EXPECT_EQ(Names(choice->nics.begin() + 4, choice->nics.end()),
            (Names{"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}));
  EXPECT_EQ(choice->distance, PcieDistance::CrossSocket);
}

TEST(NicChoice, P5LikeServerStripesOverTheFourEfasOfEachGpu) {
  FakeSysfs sysfs("p5");
  sysfs.build_p5_like_server();
  const Topology topology = scan(sysfs);
  ASSERT_EQ(topology.gpus.size(), 8u);
  ASSERT_EQ(topology.nics.size(), 32u);
  for (std::size_t i = 0; i < topology.gpus.size(); ++i) {
    const auto choice = choose_nics(topology, {topology.gpus[i].pci_address, -1});
    ASSERT_TRUE(choice) << choice.error().message;
    Names want;
    for (int e = 0; e < 4; ++e) want.push_back("rdmap" + std::to_string(i * 4 + e));
    std::sort(want.begin(), want.end());
    Names got = choice->nics;
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << choice->why;
    EXPECT_EQ(choice->distance, PcieDistance::SameSwitch);
  }
}

TEST(NicChoice, HostMemoryUsesTheNicsOfItsNumaNode) {
  FakeSysfs sysfs("host");
  sysfs.build_p5_like_server();
  const Topology topology = scan(sysfs);
  const auto socket1 = choose_nics(topology, {"", 1});
  ASSERT_TRUE(socket1) << socket1.error().message;
  EXPECT_EQ(socket1->nics.size(), 16u);
  for (const auto& nic : socket1->nics) {
    const int index = std::stoi(nic.substr(5));
    EXPECT_GE(index, 16) << nic << " sits on socket 0";
  }
  const auto unknown = choose_nics(topology, {"", -1});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->nics.size(), 32u) << "no NUMA hint: every NIC is as good as another";
}

TEST(NicChoice, SaysWhyWhenThereIsNothingToChoose) {
  FakeSysfs sysfs("none");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  const auto no_gpu = choose_nics(topology, {"0000:ff:00.0", -1});
  ASSERT_FALSE(no_gpu);
  EXPECT_NE(no_gpu.error().message.find("0000:ff:00.0"), std::string::npos);
  const auto no_net = choose_nics(topology, {"", 0}, {"net", true});
  ASSERT_FALSE(no_net);
  EXPECT_NE(no_net.error().message.find("no net NIC"), std::string::npos) << no_net.error().message;
}

}  // namespace
}  // namespace conduit
