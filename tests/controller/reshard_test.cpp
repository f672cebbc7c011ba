// Strategy Reshard (docs/reshard.md, "TransferJob strategy: Reshard"): the spec's rules, the pods it runs
// over, the batches' decision as a table, the run record, and the reconciler carrying it out against a pod
// directory double and fake agents on a manual clock.
#include <gtest/gtest.h>

#include <algorithm>

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

ReconcilerOptions with(PodDirectory* pods, FabricFacts* facts) {
  ReconcilerOptions o;
  o.pods = pods;
  o.facts = facts;
  return o;
}

// An F32 [rows, cols] slice at `offset` of a [global_rows, global_cols] tensor, starting at [row, col].
api::Tensor tensor(const std::string& name, std::uint64_t offset, std::vector<std::uint64_t> shape,
                   std::vector<std::uint64_t> global, std::vector<std::uint64_t> start) {
  return {.name = name,
          .dtype = "F32",
          .shape = shape,
          .offset = offset,
          .length = shape[0] * shape[1] * 4,
          .placement = api::Placement{std::move(global), std::move(start)}};
}

// A [4, 8] tensor "w" and a [6, 4] tensor "b": by rows on the trainer ranks, by columns on the inference
// ranks.
api::Manifest rows(std::uint64_t rank) {
  return {{tensor("w", 0, {2, 8}, {4, 8}, {2 * rank, 0}), tensor("b", 64, {3, 4}, {6, 4}, {3 * rank, 0})}};
}
api::Manifest columns(std::uint64_t rank) {
  return {{tensor("w", 0, {4, 4}, {4, 8}, {0, 4 * rank}), tensor("b", 64, {6, 2}, {6, 4}, {0, 2 * rank})}};
}

// trainer-0 on node-a and trainer-1 on node-b, infer-0 on node-c and infer-1 on node-d, each sharing its
// region "weights" with its node's agent.
class ReshardReconcilerTest : public testing::ReconcilerFixture {
 protected:
  ReshardReconcilerTest() : ReconcilerFixture(with(&directory, &facts)) {
    agents.add_node("node-d");
    directory.by_query["app=trainer"] = {pod("trainer-0", "node-a"), pod("trainer-1", "node-b")};
    directory.by_query["app=infer"] = {pod("infer-0", "node-c"), pod("infer-1", "node-d")};
    shares("node-a", "trainer-0", rows(0));
    shares("node-b", "trainer-1", rows(1));
    shares("node-c", "infer-0", columns(0));
    shares("node-d", "infer-1", columns(1));
  }
  // The transfer of the batch from source pod `s` to target pod `t` (started last for that pair).
  api::TransferStatus& batch(std::uint32_t s, std::uint32_t t) {
    const auto run = RunState::from_job(store.job("sync"));
    for (const auto& b : run.reshard->batches) {
      if (b.source == s && b.target == t) return agents.transfers.at(b.transfer);
    }
    throw std::runtime_error("no such batch");
  }
  void ends(api::TransferStatus& t, const std::string& state, const std::string& reason = "") {
    t.state = state;
    t.reason = reason;
    t.message = reason.empty() ? "" : "the sums differ";
    t.bytes_done = state == "Succeeded" ? t.bytes_total : 0;
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
  FabricFacts facts;
};

TEST_F(ReshardReconcilerTest, PlansFromThePodsManifestsRetriesAFailedBatchAloneAndCommitsOnlyOnceAllLanded) {
  for (const char* node : {"node-a", "node-b", "node-c", "node-d"}) {
    NodeFacts f = NodeFacts::answered(json{{"linkBytesPerSecond", 1000}}, clock.now());
    facts.set(node, f);
  }
  put("sync", {{"backoffLimit", 2}});
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Running") << status("sync").dump(2);
  // Four pairs, one batch each, all at once; one write grant per target region.
  EXPECT_EQ(agents.starts, 4);
  EXPECT_EQ(agents.grants_made, 2);
  for (const auto& [id, request] : agents.requests) {
    EXPECT_EQ(request.source_region, "weights");
    EXPECT_EQ(request.verify, api::Verify::Crc32c);
    ASSERT_EQ(request.targets.size(), 1U);
    EXPECT_FALSE(request.targets[0].grant_id.empty()) << "crc32c sums the ops at the target's grant";
    EXPECT_FALSE(request.ops.empty());
  }
  // trainer-0 holds rows 0-1 of w, infer-1 its columns 4-7: row 0's and row 1's halves, 16 bytes each.
  const auto& t01 = agents.requests.at(batch(0, 1).id);
  // Each column piece is one strided op (a run per row), sent as the body's ops: w's two rows, then b's
  // three rows' columns 2-3.
  ASSERT_EQ(t01.ops.size(), 2U) << "w's two row pieces, then b's three rows' columns 2-3, an op each";
  EXPECT_EQ(t01.ops[0].source_offset, 16U);
  EXPECT_EQ(t01.ops[0].target_offset, 0U);
  EXPECT_EQ(t01.ops[0].length, 16U);
  EXPECT_EQ(t01.ops[0].count, 2U);
  EXPECT_EQ(t01.ops[0].source_stride, 32U);
  EXPECT_EQ(t01.ops[0].target_stride, 16U);
  EXPECT_EQ(t01.ops[1].count, 3U);
  json r = status("sync")["reshard"];
  EXPECT_EQ(r["pairs"], 4);
  EXPECT_EQ(r["batches"], 4);
  EXPECT_EQ(r["bytes"], 4 * 8 * 4 + 6 * 4 * 4);
  EXPECT_EQ(r["version"], 1);
  EXPECT_EQ(r["busiest"]["bytes"], 112);
  EXPECT_DOUBLE_EQ(r["lowerBoundSeconds"].get<double>(), 0.112);
  EXPECT_FALSE(r.value("fingerprint", "").empty());

  // Three land, trainer-1 -> infer-0 fails its checksum: nothing commits, only that batch goes again.
  ends(batch(0, 0), "Succeeded");
  ends(batch(0, 1), "Succeeded");
  ends(batch(1, 1), "Succeeded");
  ends(batch(1, 0), "Failed", "ChecksumMismatch");
  clock.advance(100ms);
  reconcile("sync");
  EXPECT_EQ(phase("sync"), "Running");
  EXPECT_TRUE(agents.commits.empty());
  EXPECT_EQ(events("Warning/BatchFailed"), 1);
  EXPECT_EQ(agents.starts, 4) << "not before its backoff";
  clock.advance(1s);
  reconcile("sync");
  ASSERT_EQ(agents.starts, 5);
  EXPECT_EQ(agents.requests.at("t-5").source_region, "weights");
  EXPECT_EQ(batch(1, 0).id, "t-5") << "the failed pair, alone";
  EXPECT_TRUE(agents.commits.empty());
  const json targets = status("sync")["targets"];
  EXPECT_EQ(targets[1]["state"], "Committing") << "every byte of infer-1 in, waiting for the others";
  EXPECT_EQ(targets[0]["version"], 0);

  ends(batch(1, 0), "Succeeded");
  clock.advance(100ms);
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Succeeded") << status("sync").dump(2);
  // The targets commit at once, in no order.
  std::sort(agents.commits.begin(), agents.commits.end());
  EXPECT_EQ(agents.commits, (std::vector<std::string>{"node-c:weights@1", "node-d:weights@1"}));
  EXPECT_EQ(agents.live_grants(), 0U) << "the grants go with the job";
  const json s = status("sync");
  EXPECT_EQ(s["targets"][0]["pod"], "infer-0");
  EXPECT_EQ(s["targets"][0]["version"], 1);
  EXPECT_EQ(s["targets"][1]["state"], "Succeeded");
  EXPECT_EQ(s["bytesTransferred"], s["bytesTotal"]);
  for (const auto& pair : s["reshard"]["pairList"]) {
    EXPECT_EQ(pair["state"], "Succeeded");
    EXPECT_EQ(pair["attempts"], pair["sourcePod"] == "trainer-1" && pair["targetPod"] == "infer-0" ? 2 : 1)
        << pair.dump();
  }
  EXPECT_GT(s["reshard"]["seconds"].get<double>(), 1.0);
  EXPECT_NEAR(s["reshard"]["againstLowerBound"].get<double>(), s["reshard"]["seconds"].get<double>() / 0.112,
              1e-6);
}

TEST_F(ReshardReconcilerTest, APlannerRefusalFailsTheJobBeforeAnyGrant) {
  api::Manifest other = columns(1);
  other.tensors[1].placement->global_shape = {6, 6};  // b is [6, 4] at the sources
  other.tensors[1].shape = {6, 2};
  shares("node-d", "infer-1", other);
  put("sync");
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Failed") << status("sync").dump(2);
  const json failed = condition("sync", "Failed");
  EXPECT_EQ(failed["reason"], "ReshardRefused");
  EXPECT_NE(failed["message"].get<std::string>().find("\"b\""), std::string::npos) << failed["message"];
  EXPECT_EQ(agents.grants_made, 0);
  EXPECT_EQ(agents.starts, 0);
  EXPECT_EQ(agents.nodes["node-c"].regions["weights"].version, 0U);
}

TEST_F(ReshardReconcilerTest, AFailedReshardCommitsNothing) {
  put("sync", {{"backoffLimit", 0}});
  reconcile("sync");
  ASSERT_EQ(agents.starts, 4);
  ends(batch(0, 0), "Succeeded");
  ends(batch(1, 1), "Failed", "ChecksumMismatch");
  reconcile("sync");
  ASSERT_EQ(phase("sync"), "Failed") << status("sync").dump(2);
  EXPECT_EQ(condition("sync", "Failed")["reason"], "BackoffLimitExceeded");
  EXPECT_NE(condition("sync", "Failed")["message"].get<std::string>().find("batch trainer-1 -> infer-1"),
            std::string::npos);
  EXPECT_TRUE(agents.commits.empty());
  EXPECT_EQ(agents.live_grants(), 0U);
  EXPECT_EQ(agents.cancelled.size(), 2U) << "the batches still running stop";
  EXPECT_EQ(status("sync")["targets"][0]["version"], 0);
}

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
