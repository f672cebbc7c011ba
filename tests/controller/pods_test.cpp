// podSelector sources and targets: the selector as the API server's query, which pods a job picks (Ready
// ones, in name order, the rest listed with why), the job over them, and the reconciler carrying it out
// against a pod directory double, fake agents and a manual clock.
#include "reconcile/pods.h"

#include <gtest/gtest.h>

#include "fixtures.h"
#include "reconcile/job_status.h"
#include "reconcile/reconciler.h"
#include "reconcile/run_state.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

std::optional<LabelSelector> selector(const json& j, std::string* problems = nullptr) {
  JsonProblems p(JsonProblems::Keep::All);
  auto s = LabelSelector::parse(j, "spec.source.podSelector", p);
  if (problems != nullptr) *problems = p.message();
  return s;
}

TEST(LabelSelector, IsWrittenAsTheApiServersQuery) {
  auto s = selector({{"matchLabels", {{"app", "infer"}, {"example.com/tier", "gpu"}}},
                     {"matchExpressions",
                      {{{"key", "zone"}, {"operator", "In"}, {"values", {"a", "b"}}},
                       {{"key", "track"}, {"operator", "NotIn"}, {"values", {"canary"}}},
                       {{"key", "ready"}, {"operator", "Exists"}},
                       {{"key", "draining"}, {"operator", "DoesNotExist"}}}}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->to_query(),
            "app=infer,example.com/tier=gpu,zone in (a,b),track notin (canary),ready,!draining");
}

TEST(LabelSelector, RefusesWhatCouldChangeTheQueryAndSaysWhere) {
  std::string why;
  EXPECT_FALSE(selector({{"matchLabels", {{"app", "a,b=c"}}}}, &why));
  EXPECT_NE(why.find("spec.source.podSelector.matchLabels.app: \"a,b=c\" is not a label value"),
            std::string::npos)
      << why;
  EXPECT_FALSE(selector({{"matchExpressions", {{{"key", "app)"}, {"operator", "Exists"}}}}}, &why));
  EXPECT_NE(why.find("is not a label key"), std::string::npos) << why;
  EXPECT_FALSE(selector({{"matchExpressions", {{{"key", "app"}, {"operator", "In"}}}}}, &why));
  EXPECT_NE(why.find("operators In and NotIn need values"), std::string::npos) << why;
  EXPECT_FALSE(selector({{"matchExpressions", {{{"key", "app"}, {"operator", "Near"}}}}}, &why));
  EXPECT_NE(why.find("\"Near\" is not one of In, NotIn, Exists, DoesNotExist"), std::string::npos) << why;
  EXPECT_FALSE(selector(json::object(), &why));
  EXPECT_NE(why.find("must not be empty (it would match every pod)"), std::string::npos) << why;
}

json spec_json(const json& overrides = json::object()) {
  json s{{"source", {{"node", "node-a"}, {"region", "weights"}}},
         {"targets", {{{"podSelector", {{"matchLabels", {{"app", "infer"}}}}}, {"region", "kv"}}}},
         {"strategy", "Fanout"}};
  s.merge_patch(overrides);
  return s;
}

// The spec's override for one target: the region kv of each app=infer pod, shared by container NAME.
json in_container(const std::string& name) {
  return {
      {"targets",
       {{{"podSelector", {{"matchLabels", {{"app", "infer"}}}}}, {"region", "kv"}, {"container", name}}}}};
}

TransferJobSpec spec(const json& overrides = json::object()) { return testing::parsed(spec_json(overrides)); }

TEST(PodSpec, ATargetIsANodeOrAPodSelectorWithARegionOnly) {
  EXPECT_TRUE(spec().selects_pods());
  EXPECT_EQ(spec().targets[0].pod_selector->to_query(), "app=infer");
  const std::pair<json, std::string> bad[] = {
      {{{"targets",
         {{{"node", "node-b"}, {"podSelector", {{"matchLabels", {{"app", "x"}}}}}, {"region", "kv"}}}}},
       "a target needs exactly one of node or podSelector"},
      {{{"targets", {{{"podSelector", {{"matchLabels", {{"app", "x"}}}}}, {"file", "kv.bin"}}}}},
       "a podSelector target is the region each pod shared"},
      {{{"targets",
         {{{"podSelector", {{"matchLabels", {{"app", "x"}}}}},
           {"region", "kv"},
           {"create", {{"bytes", 1}}}}}}},
       "a podSelector target is the region each pod shared"},
      {{{"targets", {{{"podSelector", json::object()}, {"region", "kv"}}}}}, "must not be empty"},
      {{{"transport", {{"type", "shm"}}}},
       "transport shm needs source.node and every target on the source's node"},
  };
  for (const auto& [patch, message] : bad) {
    auto parsed = TransferJobSpec::parse(spec_json(patch));
    ASSERT_FALSE(parsed) << patch.dump();
    EXPECT_NE(parsed.error().message.find(message), std::string::npos) << parsed.error().message;
  }
}

json pod(const std::string& name, const std::string& node, bool ready = true) {
  json p{
      {"metadata", {{"name", name}, {"uid", "uid-" + name}, {"namespace", "default"}}},
      {"spec", json::object()},
      {"status",
       {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  if (!ready) p["status"]["conditions"][0]["reason"] = "ContainersNotReady";
  return p;
}

// The API server as the pod directory double sees it: pods per selector query.
struct Pods {
  std::map<std::string, std::vector<json>> by_query;
  std::optional<Error> error;
  std::vector<std::string> asked;
  Result<std::vector<json>> operator()(const std::string& query) {
    asked.push_back(query);
    if (error) return *error;
    return by_query[query];
  }
};

TEST(ResolvePods, ReadyPodsBecomeTargetsInNameOrderAndTheRestAreListedWithWhy) {
  Pods pods;
  pods.by_query["app=infer"] = {pod("infer-2", "node-c"), pod("infer-0", "node-b"),
                                pod("infer-9", "node-d", false), pod("infer-5", ""),
                                pod("infer-1", "node-d")};
  const auto r = resolve_pods(spec(), "default", std::ref(pods));
  ASSERT_EQ(r.verdict, PodResolution::Verdict::Go) << r.message;
  ASSERT_EQ(r.pods.size(), 5U);
  ASSERT_TRUE(r.spec);
  auto over = with_pods(spec(), r.pods);
  ASSERT_TRUE(over) << over.error().message;
  ASSERT_EQ(over->targets.size(), 3U);
  EXPECT_EQ(r.spec->targets.size(), 3U) << "the resolution carries the job over its pods";
  const std::pair<const char*, const char*> expect[] = {
      {"infer-0", "node-b"}, {"infer-1", "node-d"}, {"infer-2", "node-c"}};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(over->targets[i].pod->name, expect[i].first);
    EXPECT_EQ(over->targets[i].pod->uid, std::string("uid-") + expect[i].first);
    EXPECT_EQ(over->targets[i].node, expect[i].second);
    EXPECT_EQ(over->targets[i].region, "kv");
  }
  const json status = pods_status(r.pods);
  EXPECT_EQ(status[3]["name"], "infer-5");
  EXPECT_EQ(status[3]["state"], "LeftOut");
  EXPECT_EQ(status[3]["message"], "the pod is not scheduled to a node yet");
  EXPECT_EQ(status[4]["name"], "infer-9");
  EXPECT_EQ(status[4]["message"], "the pod is not Ready (ContainersNotReady)");
  EXPECT_EQ(status[0]["state"], "Selected");
  EXPECT_EQ(status[0]["role"], "target");
}

TEST(ResolvePods, NoReadyPodWaitsSayingWhatItLookedFor) {
  Pods pods;
  pods.by_query["app=infer"] = {pod("infer-0", "node-b", false)};
  const auto r = resolve_pods(spec(), "team-a", std::ref(pods));
  EXPECT_EQ(r.verdict, PodResolution::Verdict::Wait);
  EXPECT_EQ(r.reason, "NoReadyPods");
  EXPECT_EQ(
      r.message,
      "waiting for a Ready pod: targets[0].podSelector \"app=infer\" in namespace team-a matches 1 pod(s), "
      "none Ready: infer-0: the pod is not Ready (ContainersNotReady)");
  pods.by_query["app=infer"].clear();
  EXPECT_EQ(
      resolve_pods(spec(), "team-a", std::ref(pods)).message,
      "waiting for a Ready pod: targets[0].podSelector \"app=infer\" in namespace team-a matches no pod");
}

TEST(ResolvePods, ASourceIsExactlyOnePod) {
  const auto s =
      spec({{"source", {{"node", nullptr}, {"podSelector", {{"matchLabels", {{"app", "trainer"}}}}}}},
            {"targets", {{{"node", "node-b"}, {"region", "kv"}}}},
            {"strategy", "PointToPoint"}});
  Pods pods;
  pods.by_query["app=trainer"] = {pod("trainer-0", "node-a")};
  auto r = resolve_pods(s, "default", std::ref(pods));
  ASSERT_EQ(r.verdict, PodResolution::Verdict::Go) << r.message;
  auto over = with_pods(s, r.pods);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->source.node, "node-a");
  EXPECT_EQ(over->source.pod->name, "trainer-0");
  EXPECT_FALSE(over->selects_pods());

  pods.by_query["app=trainer"].push_back(pod("trainer-1", "node-c"));
  r = resolve_pods(s, "default", std::ref(pods));
  EXPECT_EQ(r.verdict, PodResolution::Verdict::Fail);
  EXPECT_EQ(r.reason, "AmbiguousPodSelector");
  EXPECT_NE(r.message.find("matches 2 Ready pods (trainer-0, trainer-1)"), std::string::npos) << r.message;
}

TEST(ResolvePods, TheJobOverItsPodsMustStillBeAValidSpec) {
  Pods pods;
  pods.by_query["app=infer"] = {pod("infer-0", "node-b"), pod("infer-1", "node-c")};
  auto r = resolve_pods(spec({{"strategy", "PointToPoint"}}), "default", std::ref(pods));
  EXPECT_EQ(r.verdict, PodResolution::Verdict::Fail);
  EXPECT_EQ(r.reason, "InvalidSpec");
  EXPECT_NE(
      r.message.find("strategy PointToPoint needs exactly one target, and the podSelector picked 2 pods"),
      std::string::npos)
      << r.message;
  // The source region is node-b's "kv": a pod on node-b would be asked to write into the source itself.
  r = resolve_pods(spec({{"source", {{"node", "node-b"}, {"region", "kv"}}}}), "default", std::ref(pods));
  EXPECT_EQ(r.verdict, PodResolution::Verdict::Fail);
  EXPECT_NE(r.message.find(
                "a target may not be the source region itself (same node and same region) (pod infer-0)"),
            std::string::npos)
      << r.message;
  // One pod picked for a Fanout: it runs as PointToPoint.
  pods.by_query["app=infer"].pop_back();
  r = resolve_pods(spec(), "default", std::ref(pods));
  ASSERT_EQ(r.verdict, PodResolution::Verdict::Go);
  EXPECT_EQ(with_pods(spec(), r.pods)->strategy, Strategy::PointToPoint);
}

TEST(ResolvePods, AListRefusedFailsAndAnApiServerAwayWaits) {
  Pods pods;
  pods.error = Error{ErrorCode::RemoteAccess, "HTTP 403: pods is forbidden"};
  auto r = resolve_pods(spec(), "default", std::ref(pods));
  EXPECT_EQ(r.verdict, PodResolution::Verdict::Fail);
  EXPECT_EQ(r.reason, "PodsUnknown");
  EXPECT_NE(r.message.find("pods is forbidden"), std::string::npos);
  pods.error = Error{ErrorCode::Unavailable, "HTTP 503"};
  EXPECT_EQ(resolve_pods(spec(), "default", std::ref(pods)).verdict, PodResolution::Verdict::Wait);
}

TEST(ResolvePods, AContainerNamedPicksItsRuntimeIdAndLeavesOutPodsWhereItHasNotStarted) {
  auto s = spec(in_container("server"));
  json started = pod("infer-0", "node-b");
  started["status"]["containerStatuses"] = {{{"name", "sidecar"}, {"containerID", "containerd://5555"}},
                                            {{"name", "server"}, {"containerID", "containerd://0a1b2c"}}};
  json waiting = pod("infer-1", "node-c");
  waiting["status"]["containerStatuses"] = {{{"name", "server"}}};
  Pods pods;
  pods.by_query["app=infer"] = {started, waiting};
  const auto r = resolve_pods(s, "default", std::ref(pods));
  ASSERT_EQ(r.verdict, PodResolution::Verdict::Go) << r.message;
  EXPECT_EQ(r.pods[0].container_id, "0a1b2c");
  EXPECT_FALSE(r.pods[1].selected);
  EXPECT_EQ(r.pods[1].why, "the pod has no started container \"server\"");
  EXPECT_EQ(with_pods(s, r.pods)->targets[0].pod->container_id, "0a1b2c");
  auto bad = TransferJobSpec::parse(
      spec_json({{"targets", {{{"node", "node-b"}, {"region", "kv"}, {"container", "server"}}}},
                 {"strategy", "PointToPoint"}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("container applies to a podSelector"), std::string::npos)
      << bad.error().message;
}

TEST(ResolvePods, ThePickSurvivesTheRunAnnotation) {
  Pods pods;
  pods.by_query["app=infer"] = {pod("infer-0", "node-b"), pod("infer-1", "node-c", false)};
  RunState run;
  run.pods = resolve_pods(spec(), "default", std::ref(pods)).pods;
  json job{{"metadata", {{"annotations", {{kRunAnnotation, run.to_annotation()}}}}}};
  EXPECT_EQ(RunState::from_job(job), run);
}

// --- the reconciler carrying it out ---

class FakePods : public PodDirectory {
 public:
  Result<std::vector<json>> list_pods(const std::string& ns, const std::string& selector) override {
    EXPECT_EQ(ns, "default");
    return pods(selector);
  }
  Pods pods;
};

json job(const std::string& name, const json& spec_overrides = json::object()) {
  return testing::transfer_job(name, spec_json(spec_overrides));
}

ReconcilerOptions with(PodDirectory* pods) {
  ReconcilerOptions o;
  o.pods = pods;
  return o;
}

// node-a's region "weights" is the source of spec_json()'s jobs.
class PodReconcilerTest : public testing::ReconcilerFixture {
 protected:
  PodReconcilerTest() : ReconcilerFixture(with(&directory)) {
    agents.nodes["node-a"].regions["weights"] = api::Region{"weights", 1 << 20, "host"};
  }
  // What a process of `pod` shares over the import socket: the agent records the pod's UID.
  void shares(const std::string& node, const std::string& pod_name) {
    api::Region r{"kv", 1 << 20, "host"};
    r.source = "imported";
    r.imported_by = {{"pid", 4242}, {"uid", 0}, {"podUID", "uid-" + pod_name}};
    agents.nodes[node].regions["kv"] = r;
  }

  FakePods directory;
};

TEST_F(PodReconcilerTest, NoReadyPodHoldsTheJobPendingThenItRunsOverThePodsPickedAtItsStart) {
  store.put(job("kv", {{"backoffLimit", 0}}));
  reconcile("kv");
  EXPECT_EQ(phase("kv"), "Pending");
  EXPECT_EQ(condition("kv", "Running")["reason"], "NoReadyPods");
  EXPECT_EQ(agents.starts, 0);
  clock.advance(1s);
  reconcile("kv");
  EXPECT_EQ(status("kv").value("retries", 0), 0) << "waiting spends no attempt";

  directory.pods.by_query["app=infer"] = {pod("infer-0", "node-b"), pod("infer-1", "node-c"),
                                          pod("infer-2", "node-c", false)};
  shares("node-b", "infer-0");
  shares("node-c", "infer-1");
  clock.advance(1s);
  reconcile("kv");
  ASSERT_EQ(phase("kv"), "Running") << status("kv").dump(2);
  const json targets = status("kv")["targets"];
  ASSERT_EQ(targets.size(), 2U);
  EXPECT_EQ(targets[0]["pod"], "infer-0");
  EXPECT_EQ(targets[0]["node"], "node-b");
  EXPECT_EQ(targets[1]["pod"], "infer-1");
  EXPECT_EQ(status("kv")["pods"][2]["state"], "LeftOut");
  EXPECT_EQ(agents.last().targets.size(), 2U);

  // A pod that turns Ready now is not added: the job runs over what it picked, after a restart too.
  directory.pods.by_query["app=infer"][2] = pod("infer-2", "node-c");
  const std::size_t asked = directory.pods.asked.size();
  Reconciler restarted(store, agents, clock.clock(), with(&directory));
  agents.finish("Succeeded");
  restarted.reconcile({"default", "kv"});
  EXPECT_EQ(phase("kv"), "Succeeded") << status("kv").dump(2);
  EXPECT_EQ(status("kv")["targets"].size(), 2U);
  EXPECT_EQ(directory.pods.asked.size(), asked) << "the pick is not taken again";
}

TEST_F(PodReconcilerTest, ARegionThePodDidNotShareFailsTheJobNamingWhoMadeIt) {
  directory.pods.by_query["app=infer"] = {pod("infer-0", "node-b")};
  agents.nodes["node-b"].regions["kv"] = api::Region{"kv", 1 << 20, "host"};  // POST /v1/regions, no pod
  store.put(job("kv"));
  reconcile("kv");
  EXPECT_EQ(phase("kv"), "Failed");
  EXPECT_EQ(condition("kv", "Failed")["reason"], "RegionNotOwnedByPod");
  EXPECT_EQ(
      condition("kv", "Failed")["message"],
      "target region \"kv\" on node \"node-b\" was not shared by pod infer-0 (UID uid-infer-0) but made by "
      "the agent's API");
  EXPECT_EQ(agents.grants_made, 0);
}

TEST_F(PodReconcilerTest, ARegionAnotherContainerOfThePodSharedIsNotTheNamedContainers) {
  json p = pod("infer-0", "node-b");
  p["status"]["containerStatuses"] = {{{"name", "server"}, {"containerID", "containerd://0a1b2c"}}};
  directory.pods.by_query["app=infer"] = {p};
  shares("node-b", "infer-0");
  agents.nodes["node-b"].regions["kv"].imported_by["containerID"] = "ffff";  // the sidecar's
  store.put(job("kv", in_container("server")));
  reconcile("kv");
  EXPECT_EQ(phase("kv"), "Failed");
  EXPECT_EQ(condition("kv", "Failed")["reason"], "RegionNotOwnedByPod");
  EXPECT_EQ(
      condition("kv", "Failed")["message"],
      "target region \"kv\" on node \"node-b\" was shared by another container of pod infer-0 than the one "
      "the job names (container ID 0a1b2c)");
  agents.nodes["node-b"].regions["kv"].imported_by["containerID"] = "0a1b2c";
  store.put(job("kv2", in_container("server")));
  reconciler.reconcile({"default", "kv2"});
  EXPECT_EQ(phase("kv2"), "Running") << status("kv2").dump(2);
}

TEST_F(PodReconcilerTest, APodsRegionNamedByNodeAndRegionFailsTheJobPointingAtThePodSelector) {
  shares("node-b", "infer-0");
  store.put(job("kv", {{"strategy", "PointToPoint"}, {"targets", {{{"node", "node-b"}, {"region", "kv"}}}}}));
  reconcile("kv");
  EXPECT_EQ(phase("kv"), "Failed");
  EXPECT_EQ(condition("kv", "Failed")["reason"], "RegionOwnedByPod");
  EXPECT_EQ(
      condition("kv", "Failed")["message"],
      "target region \"kv\" on node \"node-b\" was shared by pod UID uid-infer-0: a TransferJob reaches it "
      "only through a podSelector that picks that pod (docs/pods.md)");
  EXPECT_EQ(agents.grants_made, 0);
}

TEST_F(PodReconcilerTest, HeldPastTheDeadlineTheJobFailsWithNoReadyPods) {
  store.put(job("kv", {{"activeDeadlineSeconds", 2}}));
  reconcile("kv");
  clock.advance(2s);
  reconcile("kv");
  EXPECT_EQ(phase("kv"), "Failed");
  EXPECT_EQ(condition("kv", "Failed")["reason"], "NoReadyPods");
  EXPECT_EQ(condition("kv", "Failed")["message"].get<std::string>().rfind(
                "activeDeadlineSeconds (2 s) passed while waiting for a Ready pod", 0),
            0U)
      << condition("kv", "Failed");
}

// No pod directory in the reconciler's options: local mode's.
using PodReconciler = testing::ReconcilerFixture;

TEST_F(PodReconciler, LocalModeHasNoPodsAndSaysSo) {
  store.put(job("kv"));
  reconciler.reconcile({"default", "kv"});
  const json s = store.job("kv")["status"];
  EXPECT_EQ(s["phase"], "Failed");
  EXPECT_EQ(find_condition(s, "Failed")->value("reason", ""), "Unsupported");
  EXPECT_NE(find_condition(s, "Failed")
                ->value("message", "")
                .find("podSelector needs conduit-controller in Kubernetes mode"),
            std::string::npos);
}

}  // namespace
}  // namespace conduit::controller
