// MTU negotiation and GID choice, from fake GID tables and a fake sysfs tree shaped like a ConnectX port
// with IPv4 and IPv6 addresses on its netdev.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "link.h"

namespace conduit::verbs {
namespace {

namespace fs = std::filesystem;

Gid gid(std::string_view text) {
  auto g = parse_gid(text);
  EXPECT_TRUE(g.ok()) << text;
  return g.ok() ? *g : Gid{};
}

GidEntry entry(int index, std::string_view text, GidType type, std::string netdev = "eth2") {
  return GidEntry{index, gid(text), type, std::move(netdev)};
}

// What a RoCE port with 10.0.0.5 and fd00::5 on its netdev shows: each address twice (v1 and v2),
// link-local first.
std::vector<GidEntry> roce_table() {
  return {
      entry(0, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", GidType::IbRoceV1),
      entry(1, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", GidType::RoceV2),
      entry(2, "0000:0000:0000:0000:0000:ffff:0a00:0005", GidType::IbRoceV1),
      entry(3, "0000:0000:0000:0000:0000:ffff:0a00:0005", GidType::RoceV2),
      entry(4, "fd00:0000:0000:0000:0000:0000:0000:0005", GidType::IbRoceV1),
      entry(5, "fd00:0000:0000:0000:0000:0000:0000:0005", GidType::RoceV2),
  };
}

TEST(VerbsMtu, CodesAndBytes) {
  EXPECT_EQ(mtu_bytes(1), 256u);
  EXPECT_EQ(mtu_bytes(3), 1024u);
  EXPECT_EQ(mtu_bytes(5), 4096u);
  EXPECT_EQ(mtu_bytes(0), 0u);
  EXPECT_EQ(mtu_bytes(6), 0u);
  EXPECT_EQ(mtu_code(2048), 4);
  EXPECT_EQ(mtu_code(1500), 0);
}

TEST(VerbsMtu, NegotiatesTheLowerOfBothPorts) {
  EXPECT_EQ(*negotiate_mtu(5, 3), 3);  // a 4096 IB port and a RoCE port on a 1500-byte netdev
  EXPECT_EQ(*negotiate_mtu(3, 5), 3);
  EXPECT_EQ(*negotiate_mtu(4, 4), 4);
  EXPECT_EQ(*negotiate_mtu(1, 5), 1);
  auto bad = negotiate_mtu(5, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "peer MTU code 0 is not 1..5");
  EXPECT_FALSE(negotiate_mtu(9, 3).ok());
}

TEST(VerbsGid, ParsesAndFormatsTheSysfsForm) {
  const std::string text = "fe80:0000:0000:0000:0202:c9ff:fe00:0001";
  auto g = parse_gid(text + "\n");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)[0], 0xfe);
  EXPECT_EQ((*g)[15], 0x01);
  EXPECT_EQ(format_gid(*g), text);
  EXPECT_TRUE(is_link_local(*g));
  EXPECT_FALSE(is_ipv4_mapped(*g));
  EXPECT_FALSE(parse_gid("fe80::1").ok());
  EXPECT_FALSE(parse_gid("fe80:0000:0000:0000:0202:c9ff:fe00:00zz").ok());
  EXPECT_FALSE(parse_gid("fe80-0000:0000:0000:0202:c9ff:fe00:0001").ok());

  const Gid v4 = gid("0000:0000:0000:0000:0000:ffff:c0a8:0102");
  EXPECT_TRUE(is_ipv4_mapped(v4));
  EXPECT_EQ(ipv4_of(v4), "192.168.1.2");
  EXPECT_EQ(ipv4_of(*g), "");
  EXPECT_TRUE(is_zero(Gid{}));
}

TEST(VerbsGid, AutomaticChoicePrefersRoceV2WithIpv4) {
  const auto table = roce_table();
  auto choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->entry.index, 3);
  EXPECT_EQ(choice->entry.type, GidType::RoceV2);
  EXPECT_EQ(choice->why, "GID 3: RoCE v2 ::ffff:10.0.0.5 on eth2 (automatic)");
}

TEST(VerbsGid, WithoutIpv4ThenGlobalIpv6ThenLinkLocalThenV1) {
  auto table = roce_table();
  table.erase(table.begin() + 3);  // no RoCE v2 IPv4
  auto choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 5);
  EXPECT_NE(choice->why.find("no RoCE v2 GID with an IPv4 address"), std::string::npos) << choice->why;

  table.pop_back();  // no global IPv6 v2 either
  choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 1);

  const std::vector<GidEntry> v1_only = {
      entry(0, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", GidType::IbRoceV1),
      entry(2, "0000:0000:0000:0000:0000:ffff:0a00:0005", GidType::IbRoceV1)};
  choice = select_gid(v1_only, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 0);
  EXPECT_NE(choice->why.find("no RoCE v2 GID"), std::string::npos) << choice->why;
}

TEST(VerbsGid, TiesGoToTheLowestIndexWhateverTheTableOrder) {
  std::vector<GidEntry> table = {entry(7, "0000:0000:0000:0000:0000:ffff:0a00:0007", GidType::RoceV2),
                                 entry(3, "0000:0000:0000:0000:0000:ffff:0a00:0005", GidType::RoceV2)};
  auto choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 3);
}

TEST(VerbsGid, EmptyEntriesAreNeverChosen) {
  std::vector<GidEntry> table = {GidEntry{0, Gid{}, GidType::RoceV2, ""},
                                 entry(1, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", GidType::IbRoceV1)};
  auto choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 1);
  auto none = select_gid(std::vector<GidEntry>{GidEntry{}}, LinkLayer::Ethernet);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::NotFound);
  EXPECT_FALSE(select_gid({}, LinkLayer::Ethernet).ok());
}

TEST(VerbsGid, ForcedIndexWinsAndAnEmptyOneIsRefusedListingTheValidOnes) {
  const auto table = roce_table();
  auto choice = select_gid(table, LinkLayer::Ethernet, 2);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 2);
  EXPECT_EQ(choice->why, "GID 2: IB/RoCE v1 ::ffff:10.0.0.5 on eth2 (asked for)");

  auto absent = select_gid(table, LinkLayer::Ethernet, 9);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().message, "GID index 9 is empty or absent (valid: 0, 1, 2, 3, 4, 5)");
}

TEST(VerbsGid, InfiniBandUsesThePortGid) {
  const std::vector<GidEntry> table = {
      entry(1, "fe80:0000:0000:0000:0202:c9ff:fe00:0002", GidType::IbRoceV1, ""),
      entry(0, "fe80:0000:0000:0000:0202:c9ff:fe00:0001", GidType::IbRoceV1, "")};
  auto choice = select_gid(table, LinkLayer::InfiniBand);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 0);
}

class VerbsGidSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("conduit-verbs-gid-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(std::random_device{}()));
    port_ = root_ / "class" / "infiniband" / "mlx5_0" / "ports" / "1";
    fs::create_directories(port_ / "gids");
    fs::create_directories(port_ / "gid_attrs" / "types");
    fs::create_directories(port_ / "gid_attrs" / "ndevs");
  }
  void TearDown() override { fs::remove_all(root_); }

  void add(int index, const std::string& gid_text, const std::string& type, const std::string& ndev) {
    std::ofstream(port_ / "gids" / std::to_string(index)) << gid_text << "\n";
    // The kernel answers EINVAL for the type of an unused entry: model that as a missing file.
    if (!type.empty()) std::ofstream(port_ / "gid_attrs" / "types" / std::to_string(index)) << type << "\n";
    if (!ndev.empty()) std::ofstream(port_ / "gid_attrs" / "ndevs" / std::to_string(index)) << ndev << "\n";
  }

  fs::path root_;
  fs::path port_;
};

TEST_F(VerbsGidSysfs, ReadsTypesAndNetdevsAndSkipsEmptyEntries) {
  add(0, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", "IB/RoCE v1", "eth2");
  add(1, "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f", "RoCE v2", "eth2");
  add(2, "0000:0000:0000:0000:0000:ffff:0a00:0005", "IB/RoCE v1", "eth2");
  add(3, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "eth2");
  add(4, "0000:0000:0000:0000:0000:0000:0000:0000", "", "");
  add(10, "0000:0000:0000:0000:0000:ffff:0a00:0009", "", "eth3");
  const auto table = read_gid_table(root_, "mlx5_0", 1);
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(table[0].index, 0);
  EXPECT_EQ(table[0].type, GidType::IbRoceV1);
  EXPECT_EQ(table[3].index, 3);
  EXPECT_EQ(table[3].type, GidType::RoceV2);
  EXPECT_EQ(table[3].netdev, "eth2");
  EXPECT_EQ(table[4].index, 10);  // numeric order, not "10" < "2"
  EXPECT_EQ(table[4].type, GidType::Unknown);

  auto choice = select_gid(table, LinkLayer::Ethernet);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->entry.index, 3);
}

TEST_F(VerbsGidSysfs, AbsentDeviceOrPortGivesAnEmptyTable) {
  EXPECT_TRUE(read_gid_table(root_, "mlx5_9", 1).empty());
  EXPECT_TRUE(read_gid_table(root_, "mlx5_0", 2).empty());
}

}  // namespace
}  // namespace conduit::verbs
