// The handshake channel RC connections are set up over, on loopback TCP with no RDMA device: a request
// reaches the handler and its reply comes back; a refusal comes back with its class and words; a client
// that says nothing cannot hold the listener; an absent listener is PeerUnreachable.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "connector.h"

namespace conduit::verbs {
namespace {

using namespace std::chrono_literals;

Endpoint loopback(std::uint16_t port = 0) {
  auto e = parse_endpoint("127.0.0.1");
  EXPECT_TRUE(e.ok());
  e->port = port;
  return *e;
}

std::vector<std::byte> bytes(std::string_view s) {
  std::vector<std::byte> out;
  for (char c : s) out.push_back(static_cast<std::byte>(c));
  return out;
}

TEST(VerbsConnector, RequestReachesTheHandlerAndItsReplyComesBack) {
  std::atomic<int> calls{0};
  auto listener =
      Listener::start(loopback(), [&](std::span<const std::byte> request) -> Result<std::vector<std::byte>> {
        ++calls;
        std::vector<std::byte> reply(request.rbegin(), request.rend());
        return reply;
      });
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  ASSERT_NE((*listener)->endpoint().port, 0);
  for (int i = 0; i < 3; ++i) {
    auto reply = exchange((*listener)->endpoint(), bytes("abc"), 2s);
    ASSERT_TRUE(reply.ok()) << reply.error().message;
    EXPECT_EQ(*reply, bytes("cba"));
  }
  EXPECT_EQ(calls.load(), 3);
}

TEST(VerbsConnector, LargestRequestRoundTripsAndALargerOneIsRefused) {
  auto listener =
      Listener::start(loopback(), [](std::span<const std::byte> request) -> Result<std::vector<std::byte>> {
        return std::vector<std::byte>(request.begin(), request.end());
      });
  ASSERT_TRUE(listener.ok());
  std::vector<std::byte> big(kMaxFrame, std::byte{0x5a});
  auto reply = exchange((*listener)->endpoint(), big, 2s);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(*reply, big);
  big.push_back(std::byte{1});
  reply = exchange((*listener)->endpoint(), big, 2s);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, ErrorCode::InvalidArgument);
}

TEST(VerbsConnector, TheHandlersRefusalArrivesWithItsClassAndWords) {
  auto listener =
      Listener::start(loopback(), [](std::span<const std::byte>) -> Result<std::vector<std::byte>> {
        return make_error(ErrorCode::ResourceExhausted, "1024 peer transports are connected already");
      });
  ASSERT_TRUE(listener.ok());
  auto reply = exchange((*listener)->endpoint(), bytes("x"), 2s);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, ErrorCode::ResourceExhausted);
  EXPECT_EQ(reply.error().message, "ibverbs handshake with " + (*listener)->endpoint().to_string() +
                                       ": the peer refused: 1024 peer transports are connected already");
}

TEST(VerbsConnector, ASilentClientCannotHoldTheListener) {
  auto listener = Listener::start(
      loopback(),
      [](std::span<const std::byte> request) -> Result<std::vector<std::byte>> {
        return std::vector<std::byte>(request.begin(), request.end());
      },
      /*deadline=*/200ms);
  ASSERT_TRUE(listener.ok());
  // Connect and say nothing.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((*listener)->endpoint().port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  // A real request behind it is answered once the silent one's deadline passes.
  auto reply = exchange((*listener)->endpoint(), bytes("hello"), 3s);
  ::close(silent);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(*reply, bytes("hello"));
}

TEST(VerbsConnector, NoListenerIsPeerUnreachable) {
  std::uint16_t port = 0;
  {
    auto listener =
        Listener::start(loopback(), [](std::span<const std::byte>) -> Result<std::vector<std::byte>> {
          return std::vector<std::byte>{};
        });
    ASSERT_TRUE(listener.ok());
    port = (*listener)->endpoint().port;
  }  // closed: nothing listens on the port any more
  auto reply = exchange(loopback(port), bytes("x"), 1s);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, ErrorCode::PeerUnreachable);
  EXPECT_NE(reply.error().message.find("Connection refused"), std::string::npos) << reply.error().message;
}

TEST(VerbsConnector, ParsesListenAddresses) {
  auto e = parse_endpoint("10.1.2.3:18515");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->family, 4);
  EXPECT_EQ(e->port, 18515);
  EXPECT_EQ(e->to_string(), "10.1.2.3:18515");
  e = parse_endpoint("[fd00::7]:99");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->family, 6);
  EXPECT_EQ(e->to_string(), "[fd00::7]:99");
  e = parse_endpoint("fd00::7");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 0);
  EXPECT_FALSE(parse_endpoint("node-a:80").ok());
  EXPECT_FALSE(parse_endpoint("10.1.2.3:70000").ok());
  EXPECT_FALSE(parse_endpoint("[fd00::7").ok());
}

}  // namespace
}  // namespace conduit::verbs
