// Strategy Reshard (docs/reshard.md, "TransferJob strategy: Reshard"): the spec's rules, the pods it runs
// over, the batches' decision as a table, the run record, and the reconciler carrying it out against a pod
// directory double and fake agents on a manual clock.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "reconcile/job_status.h"
#include "reconcile/pods.h"
#include "reconcile/reconciler.h"
#include "reconcile/reshard_run.h"
#include "reconcile/run_state.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

json reshard_spec(const json& overrides = json::object()) {
  json s{{"strategy", "Reshard"},
         {"source", {{"podSelector", {{"matchLabels", {{"app", "trainer"}}}}}, {"region", "weights"}}},
         {"targets", {{{"podSelector", {{"matchLabels", {{"app", "infer"}}}}}, {"region", "weights"}}}}};
  s.merge_patch(overrides);
  return s;
}

TEST(ReshardSpec, IsOneSourcePodSelectorIntoOneTargetPodSelector) {
  const auto s = testing::parsed(reshard_spec());
  EXPECT_EQ(s.strategy, Strategy::Reshard);
  EXPECT_TRUE(s.verify) << "crc32c is the default";
  EXPECT_TRUE(testing::parsed(reshard_spec({{"verify", "none"}, {"backoffLimit", 5}})).backoff_limit == 5);
  const json inference = {{"podSelector", {{"matchLabels", {{"app", "infer"}}}}}, {"region", "weights"}};
  const std::pair<json, std::string> bad[] = {
      {{{"source", {{"podSelector", nullptr}, {"node", "node-a"}}}},
       "strategy Reshard needs source.podSelector with region"},
      {{{"targets", {inference, inference}}}, "strategy Reshard needs exactly one target"},
      {{{"targets", {{{"node", "node-b"}, {"region", "weights"}}}}},
       "strategy Reshard needs a podSelector target"},
      {{{"tensors", {"model.*"}}, {"verify", "none"}}, "cannot be used with strategy Reshard"},
      {{{"maxBytesPerSecond", 1000}}, "cannot be used with strategy Reshard: a scatter batch is not paced"},
  };
  for (const auto& [patch, message] : bad) {
    auto parsed = TransferJobSpec::parse(reshard_spec(patch));
    ASSERT_FALSE(parsed) << patch.dump();
    EXPECT_NE(parsed.error().message.find(message), std::string::npos) << parsed.error().message;
  }
}

json pod(const std::string& name, const std::string& node) {
  return {{"metadata", {{"name", name}, {"uid", "uid-" + name}, {"namespace", "default"}}},
          {"spec", {{"nodeName", node}}},
          {"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
}

TEST(ReshardPods, EveryReadySourcePodIsASourceInNameOrder) {
  std::map<std::string, std::vector<json>> pods{
      {"app=trainer", {pod("trainer-1", "node-b"), pod("trainer-0", "node-a")}},
      {"app=infer", {pod("infer-0", "node-c")}}};
  auto list = [&](const std::string& q) -> Result<std::vector<json>> { return pods[q]; };
  const auto r = resolve_pods(testing::parsed(reshard_spec()), "default", list);
  ASSERT_EQ(r.verdict, PodResolution::Verdict::Go) << r.message;
  ASSERT_EQ(r.spec->sources.size(), 2U);
  EXPECT_EQ(r.spec->sources[0].pod->name, "trainer-0");
  EXPECT_EQ(r.spec->sources[0].node, "node-a");
  EXPECT_EQ(r.spec->sources[1].pod->name, "trainer-1");
  EXPECT_EQ(r.spec->source.node, "node-a");
  EXPECT_EQ(r.spec->strategy, Strategy::Reshard) << "one target pod is still a Reshard";
  ASSERT_EQ(r.spec->targets.size(), 1U);
  EXPECT_EQ(r.spec->targets[0].pod->name, "infer-0");
  // As the run annotation gives them back to a restarted controller.
  auto again = with_pods(testing::parsed(reshard_spec()), r.pods);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->sources.size(), 2U);

  // Another strategy's source selector still picks exactly one pod.
  auto fanout = reshard_spec({{"strategy", "Fanout"}});
  const auto one = resolve_pods(testing::parsed(fanout), "default", list);
  EXPECT_EQ(one.verdict, PodResolution::Verdict::Fail);
  EXPECT_EQ(one.reason, "AmbiguousPodSelector");

  // A target pod's region that is a source pod's region is refused.
  pods["app=infer"] = {pod("infer-0", "node-a")};
  const auto same = resolve_pods(testing::parsed(reshard_spec()), "default", list);
  EXPECT_EQ(same.verdict, PodResolution::Verdict::Fail);
  EXPECT_NE(same.message.find("a target pod's region is a source pod's region"), std::string::npos)
      << same.message;
}

// --- the batches' decision ---

ReshardRun three_batches() {
  ReshardRun run;
  run.fingerprint = "fp";
  run.from_version = 4;
  for (std::uint32_t i = 0; i < 3; ++i) {
    run.batches.push_back({.source = i % 2, .target = i / 2, .bytes = 100, .ops = 2});
  }
  run.committed = {false, false};
  return run;
}

std::string pair_name(const ReshardBatch& b) {
  return "s" + std::to_string(b.source) + " -> t" + std::to_string(b.target);
}

BatchSeen answered(const std::string& state, const std::string& reason = "",
                   const std::string& message = "") {
  BatchSeen s;
  s.kind = BatchSeen::Kind::Answered;
  s.transfer.state = state;
  s.transfer.reason = reason;
  s.transfer.message = message;
  return s;
}

TEST(StepReshard, AFailedBatchIsRetriedAloneAfterItsBackoffUpToBackoffLimit) {
  const auto spec = testing::parsed(reshard_spec({{"backoffLimit", 1}}));
  const TimePoint t0 = std::chrono::system_clock::from_time_t(1'800'000'000);
  ReshardRun run = three_batches();
  auto step = step_reshard(run, {}, spec, t0, pair_name);
  ASSERT_EQ(step.kind, ReshardStep::Kind::Start);
  EXPECT_EQ(step.start, (std::vector<std::size_t>{0, 1, 2}));
  for (auto& b : run.batches) {
    b.state = ReshardBatch::State::Running;
    b.attempts = 1;
  }
  // One succeeds, one fails, one runs on.
  step = step_reshard(run, {answered("Succeeded"), answered("Failed", "ChecksumMismatch", "sums differ"), {}},
                      spec, t0, pair_name);
  EXPECT_EQ(step.kind, ReshardStep::Kind::Wait);
  EXPECT_EQ(run.batches[0].state, ReshardBatch::State::Succeeded);
  EXPECT_EQ(run.batches[1].state, ReshardBatch::State::Pending);
  EXPECT_EQ(run.batches[1].not_before, t0 + 1s);
  EXPECT_EQ(run.batches[2].state, ReshardBatch::State::Running);
  step = step_reshard(run, {}, spec, t0 + 1s, pair_name);
  ASSERT_EQ(step.kind, ReshardStep::Kind::Start);
  EXPECT_EQ(step.start, (std::vector<std::size_t>{1})) << "only the failed batch goes again";
  run.batches[1].state = ReshardBatch::State::Running;
  run.batches[1].attempts = 2;
  // Its second failure is past backoffLimit 1: the job fails, naming the pair.
  step = step_reshard(run, {{}, answered("Failed", "PeerUnreachable", "gone")}, spec, t0 + 2s, pair_name);
  ASSERT_EQ(step.kind, ReshardStep::Kind::Fail);
  EXPECT_EQ(step.reason, "BackoffLimitExceeded");
  EXPECT_NE(step.message.find("batch s1 -> t0 failed 2 times"), std::string::npos) << step.message;
}

TEST(StepReshard, APermanentReasonFailsAtOnceAndAllLandedCommitsThenCompletes) {
  const auto spec = testing::parsed(reshard_spec());
  const TimePoint t0 = std::chrono::system_clock::from_time_t(1'800'000'000);
  ReshardRun run = three_batches();
  for (auto& b : run.batches) {
    b.state = ReshardBatch::State::Running;
    b.attempts = 1;
  }
  ReshardRun lost = run;
  auto step = step_reshard(lost, {answered("Failed", "RegionNotFound", "no region")}, spec, t0, pair_name);
  EXPECT_EQ(step.kind, ReshardStep::Kind::Fail);
  EXPECT_EQ(step.reason, "RegionNotFound");

  // A source agent that does not answer is waited for within the grace, then counts as a failure.
  BatchSeen silent;
  silent.kind = BatchSeen::Kind::Unreachable;
  silent.unreachable_for = 2s;
  ReshardRun waiting = run;
  step = step_reshard(waiting, {silent}, spec, t0, pair_name);
  EXPECT_EQ(step.kind, ReshardStep::Kind::Wait);
  EXPECT_EQ(waiting.batches[0].state, ReshardBatch::State::Running);
  silent.unreachable_for = 11s;
  step = step_reshard(waiting, {silent}, spec, t0, pair_name);
  EXPECT_EQ(waiting.batches[0].state, ReshardBatch::State::Pending);
  EXPECT_EQ(waiting.batches[0].reason, "PeerUnreachable");

  step = step_reshard(run, {answered("Succeeded"), answered("Succeeded")}, spec, t0, pair_name);
  EXPECT_EQ(step.kind, ReshardStep::Kind::Wait) << "one batch still runs: nothing commits";
  step = step_reshard(run, {{}, {}, answered("Succeeded")}, spec, t0, pair_name);
  EXPECT_EQ(step.kind, ReshardStep::Kind::Commit);
  run.committed = {true, true};
  EXPECT_EQ(step_reshard(run, {}, spec, t0, pair_name).kind, ReshardStep::Kind::Complete);
}

TEST(ReshardRunRecord, RoundTripsThroughTheRunAnnotation) {
  RunState run;
  run.attempt = 1;
  run.reshard = three_batches();
  run.reshard->figures = {
      .bytes = 300, .busiest_target = true, .busiest = 1, .busiest_bytes = 200, .lower_bound_seconds = 0.5};
  run.reshard->batches[1].state = ReshardBatch::State::Pending;
  run.reshard->batches[1].attempts = 2;
  run.reshard->batches[1].transfer = "t-9";
  run.reshard->batches[1].not_before = std::chrono::system_clock::from_time_t(1'800'000'000);
  run.reshard->committed = {true, false};
  json job{{"metadata", {{"annotations", {{kRunAnnotation, run.to_annotation()}}}}}};
  EXPECT_EQ(RunState::from_job(job), run);
}

// --- the reconciler ---

class FakePods : public PodDirectory {
 public:
  Result<std::vector<json>> list_pods(const std::string&, const std::string& selector) override {
    return by_query[selector];
  }
  std::map<std::string, std::vector<json>> by_query;
};

ReconcilerOptions with(PodDirectory* pods) {
  ReconcilerOptions o;
  o.pods = pods;
  return o;
}

api::Tensor tensor(const std::string& name, std::uint64_t offset, std::uint64_t rows, std::uint64_t cols) {
  return {.name = name, .dtype = "F32", .shape = {rows, cols}, .offset = offset, .length = rows * cols * 4};
}

// trainer-0 on node-a and trainer-1 on node-b, infer-0 on node-c and infer-1 on node-d, each sharing its
// region "weights" with its node's agent.
class ReshardReconcilerTest : public testing::ReconcilerFixture {
 protected:
  ReshardReconcilerTest() : ReconcilerFixture(with(&directory)) {
    agents.add_node("node-d");
    directory.by_query["app=trainer"] = {pod("trainer-0", "node-a"), pod("trainer-1", "node-b")};
    directory.by_query["app=infer"] = {pod("infer-0", "node-c"), pod("infer-1", "node-d")};
    for (const auto& [node, name] : {std::pair{"node-a", "trainer-0"}, std::pair{"node-b", "trainer-1"},
                                     std::pair{"node-c", "infer-0"}, std::pair{"node-d", "infer-1"}}) {
      shares(node, name, api::Manifest{{tensor("w", 0, 4, 4)}});
    }
  }
  void shares(const std::string& node, const std::string& pod_name, const std::optional<api::Manifest>& m) {
    api::Region r{"weights", 1 << 10, "host"};
    r.source = "imported";
    r.imported_by = {{"pid", 4242}, {"uid", 0}, {"podUID", "uid-" + pod_name}};
    if (m) {
      r.tensors = m->tensors.size();
      agents.nodes[node].manifests["weights"] = *m;
    } else {
      agents.nodes[node].manifests.erase("weights");
    }
    agents.nodes[node].regions["weights"] = r;
  }
  void put(const std::string& name, const json& overrides = json::object()) {
    store.put(testing::transfer_job(name, reshard_spec(overrides)));
  }

  FakePods directory;
};

TEST_F(ReshardReconcilerTest, TargetsAtDifferentVersionsAreRefusedBeforeAnyGrant) {
  agents.nodes["node-c"].regions["weights"].version = 3;
  agents.nodes["node-d"].regions["weights"].version = 2;
  put("sync");
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Failed") << status("sync").dump(2);
  const json failed = condition("sync", "Failed");
  EXPECT_EQ(failed["reason"], "TargetVersionsDiffer");
  EXPECT_NE(
      failed["message"].get<std::string>().find("infer-0 (\"weights\" on node \"node-c\") at 3, infer-1 "
                                                "(\"weights\" on node \"node-d\") at 2"),
      std::string::npos)
      << failed["message"];
  EXPECT_EQ(agents.grants_made, 0);
  EXPECT_EQ(agents.starts, 0);
}

TEST_F(ReshardReconcilerTest, ARegionWithoutAManifestIsRefusedBeforeAnyGrant) {
  shares("node-b", "trainer-1", std::nullopt);
  put("sync");
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Failed") << status("sync").dump(2);
  EXPECT_EQ(condition("sync", "Failed")["reason"], "ReshardRefused");
  EXPECT_NE(condition("sync", "Failed")["message"].get<std::string>().find(
                "source region \"weights\" of pod trainer-1 on node \"node-b\" has no manifest"),
            std::string::npos)
      << condition("sync", "Failed")["message"];
  EXPECT_EQ(agents.grants_made, 0);
}

TEST_F(ReshardReconcilerTest, LocalModeHasNoPodsAndSaysSo) {
  Reconciler local(store, agents, clock.clock());
  put("sync");
  local.reconcile({"default", "sync"});
  EXPECT_EQ(phase("sync"), "Failed");
  EXPECT_EQ(condition("sync", "Failed")["reason"], "Unsupported");
}

}  // namespace
}  // namespace conduit::controller
