// The NICs' byte counters as sysfs lays them out for each provider (docs/path.md), read from fake trees.
#include "conduit/nic_counters.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "conduit/net_interface.h"
#include "fake_sysfs.h"

namespace conduit {
namespace {

namespace fs = std::filesystem;
using conduit::testing::FakeSysfs;

class NicCountersTest : public ::testing::Test {
 protected:
  NicCountersTest() : sysfs_(::testing::UnitTest::GetInstance()->current_test_info()->name()) {}

  // /sys/class/net/<if>/statistics
  void net(const std::string& name, std::uint64_t tx, std::uint64_t rx) {
    const fs::path stats = sysfs_.root() / "class" / "net" / name / "statistics";
    FakeSysfs::write(stats / "tx_bytes", std::to_string(tx));
    FakeSysfs::write(stats / "rx_bytes", std::to_string(rx));
  }
  // /sys/class/infiniband/<dev>/ports/<p>/counters: 4-byte words.
  void verbs_port(const std::string& dev, int port, std::uint64_t xmit_words, std::uint64_t rcv_words) {
    const fs::path c =
        sysfs_.root() / "class" / "infiniband" / dev / "ports" / std::to_string(port) / "counters";
    FakeSysfs::write(c / "port_xmit_data", std::to_string(xmit_words));
    FakeSysfs::write(c / "port_rcv_data", std::to_string(rcv_words));
    FakeSysfs::write(c / "port_xmit_packets", "12");  // present on real devices, not read
  }
  // /sys/class/infiniband/<dev>/ports/<p>/hw_counters as EFA writes them: bytes.
  void efa_port(const std::string& dev, int port, std::uint64_t tx, std::uint64_t rx, std::uint64_t write,
                std::uint64_t read, std::uint64_t send, std::uint64_t recv) {
    const fs::path h =
        sysfs_.root() / "class" / "infiniband" / dev / "ports" / std::to_string(port) / "hw_counters";
    FakeSysfs::write(h / "tx_bytes", std::to_string(tx));
    FakeSysfs::write(h / "rx_bytes", std::to_string(rx));
    FakeSysfs::write(h / "rdma_write_bytes", std::to_string(write));
    FakeSysfs::write(h / "rdma_read_bytes", std::to_string(read));
    FakeSysfs::write(h / "send_bytes", std::to_string(send));
    FakeSysfs::write(h / "recv_bytes", std::to_string(recv));
    FakeSysfs::write(h / "rdma_read_resp_bytes", "0");
    FakeSysfs::write(h / "lifespan", "12");
  }
  SysfsCounters counters() const { return SysfsCounters(sysfs_.root()); }

  FakeSysfs sysfs_;
};

TEST_F(NicCountersTest, VethReadsItsStatisticsInBytes) {
  net("veth1", 123456789012, 42);
  auto c = counters().read({"veth1", NicClass::Net});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kind, NicKind::Net);
  EXPECT_EQ(c->tx_bytes, 123456789012u);
  EXPECT_EQ(c->rx_bytes, 42u);
  EXPECT_FALSE(c->efa);
}

TEST_F(NicCountersTest, VerbsPortCountersAreFourByteWordsSummedOverPorts) {
  verbs_port("mlx5_0", 1, 1000, 10);
  verbs_port("mlx5_0", 2, 24, 1);
  auto c = counters().read({"mlx5_0", NicClass::Infiniband});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kind, NicKind::Verbs);
  EXPECT_EQ(c->tx_bytes, 4u * 1024);
  EXPECT_EQ(c->rx_bytes, 4u * 11);
  EXPECT_FALSE(c->efa);
}

TEST_F(NicCountersTest, EfaHwCountersTellOneSidedFromSendRecv) {
  efa_port("efa_0", 1, /*tx=*/5000, /*rx=*/700, /*write=*/4096, /*read=*/0, /*send=*/900, /*recv=*/700);
  auto c = counters().read({"efa_0", NicClass::Infiniband});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kind, NicKind::Efa);
  EXPECT_EQ(c->tx_bytes, 5000u);
  EXPECT_EQ(c->rx_bytes, 700u);
  ASSERT_TRUE(c->efa);
  EXPECT_EQ(c->efa->rdma_write_bytes, 4096u);
  EXPECT_EQ(c->efa->rdma_read_bytes, 0u);
  EXPECT_EQ(c->efa->send_bytes, 900u);
  EXPECT_EQ(c->efa->recv_bytes, 700u);
}

TEST_F(NicCountersTest, AMissingDeviceIsAnErrorNamingTheFileNotZero) {
  net("eth0", 1, 1);
  auto c = counters().read({"eth9", NicClass::Net});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::NotFound);
  EXPECT_NE(c.error().message.find("eth9/statistics/tx_bytes"), std::string::npos) << c.error().message;

  auto ib = counters().read({"mlx5_9", NicClass::Infiniband});
  ASSERT_FALSE(ib);
  EXPECT_NE(ib.error().message.find("mlx5_9"), std::string::npos) << ib.error().message;
}

TEST_F(NicCountersTest, TextThatIsNotACountIsAnError) {
  net("eth0", 1, 1);
  FakeSysfs::write(sysfs_.root() / "class/net/eth0/statistics/rx_bytes", "not-a-number");
  auto c = counters().read({"eth0", NicClass::Net});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("not a byte count"), std::string::npos) << c.error().message;
}

TEST_F(NicCountersTest, OnePortMissingItsCounterFailsTheWholeDevice) {
  verbs_port("mlx5_0", 1, 1, 1);
  FakeSysfs::write(sysfs_.root() / "class/infiniband/mlx5_0/ports/2/counters/port_xmit_data", "5");
  auto c = counters().read({"mlx5_0", NicClass::Infiniband});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("ports/2/counters/port_rcv_data"), std::string::npos) << c.error().message;
}

TEST_F(NicCountersTest, ACounterThatCannotBeReadSaysWhy) {
  // A directory where the file should be: opened, but nothing in it reads as a count (root reads a file of
  // mode 000, so a permission error cannot be made here).
  fs::create_directories(sysfs_.root() / "class/net/eth0/statistics/tx_bytes");
  FakeSysfs::write(sysfs_.root() / "class/net/eth0/statistics/rx_bytes", "1");
  auto c = counters().read({"eth0", NicClass::Net});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("eth0/statistics/tx_bytes"), std::string::npos) << c.error().message;
}

TEST_F(NicCountersTest, ANameWithASlashIsRefused) {
  auto c = counters().read({"../../etc", NicClass::Net});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::InvalidArgument);
}

TEST_F(NicCountersTest, ListsEveryInfinibandDevice) {
  verbs_port("mlx5_1", 1, 0, 0);
  efa_port("efa_0", 1, 0, 0, 0, 0, 0, 0);
  const auto list = counters().infiniband();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "efa_0");
  EXPECT_EQ(list[1].name, "mlx5_1");
}

TEST(NetInterface, LoopbackHoldsTheLoopbackAddress) {
  auto lo = interface_with_address("127.0.0.1");
  ASSERT_TRUE(lo) << lo.error().message;
  EXPECT_EQ(*lo, "lo");
  EXPECT_FALSE(interface_with_address("0.0.0.0"));
  auto bad = interface_with_address("not-an-ip");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace conduit
