// Which rails a region is registered on, on fake sysfs trees shaped like real GPU servers: the rails whose
// NIC is nearest the region's memory, every rail when asked or when nothing is known about the rails' NICs.
#include "conduit/rail_choice.h"

#include <gtest/gtest.h>

#include "conduit/transport.h"
#include "fake_sysfs.h"
#include "provider.h"

namespace conduit {
namespace {

using conduit::testing::FakeSysfs;
using Names = std::vector<std::string>;
using Rails = std::vector<std::uint32_t>;

Topology scan(const FakeSysfs& sysfs) {
  auto t = Topology::scan(sysfs.root());
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(t).value() : Topology{};
}

Result<NicChoice> ranked(const Topology& topology, const MemoryPlace& place) {
  return choose_nics(topology, place, {"infiniband", /*best_class_only=*/false});
}

// One rail per NIC, rail i on NIC i: how efa and verbs;ofi_rxm deal their fi_getinfo domains.
Names one_rail_per_nic(const Topology& topology) {
  Names rails;
  for (const auto& nic : topology.nics) rails.push_back(nic.name);
  return rails;
}

TEST(RailChoice, EightGpuServerRegistersEachGpuOnTheRailBelowItsSwitch) {
  FakeSysfs sysfs("rails-dgx");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  const Names rail_nics = one_rail_per_nic(topology);
  ASSERT_EQ(rail_nics.size(), 8u);
  for (std::uint32_t i = 0; i < 8; ++i) {
    const RailChoice c = choose_rails(rail_nics, ranked(topology, {topology.gpus[i].pci_address, -1}));
    EXPECT_EQ(c.rails, Rails{i}) << c.why;
    EXPECT_EQ(c.nics, Names{"mlx5_" + std::to_string(i)});
    EXPECT_FALSE(c.all);
    EXPECT_NE(c.why.find("SameSwitch"), std::string::npos) << c.why;
  }
}

TEST(RailChoice, HostMemoryUsesTheRailsOfItsSocket) {
  FakeSysfs sysfs("rails-dgx-host");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  const Names rail_nics = one_rail_per_nic(topology);
  EXPECT_EQ(choose_rails(rail_nics, ranked(topology, {"", 0})).rails, (Rails{0, 1, 2, 3}));
  EXPECT_EQ(choose_rails(rail_nics, ranked(topology, {"", 1})).rails, (Rails{4, 5, 6, 7}));
  const RailChoice unknown = choose_rails(rail_nics, ranked(topology, {"", -1}));
  EXPECT_EQ(unknown.rails.size(), 8u) << "no NUMA hint: every rail is as near as another";
  EXPECT_TRUE(unknown.all);
}

TEST(RailChoice, P5LikeServerStripesOverTheFourEfasOfEachGpu) {
  FakeSysfs sysfs("rails-p5");
  sysfs.build_p5_like_server();
  const Topology topology = scan(sysfs);
  const Names rail_nics = one_rail_per_nic(topology);  // sorted by name: rdmap0, rdmap1, rdmap10, ...
  ASSERT_EQ(rail_nics.size(), 32u);
  for (std::size_t i = 0; i < 8; ++i) {
    const RailChoice c = choose_rails(rail_nics, ranked(topology, {topology.gpus[i].pci_address, -1}));
    ASSERT_EQ(c.rails.size(), 4u) << c.why;
    Names want;
    for (int e = 0; e < 4; ++e) want.push_back("rdmap" + std::to_string(i * 4 + e));
    Names got;
    for (const std::uint32_t r : c.rails) got.push_back(rail_nics[r]);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
    EXPECT_TRUE(std::is_sorted(c.rails.begin(), c.rails.end()));
  }
}

TEST(RailChoice, FewerRailsThanNicsTakeTheNearestClassAmongThemAndRepeatedNics) {
  FakeSysfs sysfs("rails-dgx-few");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  // Four rails dealt over mlx5_0 and mlx5_4 (two rails each). GPU 1's own NIC carries no rail: mlx5_0,
  // under the same root complex, beats mlx5_4 across the socket link.
  const Names rail_nics{"mlx5_0", "mlx5_4", "mlx5_0", "mlx5_4"};
  const RailChoice gpu1 = choose_rails(rail_nics, ranked(topology, {topology.gpus[1].pci_address, -1}));
  EXPECT_EQ(gpu1.rails, (Rails{0, 2})) << gpu1.why;
  EXPECT_EQ(gpu1.nics, Names{"mlx5_0"});
  EXPECT_NE(gpu1.why.find("SameRootComplex"), std::string::npos) << gpu1.why;
  const RailChoice gpu6 = choose_rails(rail_nics, ranked(topology, {topology.gpus[6].pci_address, -1}));
  EXPECT_EQ(gpu6.rails, (Rails{1, 3})) << gpu6.why;
}

TEST(RailChoice, EveryRailWhenAskedOrWhenNothingIsKnown) {
  FakeSysfs sysfs("rails-fallback");
  sysfs.build_eight_gpu_eight_nic_server();
  const Topology topology = scan(sysfs);
  const Names rail_nics = one_rail_per_nic(topology);
  const MemoryPlace gpu0{topology.gpus[0].pci_address, -1};

  const RailChoice all = choose_rails(rail_nics, ranked(topology, gpu0), RailPolicy::All);
  EXPECT_EQ(all.rails.size(), 8u);
  EXPECT_TRUE(all.all);
  EXPECT_EQ(all.nics.size(), 8u);
  EXPECT_NE(all.why.find("asked"), std::string::npos) << all.why;

  // Rails on NICs this topology has never heard of (another node's names, a renamed device).
  const RailChoice strangers = choose_rails(Names{"mlx5_9", "mlx5_10"}, ranked(topology, gpu0));
  EXPECT_EQ(strangers.rails, (Rails{0, 1}));
  EXPECT_NE(strangers.why.find("knows none"), std::string::npos) << strangers.why;

  // The memory could not be placed (a GPU the topology lacks): every rail, with the reason.
  const RailChoice lost = choose_rails(rail_nics, ranked(topology, {"0000:ff:00.0", -1}));
  EXPECT_EQ(lost.rails.size(), 8u);
  EXPECT_NE(lost.why.find("0000:ff:00.0"), std::string::npos) << lost.why;

  // tcp and shm: all rails on one interface, no NIC names, nothing to choose.
  const RailChoice tcp = choose_rails(Names{}, ranked(topology, gpu0));
  EXPECT_TRUE(tcp.rails.empty());
  const RailChoice tcp3 = choose_rails(Names{"", "", ""}, ranked(topology, gpu0));
  EXPECT_EQ(tcp3.rails, (Rails{0, 1, 2}));
  EXPECT_TRUE(tcp3.nics.empty());
  EXPECT_NE(tcp3.why.find("one interface"), std::string::npos) << tcp3.why;
}

TEST(RailChoice, LibfabricDomainNamesMapToTheNicsTopologyKnows) {
  EXPECT_EQ(fabric::nic_of_domain("efa", "rdmap16s27-rdm"), "rdmap16s27");
  EXPECT_EQ(fabric::nic_of_domain("efa", "rdmap16s27-dgrm"), "rdmap16s27");
  EXPECT_EQ(fabric::nic_of_domain("verbs;ofi_rxm", "mlx5_0"), "mlx5_0");
  EXPECT_EQ(fabric::nic_of_domain("verbs;ofi_rxm", "mlx5_3-xrc"), "mlx5_3");
  EXPECT_EQ(fabric::nic_of_domain("tcp;ofi_rxm", "eth0"), "") << "tcp rails share one interface";
  EXPECT_EQ(fabric::nic_of_domain("shm", "shm"), "");
}

TEST(RegistrationRails, EmptyMeansEveryRailAndBadListsAreRefused) {
  EXPECT_EQ(*registration_rails({}, 3), (Rails{0, 1, 2}));
  const Rails some{1, 2};
  EXPECT_EQ(*registration_rails(some, 3), some);
  const Rails out_of_range{0, 3};
  EXPECT_FALSE(registration_rails(out_of_range, 3));
  const Rails unsorted{2, 1};
  EXPECT_FALSE(registration_rails(unsorted, 3));
  const Rails repeated{1, 1};
  EXPECT_FALSE(registration_rails(repeated, 3));
}

}  // namespace
}  // namespace conduit
