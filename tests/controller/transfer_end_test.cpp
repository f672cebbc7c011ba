// A transfer's end reaches the job when it happens, not at the controller's next look: the control loop and
// reconciler for real over a local store, fake agents whose long-poll answers when the transfer ends. Then
// the watcher that hears those ends: its bound, its cancelling and its back-off from an agent that will not
// wait.
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>

#include "eventually.h"
#include "fakes.h"
#include "reconcile/control_loop.h"
#include "reconcile/job_status.h"
#include "reconcile/reconciler.h"
#include "reconcile/transfer_watcher.h"
#include "store/local_store.h"
#include "temp_dir.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using conduit::testing::eventually;
using json = nlohmann::json;

constexpr std::uint64_t GiB = 1ULL << 30;

// FakeAgents called from several threads (workers, watches), and whose long-poll waits as an agent's does:
// until the transfer ends or the wait is up. A transfer starts Running at 1 MB/s, so a look at it
// reckons its end some minutes away.
class WaitingAgents : public testing::FakeAgents {
 public:
  // Ends the transfer started last, waking the long-polls.
  void end_last(const std::string& state) {
    {
      std::lock_guard lock(calls_mu_);
      finish(state);
    }
    ended_.notify_all();
  }
  int looks() {
    std::lock_guard lock(calls_mu_);
    return looks_;
  }
  int long_polls() {
    std::lock_guard lock(calls_mu_);
    return waits;
  }
  bool answers_long_polls = true;  // false: as an agent holding its most long-polls, it answers at once

  // A transfer running on `node` (which is added), as a watch test needs one.
  void running(const std::string& node, const std::string& id) {
    add_node(node);
    transfers[id].id = id;
    transfers[id].state = "Running";
  }

  Result<api::TransferStatus> wait_transfer(const std::string& node, const std::string& id,
                                            std::chrono::seconds wait, const std::string& ns) override {
    std::unique_lock lock(calls_mu_);
    ++waits;
    if (answers_long_polls) {
      ended_.wait_for(lock, wait, [&] { return transfers.count(id) == 0 || transfers[id].finished(); });
    }
    return FakeAgents::get_transfer(node, id, ns);
  }
  Result<api::TransferStatus> get_transfer(const std::string& node, const std::string& id,
                                           const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    ++looks_;
    return FakeAgents::get_transfer(node, id, ns);
  }
  Result<api::TransferStatus> start_transfer(const std::string& node,
                                             const api::TransferRequest& request) override {
    std::lock_guard lock(calls_mu_);
    auto t = FakeAgents::start_transfer(node, request);
    if (!t) return t;
    progress(1 << 20, /*throughput=*/1e6);
    return last();
  }
  Status cancel_transfer(const std::string& node, const std::string& id, const std::string& ns) override {
    Status s = [&] {
      std::lock_guard lock(calls_mu_);
      return FakeAgents::cancel_transfer(node, id, ns);
    }();
    ended_.notify_all();
    return s;
  }
  std::optional<std::string> url(const std::string& node) const override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::url(node);
  }
  Result<json> node_info(const std::string& node) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::node_info(node);
  }
  using FakeAgents::create_region;
  Result<api::Region> create_region(const std::string& node, const api::CreateRegion& region) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::create_region(node, region);
  }
  Result<api::Region> get_region(const std::string& node, const std::string& name) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::get_region(node, name);
  }
  Result<api::Region> load_file(const std::string& node, const std::string& name, const std::string& file,
                                const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::load_file(node, name, file, ns);
  }
  Status save_region(const std::string& node, const std::string& name, const std::string& file,
                     const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::save_region(node, name, file, ns);
  }
  Status delete_region(const std::string& node, const std::string& name, const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::delete_region(node, name, ns);
  }
  Result<std::uint64_t> file_size(const std::string& node, const std::string& file,
                                  const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::file_size(node, file, ns);
  }
  Result<api::Grant> grant(const std::string& node, const GrantAsk& ask) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::grant(node, ask);
  }
  Status revoke_grant(const std::string& node, const std::string& id, const std::string& ns) override {
    std::lock_guard lock(calls_mu_);
    return FakeAgents::revoke_grant(node, id, ns);
  }

 private:
  mutable std::mutex calls_mu_;
  std::condition_variable ended_;
  int looks_ = 0;
};

// The controller with every timer it has set long: nothing but a transfer's end can move a job on soon.
class TransferEnd : public ::testing::Test {
 protected:
  TransferEnd() {
    agents.add_node("node-a");
    agents.add_node("node-b");
    agents.nodes["node-a"].regions["weights"] = api::Region{"weights", GiB, "host"};
  }

  void apply(const std::string& name, const json& spec_overrides = json::object()) {
    json job{{"apiVersion", "conduit.dev/v1alpha1"},
             {"kind", "TransferJob"},
             {"metadata", {{"name", name}}},
             {"spec",
              {{"source", {{"node", "node-a"}, {"region", "weights"}}},
               {"targets", {{{"node", "node-b"}, {"region", name}, {"create", {{"bytes", GiB}}}}}}}}};
    job["spec"].merge_patch(spec_overrides);
    std::ofstream(dir.path() / (name + ".yaml")) << job.dump();
  }
  std::string phase(const std::string& name) {
    auto job = store.get_job({"default", name});
    return job ? job->value("status", json::object()).value("phase", "") : "";
  }

  static ReconcilerOptions long_looks() {
    ReconcilerOptions o;
    o.poll_interval = 30s;
    o.min_status_interval = 30s;
    return o;
  }
  static ControlLoopOptions long_resyncs() {
    ControlLoopOptions o;
    o.active_resync = 30s;
    o.idle_resync = 30s;
    return o;
  }

  conduit::testing::TempDir dir{"conduit-transfer-end"};
  WaitingAgents agents;
  LocalStore store{dir.path()};
  Reconciler reconciler{store, agents, system_clock(), long_looks()};
  ControlLoop loop{store, reconciler, long_resyncs()};
};

TEST_F(TransferEnd, AJobSucceedsWithinSecondsOfItsTransferEndingThoughItsNextLookIsHalfAMinuteAway) {
  apply("big");
  loop.start();
  ASSERT_TRUE(eventually([&] { return phase("big") == "Running" && agents.looks() > 0; }, 10s));
  // The look said minutes to go: the controller's own next look is 30 s out.
  agents.end_last("Succeeded");
  EXPECT_TRUE(eventually([&] { return phase("big") == phase::kSucceeded; }, 5s)) << phase("big");
  loop.stop();
}

TEST_F(TransferEnd, AFailedTransferFailsItsJobAsSoon) {
  apply("doomed", {{"backoffLimit", 0}});
  loop.start();
  ASSERT_TRUE(eventually([&] { return phase("doomed") == "Running" && agents.looks() > 0; }, 10s));
  agents.end_last("Failed");
  EXPECT_TRUE(eventually([&] { return phase("doomed") == phase::kFailed; }, 5s)) << phase("doomed");
  loop.stop();
}

TEST(TransferWatcher, WatchesUpToItsBoundPerAgentAndUnwatchingFreesAPlace) {
  WaitingAgents agents;
  for (const auto* id : {"t-1", "t-2", "t-3", "t-5", "t-6"}) agents.running("node-a", id);
  agents.running("node-b", "t-4");
  TransferWatcher watcher(agents, {.wait = 1s, .max_watches = 3, .per_node = 2});
  watcher.start([](const ObjectKey&) {});
  EXPECT_TRUE(watcher.watch({"default", "a"}, {"node-a", "t-1", "default"}));
  EXPECT_TRUE(watcher.watch({"default", "a"}, {"node-a", "t-1", "default"}));  // the same: still one
  EXPECT_TRUE(watcher.watch({"default", "b"}, {"node-a", "t-2", "default"}));
  EXPECT_FALSE(watcher.watch({"default", "c"}, {"node-a", "t-3", "default"}));  // node-a's two are taken
  EXPECT_TRUE(watcher.watch({"default", "c"}, {"node-b", "t-4", "default"}));
  EXPECT_FALSE(watcher.watch({"default", "d"}, {"node-b", "t-5", "default"}));  // three in all
  watcher.unwatch({"default", "b"});
  // b's long-poll holds its place at the agent until it comes back (at most the wait).
  EXPECT_TRUE(eventually([&] { return watcher.watch({"default", "d"}, {"node-a", "t-5", "default"}); }, 5s));
  watcher.stop();
  EXPECT_EQ(watcher.watching(), 0u);
  EXPECT_FALSE(watcher.watch({"default", "e"}, {"node-a", "t-6", "default"}));  // stopped
}

TEST(TransferWatcher, AnAgentThatWillNotWaitIsAskedAfterABackOffNotInALoop) {
  WaitingAgents agents;
  agents.running("node-a", "t-1");
  agents.answers_long_polls = false;
  TransferWatcher watcher(agents, {.wait = 1s, .backoff = 200ms, .max_backoff = 400ms});
  watcher.start([](const ObjectKey&) {});
  ASSERT_TRUE(watcher.watch({"default", "a"}, {"node-a", "t-1", "default"}));
  std::this_thread::sleep_for(1s);
  watcher.stop();
  // About four asks in that second; a watch that asked again at once would have made thousands.
  EXPECT_LE(agents.long_polls(), 20);
  EXPECT_GE(agents.long_polls(), 1);
}

}  // namespace
}  // namespace conduit::controller
