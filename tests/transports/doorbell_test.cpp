// The shm doorbell (transports/libfabric/doorbell.h): what a peer rings is what the endpoint sleeps on.
#include "doorbell.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <string>

#include "endpoint.h"
#include "provider.h"

namespace conduit::fabric {
namespace {

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

std::string unique_name(const char* what) {
  return std::string("doorbell-test-") + what + "-" + std::to_string(::getpid());
}

TEST(Doorbell, ARingWakesThePeerNamedAndDrainingQuietsIt) {
  Doorbell a(unique_name("a"));
  Doorbell b(unique_name("b"));
  ASSERT_GE(a.fd(), 0);
  ASSERT_GE(b.fd(), 0);
  EXPECT_FALSE(readable(b.fd(), 0));
  // shm's fi_getname form of the name (scheme, trailing NUL) rings the same doorbell.
  const auto to_b = Doorbell::address_of("fi_shm://" + unique_name("b") + std::string(1, '\0'));
  ASSERT_TRUE(to_b);
  EXPECT_TRUE(a.ring(*to_b));
  EXPECT_TRUE(a.ring(*to_b));
  EXPECT_TRUE(readable(b.fd(), 5000));
  EXPECT_FALSE(readable(a.fd(), 0)) << "only the peer named rings";
  b.drain();
  EXPECT_FALSE(readable(b.fd(), 0)) << "both rings drained";
}

TEST(Doorbell, NamesAreOneEndpointsAndRingingNobodyIsHarmless) {
  Doorbell first(unique_name("taken"));
  ASSERT_GE(first.fd(), 0);
  Doorbell second(unique_name("taken"));
  EXPECT_EQ(second.fd(), -1) << "a name already bound is another endpoint's";
  EXPECT_FALSE(second.ring(*Doorbell::address_of(unique_name("taken"))));
  EXPECT_FALSE(first.ring(*Doorbell::address_of(unique_name("nobody"))));
  EXPECT_FALSE(Doorbell::address_of(""));
  EXPECT_FALSE(Doorbell::address_of(std::string(200, 'x'))) << "longer than a socket address holds";
}

TEST(Doorbell, AnShmEndpointRingsThePeerItResolved) {
  auto info = query_provider("shm", "", false);
  if (!info) GTEST_SKIP() << "no shm provider here: " << info.error().message;
  auto policy = mr_policy(info->get()->domain_attr->mr_mode);
  ASSERT_TRUE(policy) << policy.error().message;
  auto a = Endpoint::open(*info->get(), *policy);
  auto b = Endpoint::open(*info->get(), *policy);
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  ASSERT_GE((*b)->doorbell_fd(), 0);
  auto peer = (*a)->resolve((*b)->address());
  ASSERT_TRUE(peer) << peer.error().message;
  EXPECT_FALSE(readable((*b)->doorbell_fd(), 0));
  (*a)->ring(*peer);
  EXPECT_TRUE(readable((*b)->doorbell_fd(), 5000));
  (*b)->drain_doorbell();
  EXPECT_FALSE(readable((*b)->doorbell_fd(), 0));
}

}  // namespace
}  // namespace conduit::fabric
