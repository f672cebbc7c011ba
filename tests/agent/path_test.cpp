// The proof of path (docs/path.md): verdicts from two counter samples, the attribution rule for transfers
// that run at once, the plan split over rails, and the prover over a fake sysfs tree whose counters move
// between a transfer's start and end.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "fake_sysfs.h"
#include "path/judge.h"
#include "path/ledger.h"
#include "path/prover.h"
#include "path/rail_nics.h"

namespace conduit::agent::path {
namespace {

namespace fs = std::filesystem;
using conduit::testing::FakeSysfs;
namespace pv = api::path_verdict;
namespace nv = api::nic_verdict;

constexpr std::uint64_t MiB = 1 << 20;

NicRef net(const std::string& name) { return {name, NicClass::Net}; }
NicRef ib(const std::string& name) { return {name, NicClass::Infiniband}; }
NicCounters bytes(std::uint64_t tx, std::uint64_t rx) {
  return {.kind = NicKind::Net, .tx_bytes = tx, .rx_bytes = rx, .efa = std::nullopt};
}
NicCounters efa(std::uint64_t tx, std::uint64_t write, std::uint64_t send) {
  return {.kind = NicKind::Efa,
          .tx_bytes = tx,
          .rx_bytes = 0,
          .efa = NicCounters::OneSided{
              .rdma_write_bytes = write, .rdma_read_bytes = 0, .send_bytes = send, .recv_bytes = 0}};
}
const api::NicPath* nic(const api::TransferPath& p, const std::string& name) {
  for (const auto& n : p.nics) {
    if (n.nic == name) return &n;
  }
  return nullptr;
}

TEST(PathJudge, BytesOnThePlannedVethWithHeadersAreMatched) {
  const Sample start{{net("veth1"), bytes(1000, 50)}, {net("eth0"), bytes(0, 0)}};
  // 8 MiB planned; the counter saw them and their headers (and the peer's acks came in as rx).
  const Sample end{{net("veth1"), bytes(1000 + 8 * MiB + 300000, 90000)}, {net("eth0"), bytes(4000, 4000)}};
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kMatched) << p.message;
  EXPECT_EQ(p.counted, "tx");
  ASSERT_EQ(p.nics.size(), 1u) << "a NIC outside the plan is listed only when a planned one came up short";
  EXPECT_EQ(p.nics[0].verdict, nv::kCarried);
  EXPECT_EQ(p.nics[0].planned_bytes, 8 * MiB);
  ASSERT_TRUE(p.nics[0].counter_delta);
  EXPECT_EQ(p.nics[0].counter_delta->tx_bytes, 8 * MiB + 300000);
  EXPECT_EQ(p.nics[0].counter_delta->rx_bytes, 89950u);
}

TEST(PathJudge, AReadIsJudgedOnWhatThisNodeReceived) {
  const Sample start{{net("veth1"), bytes(0, 0)}};
  const Sample end{{net("veth1"), bytes(8 * MiB, 1000)}};  // sent, not received: wrong way round
  const auto p = judge(OpKind::Read, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.counted, "rx");
  EXPECT_EQ(p.verdict, pv::kNotCarried) << p.message;
}

TEST(PathJudge, BytesThatLeftThroughAnotherNicAreMisroutedNamingBoth) {
  const Sample start{{net("veth1"), bytes(0, 0)}, {net("veth2"), bytes(0, 0)}, {net("lo"), bytes(0, 0)}};
  const Sample end{{net("veth1"), bytes(2000, 9 * MiB / 10)},
                   {net("veth2"), bytes(8 * MiB + 5000, 0)},
                   {net("lo"), bytes(0, 0)}};
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kMisrouted);
  EXPECT_NE(p.message.find("veth1"), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("veth2"), std::string::npos) << p.message;
  ASSERT_NE(nic(p, "veth1"), nullptr);
  EXPECT_EQ(nic(p, "veth1")->verdict, nv::kNotCarried);
  ASSERT_NE(nic(p, "veth2"), nullptr);
  EXPECT_EQ(nic(p, "veth2")->verdict, nv::kUnplanned);
  EXPECT_FALSE(nic(p, "veth2")->planned);
  EXPECT_EQ(nic(p, "lo"), nullptr) << "a NIC that did not move by the shortfall is not blamed";
}

TEST(PathJudge, BackgroundTrafficOnAnotherNicIsNotBlamedWhenThePlanHeld) {
  const Sample start{{net("veth1"), bytes(0, 0)}, {net("eth0"), bytes(0, 0)}};
  const Sample end{{net("veth1"), bytes(8 * MiB, 0)}, {net("eth0"), bytes(900 * MiB, 0)}};
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kMatched) << p.message;
  EXPECT_EQ(nic(p, "eth0"), nullptr);
}

TEST(PathJudge, ACounterThatDidNotMoveIsNotCarriedEvenWithNoOtherNic) {
  const Sample start{{net("veth1"), bytes(0, 0)}};
  const Sample end{{net("veth1"), bytes(0, 0)}};
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kNotCarried);
  EXPECT_NE(p.message.find("moved 0 bytes"), std::string::npos) << p.message;
}

TEST(PathJudge, OnePercentBelowThePlanStillCarries) {
  const Sample start{{net("veth1"), bytes(0, 0)}};
  EXPECT_EQ(judge(OpKind::Write, {{net("veth1"), 100 * MiB}}, {}, start, {{net("veth1"), bytes(99 * MiB, 0)}})
                .verdict,
            pv::kMatched);
  EXPECT_EQ(judge(OpKind::Write, {{net("veth1"), 100 * MiB}}, {}, start, {{net("veth1"), bytes(98 * MiB, 0)}})
                .verdict,
            pv::kNotCarried);
}

TEST(PathJudge, UnreadableCountersAreSaidWithTheReason) {
  const Sample start{{net("veth1"), make_error(ErrorCode::NotFound, "cannot read /sys/x: No such file")}};
  const Sample end{{net("veth1"), bytes(8 * MiB, 0)}};
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kUnreadable);
  EXPECT_NE(p.message.find("No such file"), std::string::npos) << p.message;
  ASSERT_EQ(p.nics.size(), 1u);
  EXPECT_EQ(p.nics[0].verdict, nv::kUnreadable);
  EXPECT_FALSE(p.nics[0].counter_delta);
}

TEST(PathJudge, ACounterThatWentBackIsUnreadableNotAMatch) {
  const auto p = judge(OpKind::Write, {{net("veth1"), MiB}}, {}, {{net("veth1"), bytes(50 * MiB, 0)}},
                       {{net("veth1"), bytes(10, 0)}});
  EXPECT_EQ(p.verdict, pv::kUnreadable);
  EXPECT_NE(p.message.find("went back"), std::string::npos) << p.message;
}

TEST(PathJudge, EfaWritesThatWentAsSendRecvAreNamed) {
  const Sample start{{ib("efa_0"), efa(0, 0, 0)}};
  const Sample end{{ib("efa_0"), efa(8 * MiB + 4096, 0, 8 * MiB + 4096)}};
  const auto p = judge(OpKind::Write, {{ib("efa_0"), 8 * MiB}}, {}, start, end);
  EXPECT_EQ(p.verdict, pv::kEmulatedSendRecv);
  ASSERT_EQ(p.nics.size(), 1u);
  EXPECT_EQ(p.nics[0].kind, "efa");
  EXPECT_EQ(p.nics[0].verdict, nv::kEmulatedSendRecv);
  ASSERT_TRUE(p.nics[0].counter_delta->send_bytes);
  EXPECT_EQ(*p.nics[0].counter_delta->send_bytes, 8 * MiB + 4096);
  EXPECT_NE(p.message.find("rdma_write_bytes moved 0 bytes"), std::string::npos) << p.message;

  const Sample one_sided{{ib("efa_0"), efa(8 * MiB + 4096, 8 * MiB, 4096)}};
  EXPECT_EQ(judge(OpKind::Write, {{ib("efa_0"), 8 * MiB}}, {}, start, one_sided).verdict, pv::kMatched);
}

TEST(PathJudge, NoNicOrNoByteIsNotApplicable) {
  EXPECT_EQ(judge(OpKind::Write, {}, {}, {}, {}).verdict, pv::kNotApplicable);
  const auto p =
      judge(OpKind::Write, {{net("lo"), 0}}, {}, {{net("lo"), bytes(0, 0)}}, {{net("lo"), bytes(0, 0)}});
  EXPECT_EQ(p.verdict, pv::kNotApplicable);
  EXPECT_EQ(p.message, "no byte went on the wire");
}

TEST(PathJudge, TransfersNestedInTheWindowRaiseWhatTheDeltaMustCover) {
  const Sample start{{net("veth1"), bytes(0, 0)}};
  const Sample end{{net("veth1"), bytes(12 * MiB, 0)}};
  // 8 MiB of its own and 8 MiB of a transfer run wholly inside it: 16 MiB should have crossed, 12 did.
  const auto p = judge(OpKind::Write, {{net("veth1"), 8 * MiB}}, {{"veth1", 8 * MiB}}, start, end);
  EXPECT_EQ(p.verdict, pv::kNotCarried) << p.message;
  EXPECT_EQ(p.nics[0].window_bytes, 16 * MiB);
}

TEST(PathLedger, CountsOnlyTransfersWhollyInsideTheWindow) {
  using C = Ledger::Clock;
  Ledger ledger;
  const C::time_point t0 = C::now();
  auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  const auto early = ledger.open(at(0));    // starts before the judged one: partial overlap
  const auto judged = ledger.open(at(10));  // the one judged
  const auto inside = ledger.open(at(20));  // wholly inside
  EXPECT_TRUE(ledger.close(inside, at(30), {{"veth1", 5 * MiB}}).empty());
  EXPECT_EQ(ledger.close(early, at(40), {{"veth1", 7 * MiB}}), (NicBytes{{"veth1", 5 * MiB}}))
      << "the inside one ran within the early one's window too";
  const auto late = ledger.open(at(45));  // ends after the judged one: partial overlap
  const NicBytes nested = ledger.close(judged, at(50), {{"veth1", MiB}});
  EXPECT_EQ(nested, (NicBytes{{"veth1", 5 * MiB}})) << "only the nested transfer counts";
  ledger.close(late, at(60), {{"veth1", MiB}});
  EXPECT_EQ(ledger.records(), 0u) << "with no window open nothing is kept";
}

TEST(PathLedger, AnAbandonedWindowReleasesItsRecords) {
  using C = Ledger::Clock;
  Ledger ledger;
  const auto a = ledger.open(C::now());
  const auto b = ledger.open(C::now());
  ledger.close(b, C::now(), {{"lo", 1}});
  EXPECT_EQ(ledger.records(), 1u);
  ledger.abandon(a);
  EXPECT_EQ(ledger.records(), 0u);
}

TEST(PathPlan, BytesSplitEvenlyOverTheUsedRailsNics) {
  RailNics nics{.per_rail = {ib("mlx5_0"), ib("mlx5_1"), ib("mlx5_0"), ib("mlx5_2")}, .why_none = ""};
  std::vector<Planned> planned;
  add_planned(planned, nics, {0, 1, 2}, 3 * MiB + 2);
  ASSERT_EQ(planned.size(), 3u);
  EXPECT_EQ(planned[0].nic.name, "mlx5_0");
  EXPECT_EQ(planned[0].bytes, 2 * MiB + 1);  // rails 0 and 2, the remainder's first byte on rail 0
  EXPECT_EQ(planned[1].bytes, MiB + 1);
  EXPECT_EQ(planned[2].nic.name, "mlx5_2");
  EXPECT_EQ(planned[2].bytes, 0u) << "a rail it did not use stays in the list, with nothing planned";
}

TEST(PathPlan, TcpRailsOnOneInterfaceTakeEveryByte) {
  RailNics nics{.per_rail = {net("lo"), net("lo")}, .why_none = ""};
  std::vector<Planned> planned;
  add_planned(planned, nics, {}, 10);
  add_planned(planned, nics, {}, 5);  // a second target on the same transport
  ASSERT_EQ(planned.size(), 1u);
  EXPECT_EQ(planned[0].bytes, 15u);
}

// The prover over real sysfs reading (SysfsCounters) of a fake tree whose counters move as a transfer would.
class PathProverTest : public ::testing::Test {
 protected:
  PathProverTest() : sysfs_(::testing::UnitTest::GetInstance()->current_test_info()->name()) {
    set("veth1", 0);
    set("veth2", 0);
  }
  void set(const std::string& nic, std::uint64_t tx) {
    FakeSysfs::write(sysfs_.root() / "class/net" / nic / "statistics/tx_bytes", std::to_string(tx));
    FakeSysfs::write(sysfs_.root() / "class/net" / nic / "statistics/rx_bytes", "0");
  }
  Prover prover() {
    return Prover(
        std::make_unique<SysfsCounters>(sysfs_.root()),
        [] {
          return std::vector<NicRef>{net("veth1"), net("veth2")};
        },
        nullptr);
  }
  FakeSysfs sysfs_;
};

TEST_F(PathProverTest, ConcurrentTransfersOnOneNicAreBothMatched) {
  Prover p = prover();
  auto a = p.begin({net("veth1")}, "");
  auto b = p.begin({net("veth1")}, "");
  set("veth1", 16 * MiB + 1000);  // both transfers' bytes in one delta
  EXPECT_EQ(p.end(std::move(b), OpKind::Write, {{net("veth1"), 8 * MiB}}).verdict, pv::kMatched);
  EXPECT_EQ(p.end(std::move(a), OpKind::Write, {{net("veth1"), 8 * MiB}}).verdict, pv::kMatched);
}

TEST_F(PathProverTest, ANestedTransferCannotCoverForTheOneAroundIt) {
  Prover p = prover();
  auto outer = p.begin({net("veth1")}, "");
  auto inner = p.begin({net("veth1")}, "");
  set("veth1", 8 * MiB);  // only the inner transfer's bytes crossed veth1
  set("veth2", 8 * MiB);  // the outer one's went out through veth2
  EXPECT_EQ(p.end(std::move(inner), OpKind::Write, {{net("veth1"), 8 * MiB}}).verdict, pv::kMatched);
  const auto judged = p.end(std::move(outer), OpKind::Write, {{net("veth1"), 8 * MiB}});
  EXPECT_EQ(judged.verdict, pv::kMisrouted) << judged.message;
}

TEST_F(PathProverTest, ACounterThatTurnsToJunkMidTransferIsUnreadable) {
  Prover p = prover();
  auto w = p.begin({net("veth1")}, "");
  FakeSysfs::write(sysfs_.root() / "class/net/veth1/statistics/tx_bytes", "N/A");
  const auto judged = p.end(std::move(w), OpKind::Write, {{net("veth1"), MiB}});
  EXPECT_EQ(judged.verdict, pv::kUnreadable);
  EXPECT_NE(judged.message.find("veth1/statistics/tx_bytes holds \"N/A\""), std::string::npos)
      << judged.message;
}

TEST_F(PathProverTest, ACounterMissingFromTheStartIsUnreadable) {
  Prover p = prover();
  auto w = p.begin({net("veth9")}, "");
  const auto judged = p.end(std::move(w), OpKind::Write, {{net("veth9"), MiB}});
  EXPECT_EQ(judged.verdict, pv::kUnreadable);
  EXPECT_NE(judged.message.find("veth9/statistics/tx_bytes: No such file"), std::string::npos)
      << judged.message;
}

TEST_F(PathProverTest, RailsWithoutANicSayWhy) {
  Prover p = prover();
  auto w = p.begin({}, "the shm rails name no NIC");
  const auto judged = p.end(std::move(w), OpKind::Write, {});
  EXPECT_EQ(judged.verdict, pv::kNotApplicable);
  EXPECT_EQ(judged.message, "the shm rails name no NIC");
  EXPECT_EQ(judged.counted, "tx");
}

}  // namespace
}  // namespace conduit::agent::path
