// Lease leader election against a real kube-apiserver, on short durations (3 s lease, 2 s renew deadline,
// 250 ms retry) so the takeovers happen within a test's time.
#include <gtest/gtest.h>

#include <atomic>

#include "controller/kube/leader_election.h"
#include "kube_api_env.h"

namespace conduit::kube::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class LeaderElectionApi : public KubeApiTest {
 protected:
  LeaderElectionConfig election(const std::string& identity) {
    LeaderElectionConfig e;
    e.lease_namespace = ns_;
    e.lease_name = "conduit-controller";
    e.identity = identity;
    e.lease_duration = seconds(3);
    e.renew_deadline = seconds(2);
    e.retry_period = milliseconds(250);
    e.on_started_leading = [this, identity] { ++started_[identity == "a" ? 0 : 1]; };
    e.on_stopped_leading = [this, identity] { ++stopped_[identity == "a" ? 0 : 1]; };
    return e;
  }
  json lease() {
    auto got = client_->get(kube_client::resources::leases(), ns_, "conduit-controller");
    EXPECT_TRUE(got) << got.error().message;
    return got ? (*got)["spec"] : json();
  }
  // Samples for `d` that never both lead; returns how many samples saw exactly one leader.
  int exactly_one_leads_for(LeaderElector& a, LeaderElector& b, milliseconds d) {
    int one = 0;
    for (auto end = Clock::now() + d; Clock::now() < end; std::this_thread::sleep_for(milliseconds(10))) {
      bool la = a.is_leader(), lb = b.is_leader();
      EXPECT_FALSE(la && lb) << "two leaders at once";
      one += la != lb;
    }
    return one;
  }

  std::atomic<int> started_[2] = {0, 0};
  std::atomic<int> stopped_[2] = {0, 0};
};

TEST_F(LeaderElectionApi, ExactlyOneLeadsAndAReleasedLeaseIsTakenAtOnce) {
  kube_client::KubeConfig cfg = api_->config();
  auto a = std::make_unique<LeaderElector>(cfg, election("a"));
  LeaderElector b(cfg, election("b"));
  a->start();
  ASSERT_TRUE(eventually([&] { return a->is_leader(); }, seconds(5)));
  b.start();
  EXPECT_GT(exactly_one_leads_for(*a, b, milliseconds(1500)), 0);
  EXPECT_TRUE(a->is_leader());
  EXPECT_FALSE(b.is_leader());
  EXPECT_EQ(lease()["holderIdentity"], "a");
  EXPECT_EQ(lease()["leaseTransitions"], 0);
  EXPECT_EQ(started_[0], 1);

  auto t0 = Clock::now();
  a->stop(/*release=*/true);
  EXPECT_EQ(stopped_[0], 1);
  EXPECT_FALSE(a->is_leader());
  ASSERT_TRUE(eventually([&] { return b.is_leader(); }, seconds(3)));
  // Released: the next retry takes it, well within the lease duration.
  EXPECT_LT(Clock::now() - t0, seconds(3));
  json spec = lease();
  EXPECT_EQ(spec["holderIdentity"], "b");
  EXPECT_EQ(spec["leaseTransitions"], 1);
  EXPECT_EQ(started_[1], 1);
  a.reset();
  EXPECT_EQ(stopped_[0], 1) << "stopping twice steps down once";
}

TEST_F(LeaderElectionApi, AKilledLeaderIsReplacedOnlyAfterTheLeaseExpires) {
  kube_client::KubeConfig cfg = api_->config();
  LeaderElector a(cfg, election("a"));
  LeaderElector b(cfg, election("b"));
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }, seconds(5)));
  b.start();
  std::this_thread::sleep_for(milliseconds(600));  // b has watched a renew a few times
  ASSERT_FALSE(b.is_leader());

  auto killed = Clock::now();
  a.stop(/*release=*/false);  // what a crash looks like to b: renewals just stop
  EXPECT_EQ(lease()["holderIdentity"], "a");
  ASSERT_TRUE(eventually([&] { return b.is_leader(); }, seconds(8)));
  auto took = Clock::now() - killed;
  // b must see the same resourceVersion for a whole 3 s on its own clock; a renewed at most one retry before
  // it was killed, so the takeover comes no sooner than 3 s - 250 ms after the kill.
  EXPECT_GE(took, milliseconds(2700));
  EXPECT_LE(took, milliseconds(3000 + 250 + 1000));
  json spec = lease();
  EXPECT_EQ(spec["holderIdentity"], "b");
  EXPECT_EQ(spec["leaseTransitions"], 1);
  EXPECT_EQ(spec["leaseDurationSeconds"], 3);
}

TEST_F(LeaderElectionApi, HeldLeaseIsLeftAloneReleasedOneIsTakenStaleWriteConflicts) {
  kube_client::KubeConfig cfg = api_->config();
  LeaderElector a(cfg, election("a"));
  LeaderElector b(cfg, election("b"));
  ASSERT_TRUE(a.try_acquire_or_renew());  // creates the Lease
  EXPECT_FALSE(b.try_acquire_or_renew()) << "held and freshly observed: b waits a whole duration";

  // What b's write meets when a renews between b's read and b's write: the resourceVersion precondition
  // fails, so of two racing writers exactly one wins.
  auto read_by_b = client_->get(kube_client::resources::leases(), ns_, "conduit-controller");
  ASSERT_TRUE(read_by_b);
  ASSERT_TRUE(a.try_acquire_or_renew());
  json takeover = *read_by_b;
  takeover["spec"]["holderIdentity"] = "b";
  auto lost = client_->replace(kube_client::resources::leases(), ns_, "conduit-controller", takeover);
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code, ErrorCode::Conflict);
  EXPECT_EQ(lease()["holderIdentity"], "a");

  ASSERT_TRUE(a.release());
  EXPECT_EQ(lease()["holderIdentity"], "");
  EXPECT_TRUE(b.try_acquire_or_renew()) << "a released lease is taken at once";
  EXPECT_EQ(lease()["holderIdentity"], "b");
  EXPECT_EQ(lease()["leaseTransitions"], 1);
  EXPECT_FALSE(a.try_acquire_or_renew()) << "b's lease is fresh";
}

}  // namespace
}  // namespace conduit::kube::testing
