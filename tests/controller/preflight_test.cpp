// The check before each attempt: what the FabricNodes say decides whether a job starts, waits Pending for a
// node whose agent does not answer (spending no attempt), or fails at once on a transport a node cannot
// serve. First the decision alone, then the reconciler carrying it out against fake agents on a manual clock.
#include "reconcile/preflight.h"

#include <gtest/gtest.h>

#include "fixtures.h"
#include "reconcile/job_status.h"
#include "reconcile/reconciler.h"
#include "reconcile/run_state.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using testing::job;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

NodeFacts answering(std::vector<std::string> transports, bool rdma = false, TimePoint when = {}) {
  NodeFacts f;
  f.reachable = true;
  f.rdma_ready = rdma;
  f.rdma_why = rdma ? "" : "no RDMA device in /sys/class/infiniband";
  f.transports = std::move(transports);
  f.observed = when;
  return f;
}

NodeFacts silent(TimePoint when = {}) {
  return answering({"tcp"}).unanswered(
      Error{ErrorCode::PeerUnreachable, "agent at http://10.0.0.3:7070 did not answer: could not connect"},
      when);
}

TransferJobSpec spec(const json& overrides = json::object()) {
  json s{{"source", {{"node", "node-a"}, {"region", "weights"}}},
         {"targets", {{{"node", "node-b"}, {"region", "weights"}}}}};
  s.merge_patch(overrides);
  return testing::parsed(s);
}

TEST(Preflight, ANodeWhoseAgentDoesNotAnswerIsWaitedForByName) {
  const auto p = preflight(spec(), {{"node-a", true, answering({"tcp"})}, {"node-b", true, silent()}});
  EXPECT_EQ(p.verdict, Preflight::Verdict::Wait);
  EXPECT_EQ(p.reason, "PeerUnreachable");
  EXPECT_EQ(p.waiting_for, std::vector<std::string>{"node-b"});
  EXPECT_EQ(p.message,
            "waiting for node \"node-b\" (agent at http://10.0.0.3:7070 did not answer: could not connect), "
            "whose agent does not answer");
}

TEST(Preflight, EfaOnANodeWithoutRdmaFailsAtOnceSayingWhy) {
  const auto p =
      preflight(spec({{"transport", {{"type", "efa"}}}}),
                {{"node-a", true, answering({"efa", "tcp"}, true)}, {"node-b", true, answering({"tcp"})}});
  EXPECT_EQ(p.verdict, Preflight::Verdict::Fail);
  EXPECT_EQ(p.reason, "TransportUnavailable");
  EXPECT_EQ(p.message,
            "node \"node-b\" cannot serve transport efa: RDMAReady is False (no RDMA device in "
            "/sys/class/infiniband); its agent offers tcp; set transport.allowFallback: true to fall back");
}

TEST(Preflight, WithAllowFallbackTheBestTransportEveryNodeServesRunsAndSaysWhy) {
  const auto p =
      preflight(spec({{"transport", {{"type", "efa"}, {"allowFallback", true}}}}),
                {{"node-a", true, answering({"efa", "tcp"}, true)}, {"node-b", true, answering({"tcp"})}});
  EXPECT_EQ(p.verdict, Preflight::Verdict::Go);
  EXPECT_EQ(p.transport, "tcp");
  EXPECT_EQ(p.fallback.rfind("transport tcp instead of efa (allowFallback): node \"node-b\" cannot serve", 0),
            0U)
      << p.fallback;
}

TEST(Preflight, WhatANodeServesIsAskedOnlyWhenAskedFor) {
  const auto served =
      preflight(spec({{"transport", {{"type", "efa"}}}}),
                {{"node-a", true, answering({"efa"}, true)}, {"node-b", true, answering({"efa"}, true)}});
  EXPECT_EQ(served.verdict, Preflight::Verdict::Go);
  EXPECT_EQ(served.transport, "efa");
  EXPECT_TRUE(served.fallback.empty());
  const auto any = preflight(spec(), {{"node-a", true, answering({})}, {"node-b", true, answering({"tcp"})}});
  EXPECT_EQ(any.verdict, Preflight::Verdict::Go);
  EXPECT_EQ(any.transport, "") << "auto: each agent's own choice";
}

TEST(Preflight, ANodeNeverSeenFailsOneSeenWithoutAnAgentAddressWaitsOneNotYetDiscoveredGoes) {
  const auto typo = preflight(spec(), {{"node-a", true, std::nullopt}, {"node-z", false, std::nullopt}});
  EXPECT_EQ(typo.verdict, Preflight::Verdict::Fail);
  EXPECT_EQ(typo.reason, "NodeNotFound");
  EXPECT_NE(typo.message.find("\"node-z\""), std::string::npos);
  // Kubernetes: its agent pod is no longer a ready endpoint, but discovery knew the node.
  const auto gone =
      preflight(spec(), {{"node-a", true, std::nullopt}, {"node-b", false, answering({"tcp"})}});
  EXPECT_EQ(gone.verdict, Preflight::Verdict::Wait);
  EXPECT_NE(gone.message.find("not among the agent Service's ready endpoints"), std::string::npos)
      << gone.message;
  const auto unknown = preflight(spec({{"transport", {{"type", "efa"}}}}),
                                 {{"node-a", true, std::nullopt}, {"node-b", true, std::nullopt}});
  EXPECT_EQ(unknown.verdict, Preflight::Verdict::Go) << "its agent has the last word";
  EXPECT_EQ(unknown.transport, "efa");
}

TEST(Preflight, ANodeThatDoesNotAnswerIsWaitedForNotJudgedOnWhatItLastServed) {
  NodeFacts stale = silent();
  stale.transports.clear();
  const auto p = preflight(spec({{"transport", {{"type", "efa"}}}}),
                           {{"node-a", true, answering({"efa"}, true)}, {"node-b", true, stale}});
  EXPECT_EQ(p.verdict, Preflight::Verdict::Wait);
}

// Waiting would not make the controller trust the agent's certificate: the attempt fails with the reason.
TEST(Preflight, AnAgentWhoseCertificateIsNotTrustedIsNotWaitedFor) {
  const NodeFacts untrusted = answering({"tcp"}).unanswered(
      Error{ErrorCode::Forbidden,
            "agent on node \"node-b\" did not answer GET /v1/node: the server's certificate is not trusted"},
      {});
  EXPECT_TRUE(untrusted.tls_failed);
  EXPECT_FALSE(silent().tls_failed);
  const auto p = preflight(spec(), {{"node-a", true, answering({"tcp"})}, {"node-b", true, untrusted}});
  EXPECT_EQ(p.verdict, Preflight::Verdict::Go);
}

ReconcilerOptions with(FabricFacts& facts) {
  ReconcilerOptions o;
  o.facts = &facts;
  return o;
}

// Every node answers, serving tcp only (no RDMA device), as the FabricNodes say before the first look.
class PreflightReconcilerTest : public testing::ReconcilerFixture {
 protected:
  PreflightReconcilerTest() : ReconcilerFixture(with(facts)) {
    for (const char* node : {"node-a", "node-b", "node-c"}) {
      agents.nodes[node].info = {
          {"fabric", {{{"provider", "tcp;ofi_rxm"}}}},
          {"checks", {{{"name", "rdma"}, {"ok", false}, {"message", "no RDMA device"}}}}};
      facts.set(node, NodeFacts::answered(agents.nodes[node].info, clock.now()));
    }
  }

  void node_down(const std::string& node) {
    agents.nodes[node].down = true;
    facts.set(node,
              facts.get(node)->unanswered(
                  Error{ErrorCode::PeerUnreachable, "agent on " + node + " did not answer"}, clock.now()));
  }

  FabricFacts facts;
};

TEST_F(PreflightReconcilerTest, ANodeThatDoesNotAnswerHoldsTheJobPendingUntilItDoesSpendingNoAttempt) {
  node_down("node-b");
  store.put(job("ckpt", {{"backoffLimit", 0}}));
  EXPECT_EQ(reconcile("ckpt"), 1000ms);
  EXPECT_EQ(phase("ckpt"), "Pending");
  EXPECT_EQ(condition("ckpt", "Running")["status"], "False");
  EXPECT_EQ(condition("ckpt", "Running")["reason"], "PeerUnreachable");
  EXPECT_NE(condition("ckpt", "Running")["message"].get<std::string>().find("waiting for node \"node-b\""),
            std::string::npos)
      << condition("ckpt", "Running");
  EXPECT_TRUE(status("ckpt").contains("startTime")) << "activeDeadlineSeconds counts from now";
  EXPECT_EQ(agents.starts, 0);
  EXPECT_EQ(agents.grants_made, 0);

  for (int i = 0; i < 5; ++i) {
    clock.advance(1s);
    reconcile("ckpt");
  }
  EXPECT_EQ(phase("ckpt"), "Pending") << "no deadline: it waits as long as the node is away";
  EXPECT_EQ(status("ckpt").value("retries", 0), 0) << "waiting spends no attempt (backoffLimit 0)";
  EXPECT_EQ(events("Warning/PeerUnreachable"), 1) << "said once, not at every look";

  agents.nodes["node-b"].down = false;  // back; discovery has not looked yet: the held job asks itself
  clock.advance(1s);
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Running") << status("ckpt").dump(2);
  EXPECT_EQ(agents.starts, 1);
  EXPECT_TRUE(facts.get("node-b")->reachable);
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(status("ckpt").value("retries", 0), 0);
}

TEST_F(PreflightReconcilerTest, HeldPastTheDeadlineTheJobFailsWithTheNodeAsTheReason) {
  node_down("node-b");
  store.put(job("ckpt", {{"activeDeadlineSeconds", 3}}));
  reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Pending");
  clock.advance(2500ms);
  EXPECT_EQ(reconcile("ckpt"), 500ms) << "looked at again at the deadline, not after it";
  clock.advance(500ms);
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Failed");
  EXPECT_EQ(condition("ckpt", "Failed")["reason"], "PeerUnreachable");
  EXPECT_EQ(condition("ckpt", "Failed")["message"].get<std::string>().rfind(
                "activeDeadlineSeconds (3 s) passed while waiting for node \"node-b\"", 0),
            0U)
      << condition("ckpt", "Failed");
  EXPECT_EQ(agents.starts, 0);
}

// Discovery looked before the target died: the attempt finds out itself, and waits as the pre-flight would
// have. A target killed mid-transfer costs the one attempt it broke, then the retry waits for it and resumes.
TEST_F(PreflightReconcilerTest, ATargetThatDiesIsRetriedOnceThenWaitedForAndResumedWhenBack) {
  store.put(job("ckpt", {{"backoffLimit", 1}}));
  for (int i = 0; i < 3 && agents.starts == 0; ++i) reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Running");
  agents.progress(16 * MiB);
  agents.last().targets[0].committed_bytes = 16 * MiB;
  reconcile("ckpt");
  agents.nodes["node-b"].down = true;  // the facts still say it answers
  agents.finish("Failed", "PeerUnreachable", "1 of 1 targets failed; first: node-b went away");
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt")["retries"], 1);

  clock.advance(1100ms);
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Pending") << status("ckpt").dump(2);
  EXPECT_EQ(condition("ckpt", "Running")["reason"], "PeerUnreachable");
  EXPECT_FALSE(facts.get("node-b")->reachable) << "what the attempt learnt is shared";
  for (int i = 0; i < 5; ++i) {
    clock.advance(1s);
    reconcile("ckpt");
  }
  EXPECT_EQ(phase("ckpt"), "Pending") << "not BackoffLimitExceeded: " << status("ckpt").dump(2);
  EXPECT_EQ(status("ckpt")["retries"], 1);
  EXPECT_EQ(agents.starts, 1);

  agents.nodes["node-b"].down = false;
  clock.advance(1s);
  reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Running") << status("ckpt").dump(2);
  EXPECT_EQ(agents.requests.at("t-2").targets.at(0).resume_offset, 16 * MiB);
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(status("ckpt")["retries"], 1);
  EXPECT_EQ(agents.live_grants(), 0U);
}

// The retry leaves node-c out, but asks it whether its region still holds the bytes before the job may say
// so.
TEST_F(PreflightReconcilerTest, ALandedTargetsNodeIsWaitedForTooThenOnlyTheOtherIsSent) {
  store.put(job("fan", testing::fanout_to_b_and_c()));
  for (int i = 0; i < 3 && agents.starts == 0; ++i) reconcile("fan");
  agents.last().targets[0] = {"Failed", 8 * MiB, "stalled", 8 * MiB};
  agents.last().targets[1] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.finish("Failed", "Stalled", "1 of 2 targets failed");
  agents.last().targets[0].state = "Failed";
  agents.last().targets[1].state = "Succeeded";
  reconcile("fan");
  node_down("node-c");
  clock.advance(1100ms);
  reconcile("fan");
  EXPECT_EQ(phase("fan"), "Pending") << status("fan").dump(2);
  EXPECT_EQ(status("fan")["targets"][1]["state"], "Succeeded");
  agents.nodes["node-c"].down = false;
  clock.advance(1s);
  reconcile("fan");
  ASSERT_EQ(phase("fan"), "Running") << status("fan").dump(2);
  EXPECT_EQ(agents.requests.at("t-2").targets.size(), 1U) << "node-c has every byte: not sent again";
}

TEST_F(PreflightReconcilerTest, EfaOnANodeWithoutRdmaFailsAtOnceTouchingNothing) {
  store.put(job("efa", {{"transport", {{"type", "efa"}}}}));
  reconcile("efa");
  EXPECT_EQ(phase("efa"), "Failed");
  EXPECT_EQ(condition("efa", "Failed")["reason"], "TransportUnavailable");
  const std::string message = condition("efa", "Failed")["message"];
  EXPECT_NE(message.find("node \"node-a\" cannot serve transport efa: RDMAReady is False (no RDMA device)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("allowFallback"), std::string::npos) << message;
  EXPECT_EQ(status("efa").value("retries", 0), 0);
  EXPECT_EQ(agents.grants_made, 0);
  EXPECT_TRUE(agents.nodes["node-b"].regions.empty());
  EXPECT_TRUE(agents.nodes["node-a"].regions.empty());
}

TEST_F(PreflightReconcilerTest, WithAllowFallbackTheTransportThatRanIsInStatusAndSaysWhy) {
  store.put(job("efa", {{"transport", {{"type", "efa"}, {"allowFallback", true}}}}));
  for (int i = 0; i < 3 && agents.starts == 0; ++i) reconcile("efa");
  ASSERT_EQ(phase("efa"), "Running") << status("efa").dump(2);
  EXPECT_EQ(status("efa")["targets"][0]["transport"], "tcp");
  EXPECT_NE(condition("efa", "Running")["message"].get<std::string>().find("transport tcp instead of efa"),
            std::string::npos)
      << condition("efa", "Running");
  EXPECT_EQ(events("Warning/TransportFallback"), 1);
}

}  // namespace
}  // namespace conduit::controller
