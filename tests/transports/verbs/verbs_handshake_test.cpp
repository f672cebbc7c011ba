// The ibverbs address blob and handshake messages: what one side encodes the other decodes unchanged, and
// anything else (another version, a cut-off or padded blob, out-of-range fields) is refused with a message
// that says what is wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "handshake.h"

namespace conduit::verbs {
namespace {

RailInfo roce_rail(std::uint8_t last_octet) {
  RailInfo r;
  r.port = 1;
  r.link_layer = LinkLayer::Ethernet;
  r.lid = 0;
  r.gid_index = 3;
  r.mtu = 5;
  r.max_rd_atomic = 16;
  r.gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last_octet};
  r.device = "mlx5_" + std::to_string(last_octet);
  return r;
}

RailInfo ib_rail() {
  RailInfo r;
  r.port = 2;
  r.link_layer = LinkLayer::InfiniBand;
  r.lid = 0x1234;
  r.gid_index = 0;
  r.mtu = 4;
  r.max_rd_atomic = 8;
  r.gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 0xc9, 0xff, 0xfe, 0, 0, 1};
  r.device = "mlx4_0";
  return r;
}

Handshake address() {
  Handshake h;
  h.kind = HandshakeKind::Address;
  h.instance = 0x0123456789abcdefULL;
  h.listener.family = 4;
  h.listener.ip = {10, 0, 0, 5};
  h.listener.port = 18515;
  h.rails = {roce_rail(5), roce_rail(6)};
  return h;
}

Handshake request() {
  Handshake h = address();
  h.kind = HandshakeKind::Request;
  h.qps = {{0, 0, 0x000101, 0xabcdef}, {0, 0, 0x000102, 0}, {1, 1, 0xffffff, 0x123456}, {1, 0, 7, 1}};
  return h;
}

std::string decode_error(const std::vector<std::byte>& blob) {
  auto h = decode(blob);
  EXPECT_FALSE(h.ok());
  if (h.ok()) return "";
  EXPECT_EQ(h.error().code, ErrorCode::InvalidArgument);
  return h.error().message;
}

TEST(VerbsHandshake, AddressRoundTripsUnchanged) {
  const Handshake h = address();
  auto back = decode(encode(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, h);
  EXPECT_TRUE(back->qps.empty());
}

TEST(VerbsHandshake, RequestAndReplyCarryEveryQueuePair) {
  Handshake h = request();
  auto back = decode(encode(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, h);
  ASSERT_EQ(back->qps.size(), 4u);
  EXPECT_EQ(back->qps[2].qpn, 0xffffffu);
  EXPECT_EQ(back->qps[0].psn, 0xabcdefu);

  h.kind = HandshakeKind::Reply;
  h.rails = {ib_rail(), roce_rail(9)};
  back = decode(encode(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, h);
  EXPECT_EQ(back->rails[0].lid, 0x1234);
  EXPECT_EQ(back->rails[0].link_layer, LinkLayer::InfiniBand);
}

TEST(VerbsHandshake, Ipv6ListenerRoundTrips) {
  Handshake h = address();
  h.listener.family = 6;
  h.listener.ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  auto back = decode(encode(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->listener, h.listener);
  EXPECT_EQ(back->listener.to_string(), "[fd00::1]:18515");
  EXPECT_EQ(address().listener.to_string(), "10.0.0.5:18515");
}

TEST(VerbsHandshake, DeviceNamesLongerThan64BytesAreCut) {
  Handshake h = address();
  h.rails[0].device = std::string(100, 'x');
  auto back = decode(encode(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->rails[0].device, std::string(64, 'x'));
}

TEST(VerbsHandshake, AnotherVersionIsRefusedNamingBoth) {
  auto blob = encode(address());
  blob[4] = std::byte{2};
  EXPECT_EQ(decode_error(blob),
            "ibverbs handshake: version 2 is not supported (this build speaks version 1)");
}

TEST(VerbsHandshake, ForeignBytesAreNotAnAddress) {
  EXPECT_EQ(decode_error({}), "ibverbs handshake: not a Conduit ibverbs address (0 bytes)");
  // A libfabric tcp address (a sockaddr_in) must not be mistaken for ours.
  std::vector<std::byte> sockaddr(16, std::byte{0});
  sockaddr[0] = std::byte{2};
  EXPECT_EQ(decode_error(sockaddr), "ibverbs handshake: not a Conduit ibverbs address (wrong magic)");
}

TEST(VerbsHandshake, EveryTruncationIsRefusedWithWhereItEnds) {
  const auto blob = encode(request());
  for (std::size_t n = 4; n < blob.size(); ++n) {
    const std::vector<std::byte> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string message = decode_error(cut);
    EXPECT_NE(message.find("truncated at byte"), std::string::npos) << n << ": " << message;
  }
}

TEST(VerbsHandshake, TrailingBytesAreRefused) {
  auto blob = encode(address());
  blob.push_back(std::byte{0});
  EXPECT_NE(decode_error(blob).find("1 trailing bytes"), std::string::npos);
}

TEST(VerbsHandshake, OutOfRangeFieldsAreRefusedByName) {
  struct Case {
    const char* name;
    void (*mutate)(Handshake&);
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"mtu 0", [](Handshake& h) { h.rails[1].mtu = 0; }, "rail 1: MTU code 0 is not 1..5"},
      {"mtu 6", [](Handshake& h) { h.rails[0].mtu = 6; }, "rail 0: MTU code 6 is not 1..5"},
      {"port 0", [](Handshake& h) { h.rails[0].port = 0; }, "rail 0: port 0"},
      {"rd atomic 0", [](Handshake& h) { h.rails[0].max_rd_atomic = 0; }, "max_rd_atomic is 0"},
      {"ib without lid", [](Handshake& h) { h.rails[0] = ib_rail(), h.rails[0].lid = 0; },
       "InfiniBand rail without a LID"},
      {"roce zero gid", [](Handshake& h) { h.rails[1].gid = Gid{}; }, "RoCE rail with a zero GID"},
      {"no rails", [](Handshake& h) { h.rails.clear(); }, "rail count 0 is not 1..64"},
      {"listener port 0", [](Handshake& h) { h.listener.port = 0; }, "listener port is 0"},
      {"listener family", [](Handshake& h) { h.listener.family = 5; }, "listener address family 5"},
      {"qp rail", [](Handshake& h) { h.qps[1].rail = 2; }, "qp 1: rail 2 but the message has 2 rails"},
      {"qpn 0", [](Handshake& h) { h.qps[0].qpn = 0; }, "qp 0: QPN 0 is not 1..2^24-1"},
      {"qpn 25 bits", [](Handshake& h) { h.qps[3].qpn = 1u << 24; }, "qp 3: QPN 16777216 is not 1..2^24-1"},
      {"psn 25 bits", [](Handshake& h) { h.qps[2].psn = 1u << 24; }, "qp 2: PSN 16777216 exceeds 24 bits"},
      {"peer rail", [](Handshake& h) { h.qps[0].peer_rail = 64; }, "qp 0: peer rail 64"},
      {"request without qps", [](Handshake& h) { h.qps.clear(); }, "a request needs at least one queue pair"},
      {"address with qps", [](Handshake& h) { h.kind = HandshakeKind::Address; },
       "an address carries no queue pairs"},
  };
  for (const Case& c : cases) {
    Handshake h = request();
    c.mutate(h);
    const std::string message = decode_error(encode(h));
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
    EXPECT_EQ(message.rfind("ibverbs handshake: ", 0), 0u) << c.name << ": " << message;
  }
}

TEST(VerbsHandshake, UnknownKindIsRefused) {
  auto blob = encode(address());
  blob[5] = std::byte{7};
  EXPECT_EQ(decode_error(blob), "ibverbs handshake: unknown message kind 7");
}

}  // namespace
}  // namespace conduit::verbs
