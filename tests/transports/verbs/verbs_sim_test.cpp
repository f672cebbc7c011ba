// The ibverbs backend against the simulated RoCE device (tests/doubles/fake_verbs): the reasons opening gives
// when the machine lacks what it needs, the address it publishes, selective signaling seen from the device,
// a peer that goes away, and, after every test of this executable (verbs_loopback_test.cpp included), that
// nothing was done the real library would punish: no send queue or CQ overflow, no QP transition without
// its attributes, no handle released before its children.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "conduit/transport.h"
#include "conduit/verbs.h"
#include "fake_verbs/fake_verbs.h"
#include "handshake.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
namespace fake = verbs::fake;

class NoViolations : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& v : fake::violations()) ADD_FAILURE() << "simulated device: " << v;
  }
};
[[maybe_unused]] const auto* const kNoViolations = ::testing::AddGlobalTestEnvironment(new NoViolations);

TransportConfig config(int rails = 1) {
  TransportConfig c;
  c.provider = verbs::kProviderName;
  c.rails = rails;
  c.stall_timeout = 10000ms;
  return c;
}

class VerbsSimMode : public ::testing::Test {
 protected:
  void TearDown() override { fake::set_mode(fake::Mode::Roce); }

  Error open_error(fake::Mode mode) {
    fake::set_mode(mode);
    const Status probed = verbs::probe(verbs::VerbsOptions{});
    auto opened = open_transport(config());
    EXPECT_FALSE(probed.ok());
    EXPECT_FALSE(opened.ok());
    if (probed.ok() || opened.ok()) return Error{ErrorCode::Provider, "opened"};
    // The agent's /v1/node check and a failed open say the same thing.
    EXPECT_EQ(probed.error().message, opened.error().message);
    return opened.error();
  }
};

TEST_F(VerbsSimMode, KernelWithoutVerbsIsNoRdmaDevice) {
  const Error e = open_error(fake::Mode::NoDevice);
  EXPECT_EQ(e.code, ErrorCode::Unavailable);
  EXPECT_EQ(e.message, "no RDMA device (ibv_get_device_list found none)");
}

TEST_F(VerbsSimMode, NoPermissionSaysSo) {
  const Error e = open_error(fake::Mode::NoPermission);
  EXPECT_EQ(e.code, ErrorCode::Unavailable);
  EXPECT_EQ(e.message, "no permission to list RDMA devices (ibv_get_device_list: Operation not permitted)");
}

TEST_F(VerbsSimMode, DevicesThatDoNotRunRcAreNamed) {
  const Error e = open_error(fake::Mode::EfaOnly);
  EXPECT_EQ(e.code, ErrorCode::Unavailable);
  EXPECT_EQ(
      e.message,
      "no RDMA device that runs RC queue pairs (found sim_efa0; EFA devices are used through libfabric's efa "
      "provider)");
}

TEST_F(VerbsSimMode, PortDownSaysWhichPort) {
  const Error e = open_error(fake::Mode::PortDown);
  EXPECT_EQ(e.code, ErrorCode::Unavailable);
  EXPECT_EQ(e.message,
            "sim_roce0 port 1 is not active (state down): the link is down or the port is not configured");
}

TEST_F(VerbsSimMode, MemlockLimitIsTheReasonWhenQueuesCannotBePinned) {
  const Error e = open_error(fake::Mode::Memlock);
  EXPECT_EQ(e.code, ErrorCode::Unavailable);
  EXPECT_NE(e.message.find("ibv_create_cq(1 entries on sim_roce0): Cannot allocate memory"),
            std::string::npos)
      << e.message;
  rlimit limit{};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  if (limit.rlim_cur != RLIM_INFINITY) {
    EXPECT_NE(e.message.find("RLIMIT_MEMLOCK is"), std::string::npos) << e.message;
  }
}

TEST(VerbsSim, AddressNamesTheRoceV2GidTheMtuAndTheListener) {
  auto t = verbs::open(config(2), verbs::VerbsOptions{});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->name(), "ibverbs:sim_roce0");
  EXPECT_EQ((*t)->rails(), 2);
  EXPECT_EQ((*t)->capabilities().provider, "ibverbs");
  EXPECT_EQ((*t)->capabilities().max_message, 1u << 30);
  auto address = verbs::decode((*t)->address());
  ASSERT_TRUE(address.ok()) << address.error().message;
  EXPECT_EQ(address->kind, verbs::HandshakeKind::Address);
  ASSERT_EQ(address->rails.size(), 2u);
  EXPECT_EQ(address->rails[0].link_layer, verbs::LinkLayer::Ethernet);
  EXPECT_EQ(address->rails[0].gid_index, 3);  // RoCE v2 ::ffff:127.0.0.1, not the link-local or v1 ones
  EXPECT_EQ(address->rails[0].mtu, 3);        // the port's active 1024
  EXPECT_EQ(address->rails[0].device, "sim_roce0");
  EXPECT_EQ(address->listener.to_string().rfind("127.0.0.1:", 0), 0u) << address->listener.to_string();
}

TEST(VerbsSim, ForcedGidIndexIsUsedAndAnEmptyOneRefused) {
  verbs::VerbsOptions o;
  o.gid_index = 1;
  o.listen = "127.0.0.1";
  auto t = verbs::open(config(), o);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(verbs::decode((*t)->address())->rails[0].gid_index, 1);
  o.gid_index = 9;
  auto bad = verbs::open(config(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "sim_roce0 port 1: GID index 9 is empty or absent (valid: 0, 1, 2, 3)");
}

TEST(VerbsSim, SelectiveSignalingAsksForAFractionOfTheCompletions) {
  verbs::VerbsOptions o;
  o.qps_per_peer = 1;
  o.sq_depth = 64;
  o.signal_every = 16;
  auto a = verbs::open(config(), o);
  auto b = verbs::open(config(), o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto src = MemoryRegion::allocate_host(4 << 20);
  auto dst = MemoryRegion::allocate_host(4 << 20);
  ASSERT_TRUE(src.ok() && dst.ok());
  fill_pattern(src->bytes(), 21);
  auto local = (*a)->register_memory(*src, Access::Local);
  auto remote = (*b)->register_memory(*dst, Access::RemoteWrite);
  ASSERT_TRUE(local.ok() && remote.ok());
  fake::reset_counters();
  BatchOptions options;
  options.slice_bytes = 4096;  // 1024 WRs
  options.window = 256;
  std::vector<Op> ops{Op{OpKind::Write, &*local, 0, remote->remote_key(), 0, 4 << 20}};
  auto id = (*a)->submit(ops, options);
  ASSERT_TRUE(id.ok()) << id.error().message;
  const BatchStatus s = wait(**a, *id);
  ASSERT_FALSE(s.error) << s.error->message;
  EXPECT_EQ(crc32c(dst->bytes()), crc32c(src->bytes()));
  const fake::Counters after = fake::counters();
  EXPECT_EQ(after.posted, 1024u);
  EXPECT_EQ(after.bytes, 4u << 20);
  // The window (256) is wider than the send queue (64): the queue fills, and never overflows (that would
  // be a violation, and ibv_post_send would have refused it).
  EXPECT_EQ(after.max_outstanding, 64u);
  // Every 16th, plus the last of each post: far fewer completions than WRs, and at least 1024 / 16.
  const auto completions = after.completions;
  EXPECT_GE(completions, 64u);
  EXPECT_LT(completions, 1024u / 2) << "selective signaling should not ask for most completions";
}

// A source registered on one rail (the one nearest its memory) writes only there; a target's registration
// keeps every rail, since each of the writer's rails is paired with one of ours at handshake.
TEST(VerbsSim, ASourceOnChosenRailsWritesOnlyThere) {
  auto a = verbs::open(config(2), verbs::VerbsOptions{});
  auto b = verbs::open(config(2), verbs::VerbsOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->capabilities().rail_nics, (std::vector<std::string>{"sim_roce0", "sim_roce0"}));
  auto src = MemoryRegion::allocate_host(4 << 20);
  auto dst = MemoryRegion::allocate_host(4 << 20);
  ASSERT_TRUE(src.ok() && dst.ok());
  fill_pattern(src->bytes(), 23);
  const std::vector<std::uint32_t> rail1{1};
  auto local = (*a)->register_memory(*src, Access::Local, 0, Transport::kWholeRegion, rail1);
  auto remote = (*b)->register_memory(*dst, Access::RemoteWrite, 0, Transport::kWholeRegion, rail1);
  ASSERT_TRUE(local.ok() && remote.ok());
  EXPECT_EQ(local->remote_key().rails.size(), 1u);
  EXPECT_EQ(remote->remote_key().rails.size(), 2u);
  BatchOptions options;
  options.slice_bytes = 64 << 10;
  std::vector<Op> ops{Op{OpKind::Write, &*local, 0, remote->remote_key(), 0, 4 << 20}};
  auto id = (*a)->submit(ops, options);
  ASSERT_TRUE(id.ok()) << id.error().message;
  const BatchStatus s = wait(**a, *id);
  ASSERT_FALSE(s.error) << s.error->message;
  EXPECT_EQ(crc32c(dst->bytes()), crc32c(src->bytes()));
}

TEST(VerbsSim, APeerThatWentAwayIsPeerUnreachable) {
  auto a = verbs::open(config(), verbs::VerbsOptions{});
  auto b = verbs::open(config(), verbs::VerbsOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  auto src = MemoryRegion::allocate_host(1 << 20);
  auto dst = MemoryRegion::allocate_host(1 << 20);
  ASSERT_TRUE(src.ok() && dst.ok());
  auto local = (*a)->register_memory(*src, Access::Local);
  auto remote = (*b)->register_memory(*dst, Access::RemoteWrite);
  ASSERT_TRUE(local.ok() && remote.ok());
  const RemoteKey key = remote->remote_key();
  std::vector<Op> ops{Op{OpKind::Write, &*local, 0, key, 0, 1 << 20}};
  auto id = (*a)->submit(ops, BatchOptions{});
  ASSERT_TRUE(id.ok());
  ASSERT_FALSE(wait(**a, *id).error);

  remote->reset();
  b->reset();  // the target process is gone: its QPs and listener with it
  id = (*a)->submit(ops, BatchOptions{});
  ASSERT_TRUE(id.ok()) << id.error().message;  // the old connection still looks alive
  BatchStatus s = wait(**a, *id);
  ASSERT_TRUE(s.error);
  EXPECT_EQ(s.error->code, ErrorCode::PeerUnreachable) << s.error->message;
  EXPECT_NE(s.error->message.find("did not acknowledge"), std::string::npos) << s.error->message;

  // Now the connection is known broken: the next batch tries to reconnect and finds nobody listening.
  auto again = (*a)->submit(ops, BatchOptions{});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::PeerUnreachable) << again.error().message;
  EXPECT_NE(again.error().message.find("Connection refused"), std::string::npos) << again.error().message;
}

TEST(VerbsSim, AKeyOfAnotherProviderOrTransportIsRefusedBeforePosting) {
  auto a = verbs::open(config(), verbs::VerbsOptions{});
  auto b = verbs::open(config(), verbs::VerbsOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  auto src = MemoryRegion::allocate_host(1 << 20);
  ASSERT_TRUE(src.ok());
  auto local_b = (*b)->register_memory(*src, Access::Local);
  auto remote = (*b)->register_memory(*src, Access::RemoteWrite);
  ASSERT_TRUE(local_b.ok() && remote.ok());
  RemoteKey key = remote->remote_key();
  auto id = (*a)->submit(std::vector<Op>{Op{OpKind::Write, &*local_b, 0, key, 0, 4096}}, BatchOptions{});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message, "op 0: local registration belongs to another transport");
  auto local_a = (*a)->register_memory(*src, Access::Local);
  ASSERT_TRUE(local_a.ok());
  key.provider = "tcp;ofi_rxm";
  id = (*a)->submit(std::vector<Op>{Op{OpKind::Write, &*local_a, 0, key, 0, 4096}}, BatchOptions{});
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("remote key is for provider \"tcp;ofi_rxm\""), std::string::npos);
  key.provider = "ibverbs";
  id = (*a)->submit(std::vector<Op>{Op{OpKind::Write, &*local_a, 0, key, 1 << 20, 1}}, BatchOptions{});
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("outside the 1048576-byte remote region"), std::string::npos);
}

}  // namespace
}  // namespace conduit
