// The TransferJob state machine against an in-memory store and fake agents: each test is a user's story
// (a job runs, fails and retries, is suspended, deleted, outlives its controller) told one reconcile at a
// time on a manual clock.
#include "reconcile/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "fakes.h"
#include "fixtures.h"
#include "reconcile/control_loop.h"
#include "reconcile/job_status.h"
#include "reconcile/run_state.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using testing::FakeAgents;
using testing::job;
using testing::ManualClock;
using testing::MemoryStore;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

using ReconcilerTest = testing::ReconcilerFixture;

TEST_F(ReconcilerTest, ByteCountsStayExactPastFourGiB) {
  // A 1.5 GiB checkpoint to three nodes: 4.5 GiB in all, more than 32 bits hold. The --once-job line once
  // read bytesTransferred as an int and printed "-1073741824 bytes" for a job like this.
  agents.file_bytes = 1536 * MiB;
  json targets = json::array();
  for (const char* node : {"node-b", "node-c", "node-d"}) {
    agents.add_node(node);
    targets.push_back({{"node", node}, {"region", "weights"}, {"create", {{"bytes", 1536 * MiB}}}});
  }
  store.put(job("big", {{"strategy", "Fanout"}, {"targets", targets}}));
  start("big");
  clock.advance(1s);
  agents.finish("Succeeded");
  reconcile("big");
  ASSERT_EQ(phase("big"), "Succeeded") << store.job("big").dump(2);
  const std::uint64_t moved = status("big")["bytesTransferred"].get<std::uint64_t>();
  EXPECT_GT(moved, std::uint64_t{4} << 30);
  EXPECT_EQ(outcome_summary(status("big")).rfind("Succeeded: " + std::to_string(moved) + " bytes, ", 0), 0U)
      << outcome_summary(status("big"));
}

TEST_F(ReconcilerTest, NearItsEndATransferIsWaitedForAtTheAgentNotPolledLate) {
  store.put(job("tail"));
  start("tail");
  auto& t = agents.transfers.at("t-1");
  t.bytes_done = 16 * MiB;  // 48 MiB left at 16 MiB/s: 3 s, a plain look
  t.throughput = 16.0 * MiB;
  reconcile("tail");
  EXPECT_EQ(agents.waits, 0);
  t.bytes_done = 60 * MiB;  // 4 MiB left: ends within the second
  reconcile("tail");
  EXPECT_EQ(agents.waits, 0) << "this look saw it; the next one waits";
  clock.advance(250ms);
  agents.finish("Succeeded");
  reconcile("tail");
  EXPECT_EQ(agents.waits, 1);
  EXPECT_EQ(phase("tail"), "Succeeded");
}

TEST_F(ReconcilerTest, ASmallTransferIsWaitedForAsItStartsSoItsJobWritesStatusOnce) {
  // 4 MiB: the agent is done within milliseconds, so the pass that starts it waits for its end and writes
  // Succeeded, without a Running write a look before (with many small jobs, the apiserver's writes are
  // what bounds the rate).
  agents.file_bytes = 4 * MiB;
  const json small{
      {"targets", {{{"node", "node-b"}, {"region", "weights"}, {"create", {{"bytes", 4 * MiB}}}}}}};
  store.put(job("small", small));
  agents.on_wait = [&] { agents.finish("Succeeded"); };
  std::size_t writes_before = 0;
  for (int i = 0; i < 3 && agents.starts == 0; ++i) {
    writes_before = store.status_writes.size();
    reconcile("small");
  }
  ASSERT_EQ(agents.starts, 1);
  EXPECT_EQ(agents.waits, 1);
  EXPECT_EQ(phase("small"), "Succeeded") << store.job("small").dump(2);
  EXPECT_EQ(store.status_writes.size(), writes_before + 1) << "one write: Succeeded";
  EXPECT_EQ(status("small")["bytesTransferred"], 4 * MiB);

  // Not done when the wait ends: Running, as for any job, and the next look goes on from there.
  agents.on_wait = nullptr;
  store.put(job("slow", {{"targets",
                          {{{"node", "node-c"}, {"region", "weights"}, {"create", {{"bytes", 4 * MiB}}}}}}}));
  for (int i = 0; i < 3 && agents.starts < 2; ++i) reconcile("slow");
  ASSERT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.waits, 2);
  EXPECT_EQ(phase("slow"), "Running");
  clock.advance(2s);
  agents.finish("Succeeded");
  reconcile("slow");
  EXPECT_EQ(phase("slow"), "Succeeded") << store.job("slow").dump(2);

  // Paced to more than a second: not waited for; Running is written at once.
  agents.add_node("node-d");
  store.put(
      job("paced",
          {{"maxBytesPerSecond", MiB},
           {"targets", {{{"node", "node-d"}, {"region", "weights"}, {"create", {{"bytes", 4 * MiB}}}}}}}));
  for (int i = 0; i < 3 && agents.starts < 3; ++i) reconcile("paced");
  ASSERT_EQ(agents.starts, 3);
  EXPECT_EQ(agents.waits, 2);
  EXPECT_EQ(phase("paced"), "Running");
}

TEST_F(ReconcilerTest, AJustStartedTransferStillQueuedIsLookedAtSoonThenAtThePollInterval) {
  store.put(job("queued"));
  start("queued");
  agents.transfers.at("t-1").state = "Queued";
  clock.advance(10ms);
  EXPECT_EQ(reconcile("queued"), 100ms) << "the agent starts it any moment";
  clock.advance(2s);
  EXPECT_GT(reconcile("queued").value_or(0ms), 100ms) << "queued behind others: no hurry";
}

TEST_F(ReconcilerTest, HappyPathStreamsTheFileAndTheTargetSavesAsBytesLand) {
  store.put(job("ckpt", {{"targets",
                          {{{"node", "node-b"},
                            {"region", "weights"},
                            {"create", {{"bytes", 64 * MiB}}},
                            {"file", "restored.bin"}}}}}));
  start("ckpt");
  const json meta = store.job("ckpt")["metadata"];
  EXPECT_EQ(meta["finalizers"], json::array({"conduit.dev/cleanup"}));
  EXPECT_EQ(agents.starts, 1);
  EXPECT_EQ(agents.live_grants(), 1U);
  const auto& request = agents.requests.at("t-1");
  EXPECT_EQ(request.length, 64 * MiB);
  EXPECT_EQ(request.verify, api::Verify::Crc32c);
  EXPECT_EQ(request.targets.at(0).url, "http://node-b:7070");
  // The file is read as it goes out (no region loaded first); the target verifies and saves as it lands.
  EXPECT_EQ(request.source_region, "");
  EXPECT_EQ(request.source_file, "weights.bin");
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U);
  EXPECT_EQ(request.targets.at(0).grant_id, "g-1");
  EXPECT_TRUE(request.targets.at(0).save);
  EXPECT_EQ(request.targets.at(0).ring_bytes, 0U);
  EXPECT_EQ(status("ckpt").value("startTime", ""), format_rfc3339(clock.now(), TimePrecision::Millis));
  EXPECT_EQ(condition("ckpt", "Running")["reason"], "TransferStarted");

  clock.advance(1s);
  agents.progress(32 * MiB, 2.5e9);
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt")["progress"], "50%");
  EXPECT_EQ(status("ckpt")["throughput"], "2.5 GB/s");
  EXPECT_EQ(status("ckpt")["bytesTransferred"], 32 * MiB);
  EXPECT_EQ(status("ckpt")["targets"][0]["state"], "Running");
  EXPECT_EQ(status("ckpt")["targets"][0]["transport"], "tcp");

  clock.advance(1s);
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(condition("ckpt", "Complete")["status"], "True");
  EXPECT_EQ(condition("ckpt", "Running")["status"], "False");
  EXPECT_EQ(status("ckpt")["progress"], "100%");
  EXPECT_EQ(status("ckpt")["targets"][0]["verified"], true);
  EXPECT_EQ(status("ckpt")["completionTime"], format_rfc3339(clock.now(), TimePrecision::Millis));
  // The whole job's rate: 64 MiB over the 2 s from startTime, not the wire's 2.5 GB/s.
  EXPECT_EQ(status("ckpt")["throughputBytesPerSecond"], 64.0 * MiB / 2);
  EXPECT_EQ(agents.live_grants(), 0U);
  EXPECT_EQ(agents.saved, std::vector<std::string>{})
      << "saved by the target as bytes landed, not afterwards";
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U);
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 1U);
  EXPECT_FALSE(RunState::from_job(store.job("ckpt")).transfer);

  // Settled: another look changes nothing.
  const auto writes = store.status_writes.size();
  clock.advance(5s);
  EXPECT_EQ(reconcile("ckpt"), std::nullopt);
  EXPECT_EQ(store.status_writes.size(), writes);
}

TEST_F(ReconcilerTest, FailedAttemptRetriesWithBackoffAndAFreshGrant) {
  store.put(job("ckpt"));
  start("ckpt");
  agents.finish("Failed", "Stalled", "no progress for 30 s");
  const auto wait = reconcile("ckpt");
  EXPECT_EQ(wait, 1000ms);
  EXPECT_EQ(status("ckpt")["retries"], 1);
  EXPECT_EQ(condition("ckpt", "Running")["reason"], "Retrying");
  EXPECT_NE(condition("ckpt", "Running")["message"].get<std::string>().find("Stalled"), std::string::npos);
  EXPECT_EQ(agents.revoked, std::vector<std::string>{"g-1"});
  EXPECT_EQ(agents.live_grants(), 0U);

  clock.advance(500ms);
  reconcile("ckpt");
  EXPECT_EQ(agents.starts, 1) << "no new attempt before the backoff ends";

  clock.advance(600ms);
  reconcile("ckpt");
  EXPECT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.nodes["node-b"].grants.count("g-2"), 1U);
  EXPECT_EQ(agents.requests.at("t-2").targets.at(0).grant["grant"], "g-2");
  // The file is read again (nothing was loaded), the created target adopted: no RegionAlreadyExists.
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U);
  EXPECT_EQ(agents.requests.at("t-2").source_file, "weights.bin");

  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(status("ckpt")["retries"], 1);
}

// A CUDA target is written through the staging path from host memory, so the file is loaded into a region
// first and the target saved after the transfer, as before pipelines.
TEST_F(ReconcilerTest, AFileForACudaTargetIsLoadedFirstAndSavedAfterwards) {
  store.put(job("gpu", {{"targets",
                         {{{"node", "node-b"},
                           {"region", "weights"},
                           {"create", {{"bytes", 64 * MiB}, {"memory", "cuda:0"}}},
                           {"file", "restored.bin"}}}}}));
  start("gpu");
  const auto& request = agents.requests.at("t-1");
  EXPECT_EQ(request.source_region, temporary_region_name(store.job("gpu")));
  EXPECT_EQ(request.source_file, "");
  EXPECT_FALSE(request.targets.at(0).save);
  agents.finish("Succeeded");
  reconcile("gpu");
  EXPECT_EQ(phase("gpu"), "Succeeded");
  EXPECT_EQ(agents.saved, std::vector<std::string>{"node-b:weights->restored.bin"});
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U) << "the loaded copy is gone";
}

// A file target with no region gets a ring grant: the agent keeps a bounded ring, not the whole file.
TEST_F(ReconcilerTest, AFileTargetWithoutARegionTakesARingGrant) {
  store.put(job("f2f", {{"targets", {{{"node", "node-b"}, {"file", "copy.bin"}}}}}));
  start("f2f");
  const auto& request = agents.requests.at("t-1");
  EXPECT_EQ(request.source_file, "weights.bin");
  EXPECT_GT(request.targets.at(0).ring_bytes, 0U);
  EXPECT_TRUE(request.targets.at(0).save);
  EXPECT_TRUE(agents.nodes["node-b"].regions.empty());
  agents.finish("Succeeded");
  reconcile("f2f");
  EXPECT_EQ(phase("f2f"), "Succeeded");
  EXPECT_EQ(status("f2f")["targets"][0]["file"], "copy.bin");
  EXPECT_EQ(agents.live_grants(), 0U);
}

// No space left at a target, a source file that changed, and a target agent refusing the source agent (403
// by identity, range or namespace; a certificate not trusted) are not fixed by retrying. Before, a refusal
// burned the whole backoffLimit.
TEST_F(ReconcilerTest, NoSpaceLeftAChangedSourceAndARefusalFailAtOnce) {
  for (const char* why : {"NoSpaceLeft", "SourceFileChanged", "RemoteAccessDenied"}) {
    const std::string name = std::string("j-") + (why[0] == 'N'   ? "space"
                                                  : why[0] == 'S' ? "changed"
                                                                  : "refused");
    store.put(job(
        name, {{"targets", {{{"node", "node-b"}, {"region", name}, {"create", {{"bytes", 64 * MiB}}}}}}}));
    const int before = agents.starts;
    for (int i = 0; i < 3 && agents.starts == before; ++i) reconcile(name);
    ASSERT_EQ(phase(name), "Running") << store.job(name).dump(2);
    agents.finish("Failed", why, "told by the agent");
    reconcile(name);
    EXPECT_EQ(phase(name), "Failed") << why;
    EXPECT_EQ(condition(name, "Failed")["reason"], why);
    EXPECT_EQ(status(name).value("retries", 0), 0) << why;
  }
}

// A grant lost during the transfer (revoked, expired, a key refused) is worth another attempt: it makes new
// grants.
TEST_F(ReconcilerTest, ALostGrantIsRetried) {
  store.put(job("lost"));
  start("lost");
  agents.finish("Failed", "AccessLost", "the target refused the grant's key");
  reconcile("lost");
  EXPECT_EQ(status("lost").value("retries", 0), 1) << store.job("lost").dump(2);
  EXPECT_NE(phase("lost"), "Failed");
}

// A grant whose node does not answer when its attempt ends (a cut link) is not forgotten: it is revoked as
// soon as the node answers again, before the next attempt takes its own, rather than staying valid for the
// grant's whole TTL.
TEST_F(ReconcilerTest, AGrantThatCouldNotBeRevokedIsRevokedOnceItsNodeAnswers) {
  store.put(job("ckpt"));
  start("ckpt");
  agents.nodes["node-b"].down = true;
  agents.finish("Failed", "Stalled", "no completion from the peer for 3000 ms");
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt")["retries"], 1);
  EXPECT_EQ(agents.nodes["node-b"].grants.count("g-1"), 1U);
  EXPECT_EQ(RunState::from_job(store.job("ckpt")).unrevoked, (std::vector<NodeRef>{{"node-b", "g-1"}}));

  agents.nodes["node-b"].down = false;
  clock.advance(1100ms);
  reconcile("ckpt");
  EXPECT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.revoked, std::vector<std::string>{"g-1"});
  EXPECT_EQ(agents.live_grants(), 1U) << "only the new attempt's grant";
  EXPECT_TRUE(RunState::from_job(store.job("ckpt")).unrevoked.empty());
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(agents.live_grants(), 0U);
}

// A target region bigger than its node's whole memory cap can never be created: the job fails at once with
// InsufficientMemory rather than spending its backoffLimit on it. One over what is free now is retried.
TEST(ReconcilerMemoryCap, ARegionOverTheWholeCapFailsAtOnceOneOverWhatIsFreeIsRetried) {
  struct CappedAgents : FakeAgents {
    std::uint64_t used = 0;
    using FakeAgents::create_region;
    Result<api::Region> create_region(const std::string& node, const api::CreateRegion& region) override {
      if (node == "node-b" && used + region.bytes > 128 * MiB)
        return make_error(ErrorCode::ResourceExhausted, "ResourceExhausted: would exceed the memory cap");
      return FakeAgents::create_region(node, region);
    }
  };
  ManualClock clock;
  MemoryStore store(clock);
  CappedAgents agents;
  Reconciler reconciler(store, agents, clock.clock());
  agents.add_node("node-a");
  agents.add_node("node-b");
  agents.nodes["node-a"].files.insert("weights.bin");
  agents.nodes["node-b"].info = {{"memory", {{"cap", 128 * MiB}, {"used", 0}}}};
  auto status = [&](const std::string& name) { return store.job(name).value("status", json::object()); };

  store.put(job(
      "big", {{"targets", {{{"node", "node-b"}, {"region", "big"}, {"create", {{"bytes", 256 * MiB}}}}}}}));
  for (int i = 0; i < 3; ++i) reconciler.reconcile({"default", "big"});
  EXPECT_EQ(status("big")["phase"], "Failed");
  EXPECT_EQ(status("big").value("retries", 0), 0);
  const json big = status("big");
  const json* failed = find_condition(big, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ((*failed)["reason"], "InsufficientMemory");
  EXPECT_NE((*failed)["message"].get<std::string>().find("whole memory cap of 134217728 bytes"),
            std::string::npos)
      << (*failed)["message"];

  agents.used = 100 * MiB;  // 64 MiB more does not fit now, but would once something is freed
  store.put(job("busy"));
  for (int i = 0; i < 3; ++i) reconciler.reconcile({"default", "busy"});
  EXPECT_EQ(status("busy")["phase"], "Running");
  EXPECT_EQ(status("busy")["retries"], 1);
  EXPECT_NE(status("busy").dump().find("InsufficientMemory"), std::string::npos);
}

TEST_F(ReconcilerTest, ARetryResumesWhereTheFailedAttemptLeftOff) {
  store.put(job("ckpt", testing::fanout_to_b_and_c()));
  start("ckpt");
  // node-b got everything (verified), node-c the first 24 MiB when the attempt failed.
  agents.last().targets[0] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.last().targets[1] = {"Failed", 30 * MiB, "peer gone", 24 * MiB};
  agents.finish("Failed", "PeerUnreachable", "node-c went away");
  agents.last().targets[0].state = "Succeeded";
  reconcile("ckpt");
  clock.advance(1100ms);
  reconcile("ckpt");
  ASSERT_EQ(agents.starts, 2);
  const auto& again = agents.requests.at("t-2").targets;
  ASSERT_EQ(again.size(), 1U) << "node-b has every byte: the retry leaves it out";
  EXPECT_EQ(again.at(0).url, "http://node-c:7070");
  EXPECT_EQ(again.at(0).resume_offset, 24 * MiB) << "node-c resumes at what had landed, not at bytesDone";
  EXPECT_EQ(agents.live_grants(), 1U) << "a grant for node-c only";
  const std::string running = condition("ckpt", "Running")["message"];
  EXPECT_NE(running.find("resuming"), std::string::npos) << running;
  EXPECT_NE(running.find("1 landed in an earlier attempt"), std::string::npos) << running;
  // The status speaks of both targets, in the spec's order, while the agent's transfer has only node-c.
  clock.advance(1s);
  agents.progress(40 * MiB);
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt")["targets"][0]["state"], "Succeeded");
  EXPECT_EQ(status("ckpt")["targets"][0]["bytes"], 64 * MiB);
  EXPECT_EQ(status("ckpt")["targets"][1]["state"], "Running");
  EXPECT_EQ(status("ckpt")["targets"][1]["node"], "node-c");
  EXPECT_EQ(status("ckpt")["targetProgress"], "100%,62.5%") << "each target's share, in spec order (-o wide)";
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(status("ckpt")["bytesTransferred"], 128 * MiB);
  EXPECT_EQ(status("ckpt")["targetProgress"], "100%,100%");
}

TEST_F(ReconcilerTest, AChainIsOneTransferWhoseTargetsAreTheHopsInOrderEachReportingWhatLanded) {
  agents.add_node("node-d");
  store.put(job("chain", {{"strategy", "Chain"},
                          {"verify", "none"},
                          {"targets",
                           {{{"node", "node-d"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}},
                            {{"node", "node-b"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}},
                            {{"node", "node-c"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}}}}}));
  start("chain");
  const auto& request = agents.requests.at("t-1");
  EXPECT_TRUE(request.chain);
  ASSERT_EQ(request.targets.size(), 3U);
  std::vector<std::string> urls;
  for (const auto& t : request.targets) {
    urls.push_back(t.url);
    EXPECT_FALSE(t.grant_id.empty()) << "a hop reports what landed even without verify";
    EXPECT_EQ(t.region, "w");
    EXPECT_EQ(agents.writers[t.grant_id], "default/chain") << "the job names itself the regions' writer";
  }
  EXPECT_EQ(urls,
            (std::vector<std::string>{"http://node-d:7070", "http://node-b:7070", "http://node-c:7070"}))
      << "the listed order is the forwarding order";
  // The first hop has every byte, the others are behind: -o wide and an event say so.
  clock.advance(1s);
  agents.progress(96 * MiB);
  agents.last().targets[0] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.last().targets[1].bytes_done = 24 * MiB;
  agents.last().targets[2].bytes_done = 8 * MiB;
  reconcile("chain");
  EXPECT_EQ(status("chain")["targetProgress"], "100%,37.5%,12.5%");
  const auto said = [&] {
    return std::count(store.events.begin(), store.events.end(), "Normal/TargetSucceeded");
  };
  EXPECT_EQ(said(), 1);
  clock.advance(1s);
  reconcile("chain");
  EXPECT_EQ(said(), 1) << "once per hop";
  agents.finish("Succeeded");
  reconcile("chain");
  EXPECT_EQ(phase("chain"), "Succeeded");
  EXPECT_EQ(said(), 1) << "the job's own Succeeded event covers the hops that finish with it";
}

TEST_F(ReconcilerTest, AFanoutThatGivesUpSaysWhichTargetsHaveEveryByteAndKeepsTheirRegions) {
  json spec = testing::fanout_to_b_and_c();
  spec["backoffLimit"] = 0;
  store.put(job("ckpt", spec));
  start("ckpt");
  agents.last().targets[0] = {"Failed", 8 * MiB, "peer gone", 8 * MiB};
  agents.last().targets[1] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.finish("Failed", "PeerUnreachable", "1 of 2 targets failed; first: node-b went away");
  agents.last().targets[0].state = "Failed";
  agents.last().targets[1].state = "Succeeded";
  reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Failed");
  const std::string message = condition("ckpt", "Failed")["message"];
  EXPECT_NE(message.find("targets with every byte: node-c/weights; failed: node-b/weights"),
            std::string::npos)
      << message;
  EXPECT_EQ(status("ckpt")["targets"][0]["state"], "Failed");
  EXPECT_EQ(status("ckpt")["targets"][1]["state"], "Succeeded");
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 0U) << "partial bytes are not left behind";
  EXPECT_EQ(agents.nodes["node-c"].regions.count("weights"), 1U) << "a target with every byte keeps them";
  EXPECT_EQ(agents.live_grants(), 0U);
}

TEST_F(ReconcilerTest, ALandedTargetWhoseRegionIsGoneIsSentAgain) {
  store.put(job("ckpt", testing::fanout_to_b_and_c()));
  start("ckpt");
  agents.last().targets[0] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.finish("Failed", "PeerUnreachable", "node-c went away");
  agents.last().targets[0].state = "Succeeded";
  reconcile("ckpt");
  agents.nodes["node-b"].regions.erase("weights");  // node-b's agent restarted: its region is gone
  clock.advance(1100ms);
  reconcile("ckpt");
  ASSERT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.requests.at("t-2").targets.size(), 2U) << "node-b's new region holds none of the bytes";
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 1U);
}

TEST_F(ReconcilerTest, ANewSourceLengthForgetsWhatEarlierAttemptsLanded) {
  store.put(job("ckpt", testing::fanout_to_b_and_c()));
  start("ckpt");
  agents.last().targets[0] = {"Succeeded", 64 * MiB, "", 64 * MiB};
  agents.finish("Failed", "PeerUnreachable", "node-c went away");
  agents.last().targets[0].state = "Succeeded";
  reconcile("ckpt");
  agents.file_bytes = 32 * MiB;  // the source file was replaced by a shorter one
  clock.advance(1100ms);
  reconcile("ckpt");
  ASSERT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.requests.at("t-2").targets.size(), 2U) << "node-b's bytes were another source's";
}

TEST_F(ReconcilerTest, WithoutVerifyARetryStartsFromZero) {
  // Nothing would check the claimed bytes.
  store.put(job("unverified", {{"verify", "none"}}));
  start("unverified");
  agents.last().targets[0].committed_bytes = 32 * MiB;
  agents.finish("Failed", "Stalled", "no progress");
  reconcile("unverified");
  clock.advance(1100ms);
  reconcile("unverified");
  ASSERT_EQ(agents.starts, 2);
  EXPECT_EQ(agents.requests.at("t-2").targets.at(0).resume_offset, 0U);
}

TEST_F(ReconcilerTest, BackoffLimitExceededFailsTheJob) {
  store.put(job("ckpt", {{"backoffLimit", 1}}));
  start("ckpt");
  agents.finish("Failed", "PeerUnreachable", "target went away");
  reconcile("ckpt");
  clock.advance(1s);
  reconcile("ckpt");
  ASSERT_EQ(agents.starts, 2);
  agents.finish("Failed", "ChecksumMismatch", "slice 3 differs");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Failed");
  EXPECT_EQ(condition("ckpt", "Failed")["reason"], "BackoffLimitExceeded");
  const std::string message = condition("ckpt", "Failed")["message"];
  EXPECT_NE(message.find("ChecksumMismatch: slice 3 differs"), std::string::npos) << message;
  EXPECT_EQ(agents.live_grants(), 0U);
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U) << "the loaded source is released";
  clock.advance(10s);
  reconcile("ckpt");
  EXPECT_EQ(agents.starts, 2);
}

TEST_F(ReconcilerTest, DeadlineCancelsAndFails) {
  store.put(job("ckpt", {{"activeDeadlineSeconds", 5}}));
  start("ckpt");
  EXPECT_EQ(agents.requests.at("t-1").deadline_seconds, 5U);
  clock.advance(3s);
  agents.progress(MiB);
  EXPECT_LE(*reconcile("ckpt"), 2000ms);
  clock.advance(2s);
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Failed");
  EXPECT_EQ(condition("ckpt", "Failed")["reason"], "DeadlineExceeded");
  EXPECT_EQ(agents.cancelled, std::vector<std::string>{"t-1"});
  EXPECT_EQ(agents.live_grants(), 0U);
}

TEST_F(ReconcilerTest, SuspendCancelsAndResumeStartsAgain) {
  store.put(job("ckpt"));
  start("ckpt");
  store.job("ckpt")["spec"]["suspend"] = true;
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Suspended");
  EXPECT_EQ(condition("ckpt", "Suspended")["status"], "True");
  EXPECT_EQ(agents.cancelled, std::vector<std::string>{"t-1"});
  EXPECT_EQ(agents.live_grants(), 0U);
  clock.advance(10s);
  EXPECT_EQ(reconcile("ckpt"), std::nullopt);
  EXPECT_EQ(agents.starts, 1);

  store.job("ckpt")["spec"]["suspend"] = false;
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Running");
  EXPECT_EQ(condition("ckpt", "Suspended")["status"], "False");
  EXPECT_EQ(agents.starts, 2);
  EXPECT_EQ(status("ckpt").value("retries", 0), 0) << "a suspension is not a failure";
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
}

TEST_F(ReconcilerTest, JobCreatedSuspendedNeverStarts) {
  store.put(job("ckpt", {{"suspend", true}}));
  reconcile("ckpt");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Suspended");
  EXPECT_EQ(agents.starts, 0);
}

TEST_F(ReconcilerTest, DeletionCancelsRevokesAndDropsTheFinalizer) {
  store.put(job("ckpt"));
  start("ckpt");
  ASSERT_EQ(store.delete_job({"default", "ckpt"}).ok(), true);
  ASSERT_TRUE(store.exists("ckpt")) << "the finalizer holds it";
  reconcile("ckpt");
  EXPECT_EQ(agents.cancelled, std::vector<std::string>{"t-1"});
  EXPECT_EQ(agents.live_grants(), 0U);
  EXPECT_EQ(agents.nodes["node-a"].regions.size(), 0U);
  EXPECT_FALSE(store.exists("ckpt")) << "finalizer removed, object gone";
}

TEST_F(ReconcilerTest, AFailedJobDeletesTheTargetRegionsItCreatedButNotTheUsers) {
  // node-b's region was created by the job; node-c's existed before it and is the user's.
  agents.nodes["node-c"].regions["kept"] = api::Region{"kept", 64 * MiB, "host"};
  store.put(job("ckpt", {{"strategy", "Fanout"},
                         {"targets",
                          {{{"node", "node-b"}, {"region", "weights"}, {"create", {{"bytes", 64 * MiB}}}},
                           {{"node", "node-c"}, {"region", "kept"}}}}}));
  start("ckpt");
  ASSERT_EQ(agents.nodes["node-b"].regions.count("weights"), 1U);
  agents.finish("Failed", "InvalidSpec", "bad request");  // permanent: no retry
  reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Failed");
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 0U) << "partial bytes are not left behind";
  EXPECT_EQ(agents.nodes["node-c"].regions.count("kept"), 1U) << "a region the job did not create stays";
}

TEST_F(ReconcilerTest, DeletingARunningJobDeletesItsTargetRegionButASucceededOneKeepsIt) {
  store.put(job("running"));
  start("running");
  ASSERT_EQ(agents.nodes["node-b"].regions.count("weights"), 1U);
  ASSERT_TRUE(store.delete_job({"default", "running"}).ok());
  reconcile("running");
  EXPECT_FALSE(store.exists("running"));
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 0U);

  store.put(job("done"));
  agents.starts = 0;
  start("done");
  agents.finish("Succeeded");
  reconcile("done");
  ASSERT_EQ(phase("done"), "Succeeded");
  ASSERT_TRUE(store.delete_job({"default", "done"}).ok());
  reconcile("done");
  EXPECT_FALSE(store.exists("done"));
  EXPECT_EQ(agents.nodes["node-b"].regions.count("weights"), 1U) << "the bytes the job delivered stay";
}

TEST_F(ReconcilerTest, NewControllerReattachesInsteadOfStartingAgain) {
  store.put(job("ckpt"));
  start("ckpt");
  agents.progress(10 * MiB);
  {
    Reconciler restarted(store, agents, clock.clock());
    clock.advance(2s);
    reconcile("ckpt", &restarted);
    EXPECT_EQ(agents.starts, 1);
    EXPECT_EQ(status("ckpt")["bytesTransferred"], 10 * MiB);
    agents.finish("Succeeded");
    reconcile("ckpt", &restarted);
  }
  EXPECT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(agents.starts, 1);
  EXPECT_EQ(agents.live_grants(), 0U);
}

TEST_F(ReconcilerTest, ControllerDyingBetweenGrantAndStartFencesTheGrantFirst) {
  store.put(job("ckpt"));
  reconcile("ckpt");  // finalizer and the whole start
  ASSERT_EQ(agents.starts, 1);
  // As if the controller died after recording the grant but before recording the transfer it started.
  RunState run = RunState::from_job(store.job("ckpt"));
  run.transfer.reset();
  store.job("ckpt")["metadata"]["annotations"][kRunAnnotation] = run.to_annotation();
  Reconciler restarted(store, agents, clock.clock());
  reconcile("ckpt", &restarted);
  EXPECT_EQ(agents.revoked, std::vector<std::string>{"g-1"}) << "the orphan can no longer write";
  EXPECT_EQ(agents.starts, 2);
  EXPECT_EQ(RunState::from_job(store.job("ckpt")).transfer->name, "t-2");
}

TEST_F(ReconcilerTest, ProgressWritesAreBoundedToTwoPerSecond) {
  store.put(job("ckpt"));
  start("ckpt");
  const auto before = store.status_writes.size();
  for (int i = 1; i <= 100; ++i) {  // 10 s of polls every 100 ms, progress changing each time
    clock.advance(100ms);
    agents.progress(static_cast<std::uint64_t>(i) * 256 * 1024);
    reconcile("ckpt");
  }
  const auto writes = store.status_writes.size() - before;
  EXPECT_LE(writes, 20U);
  EXPECT_GE(writes, 15U) << "progress still flows";
  for (std::size_t i = before + 1; i < store.status_writes.size(); ++i) {
    EXPECT_GE(store.status_writes[i] - store.status_writes[i - 1], 500ms);
  }
  // A transition is written at once, however recent the last progress write.
  agents.finish("Succeeded");
  reconcile("ckpt");
  EXPECT_EQ(phase("ckpt"), "Succeeded");
}

TEST_F(ReconcilerTest, AgentSilentPastTheGraceRetries) {
  store.put(job("ckpt"));
  start("ckpt");
  agents.nodes["node-a"].down = true;
  reconcile("ckpt");
  clock.advance(5s);
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt").value("retries", 0), 0) << "a short silence is waited out";
  clock.advance(6s);
  reconcile("ckpt");
  EXPECT_EQ(status("ckpt").value("retries", 0), 1);
  EXPECT_NE(condition("ckpt", "Running")["message"].get<std::string>().find("PeerUnreachable"),
            std::string::npos);
}

TEST_F(ReconcilerTest, ErrorsRetryingCannotFixFailAtOnceWithTheirReason) {
  struct Case {
    const char* name;
    json spec;
    const char* reason;
    const char* words;
  };
  agents.nodes["node-b"].regions["small"] = api::Region{"small", MiB, "host"};
  agents.nodes["node-b"].regions["taken"] = api::Region{"taken", 64 * MiB, "host"};
  const std::vector<Case> cases = {
      {"missing-node", {{"targets", {{{"node", "node-z"}, {"region", "r"}}}}}, "NodeNotFound", "node-z"},
      {"missing-region",
       {{"source", {{"node", "node-a"}, {"file", nullptr}, {"region", "nope"}}}},
       "RegionNotFound",
       "nope"},
      {"missing-file",
       {{"source", {{"node", "node-a"}, {"file", "missing.bin"}}}},
       "SourceFileNotFound",
       "missing.bin"},
      {"too-small", {{"targets", {{{"node", "node-b"}, {"region", "small"}}}}}, "SizeMismatch", "fewer"},
      {"create-small",
       {{"targets", {{{"node", "node-b"}, {"region", "x"}, {"create", {{"bytes", MiB}}}}}}},
       "SizeMismatch",
       "create.bytes"},
      {"taken",
       {{"targets", {{{"node", "node-b"}, {"region", "taken"}, {"create", {{"bytes", 64 * MiB}}}}}}},
       "RegionAlreadyExists",
       "already exists"},
      {"bad-spec", {{"chunkBytes", 1024}}, "InvalidSpec", "spec.chunkBytes"},
      {"chain-file-hop",
       {{"strategy", "Chain"},
        {"targets",
         {{{"node", "node-b"}, {"file", "c1.bin"}},
          {{"node", "node-c"}, {"region", "c2"}, {"create", {{"bytes", 64 * MiB}}}}}}},
       "Unsupported",
       "a Chain hop forwards from its region"},
      {"efa", {{"transport", {{"type", "efa"}}}}, "TransportUnavailable", "allowFallback"},
  };
  for (const auto& c : cases) {
    store.put(job(c.name, c.spec));
    reconcile(c.name);
    reconcile(c.name);
    EXPECT_EQ(phase(c.name), "Failed") << c.name;
    EXPECT_EQ(condition(c.name, "Failed")["reason"], c.reason) << c.name;
    const std::string message = condition(c.name, "Failed").value("message", "");
    EXPECT_NE(message.find(c.words), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_EQ(agents.starts, 0);
  EXPECT_EQ(agents.live_grants(), 0U);
  EXPECT_EQ(agents.nodes["node-b"].regions.count("taken"), 1U)
      << "a region the job did not create is left alone";
}

TEST_F(ReconcilerTest, TransportFallbackWhenAllowed) {
  store.put(job("ckpt", {{"transport", {{"type", "efa"}, {"allowFallback", true}}}}));
  start("ckpt");
  EXPECT_EQ(status("ckpt")["targets"][0]["transport"], "tcp");
}

TEST_F(ReconcilerTest, FanoutIsOneTransferToEveryTarget) {
  store.put(job("fan", {{"strategy", "Fanout"},
                        {"targets",
                         {{{"node", "node-b"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}},
                          {{"node", "node-c"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}}}}}));
  start("fan");
  EXPECT_EQ(agents.starts, 1);
  EXPECT_EQ(agents.requests.at("t-1").targets.size(), 2U);
  EXPECT_EQ(status("fan")["bytesTotal"], 128 * MiB);
  agents.finish("Succeeded");
  reconcile("fan");
  EXPECT_EQ(phase("fan"), "Succeeded");
  EXPECT_EQ(agents.live_grants(), 0U);
}

TEST_F(ReconcilerTest, TtlDeletesTheFinishedJob) {
  store.put(job("ckpt", {{"ttlSecondsAfterFinished", 30}}));
  start("ckpt");
  agents.finish("Succeeded");
  const auto wait = reconcile("ckpt");
  ASSERT_EQ(phase("ckpt"), "Succeeded");
  EXPECT_EQ(wait, 30000ms);
  clock.advance(29s);
  reconcile("ckpt");
  EXPECT_TRUE(store.exists("ckpt"));
  clock.advance(1s);
  reconcile("ckpt");  // deletes: the finalizer holds it for one more pass
  reconcile("ckpt");
  EXPECT_FALSE(store.exists("ckpt"));
}

TEST_F(ReconcilerTest, StoreOutageChangesNothingOnTheAgents) {
  store.put(job("ckpt"));
  reconcile("ckpt");  // finalizer + start
  ASSERT_EQ(agents.starts, 1);
  store.put(job("other"));
  store.fail_writes = true;
  Reconciler::Error error = Reconciler::Error::None;
  EXPECT_EQ(reconciler.reconcile({"default", "other"}, &error), 1000ms);
  EXPECT_EQ(error, Reconciler::Error::StoreWrite) << "counted in conduit_controller_reconcile_errors_total";
  EXPECT_EQ(agents.starts, 1);
  store.fail_writes = false;
  EXPECT_EQ(reconciler.reconcile({"default", "ckpt"}, &error).has_value(), true);
  EXPECT_EQ(error, Reconciler::Error::None);
}

TEST_F(ReconcilerTest, TheFinalizerComesWithTheFirstRecordOfSomethingHeld) {
  // Before anything is held: no finalizer, and deleting the job removes it at once.
  // Created suspended: nothing is asked of any agent.
  store.put(job("waiting", {{"suspend", true}}));
  reconcile("waiting");
  EXPECT_EQ(phase("waiting"), "Suspended") << store.job("waiting").dump(2);
  EXPECT_FALSE(store.job("waiting")["metadata"].contains("finalizers")) << store.job("waiting").dump(2);
  EXPECT_EQ(store.metadata_writes, 0);
  ASSERT_TRUE(store.delete_job({"default", "waiting"}).ok());
  EXPECT_FALSE(store.exists("waiting")) << "nothing held: nothing to wait for";

  // The first record (the target region, before it is created) carries the finalizer: one write, not two.
  store.put(job("ckpt"));
  start("ckpt");
  EXPECT_EQ(store.job("ckpt")["metadata"]["finalizers"], json::array({"conduit.dev/cleanup"}));
  const int writes_to_start = store.metadata_writes;
  EXPECT_EQ(writes_to_start, 3) << "region, then grants, then the transfer: each recorded before the next";

  // Deleted while its grant is being taken (another finalizer keeps the object): the apiserver refuses the
  // finalizer with the record, so the grant is revoked and nothing starts.
  const json target{{"targets", {{{"node", "node-c"}, {"region", "kv"}}}}};
  agents.nodes["node-c"].regions["kv"] = api::Region{"kv", 64 * MiB, "host"};
  json raced = job("raced", target);
  raced["metadata"]["finalizers"] = json::array({"example.com/keep"});
  store.put(raced);
  agents.on_grant = [&] { store.job("raced")["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"; };
  const int starts = agents.starts;
  const std::size_t grants = agents.live_grants();
  for (int i = 0; i < 3; ++i) reconcile("raced");
  agents.on_grant = nullptr;
  EXPECT_EQ(agents.starts, starts) << "no transfer on a grant that could not be recorded";
  EXPECT_EQ(agents.live_grants(), grants) << "its grant was revoked";
  EXPECT_EQ(store.job("raced")["metadata"]["finalizers"], json::array({"example.com/keep"}));
}

TEST_F(ReconcilerTest, ARunRecordWrittenByHandReleasesNothingOfAnotherNamespace) {
  // Whoever may edit a TransferJob may write its run annotation. Team-b's region, grant and transfer:
  ASSERT_TRUE(agents.create_region("node-b", "victim", 64 * MiB, "host", "team-b").ok());
  GrantAsk ask;
  ask.region = "victim";
  ask.length = 64 * MiB;
  ask.ns = "team-b";
  const auto g = agents.grant("node-b", ask);
  ASSERT_TRUE(g.ok());
  agents.nodes["node-a"].regions["src"] = api::Region{"src", 64 * MiB, "host"};
  api::TransferRequest theirs;
  theirs.source_region = "src";
  theirs.length = 64 * MiB;
  theirs.ns = "team-b";
  const auto t = agents.start_transfer("node-a", theirs);
  ASSERT_TRUE(t.ok());
  // A job of namespace default whose record claims all three, then deleted before it succeeded.
  json forged = job("forged");
  RunState run;
  run.attempt = 1;
  run.created = {{"node-b", "victim"}};
  run.grants = {{"node-b", g->id}};
  run.transfer = NodeRef{"node-a", t->id};
  forged["metadata"]["annotations"] = {{kRunAnnotation, run.to_annotation()}};
  forged["metadata"]["finalizers"] = json::array({kFinalizer});
  forged["status"] = {{"phase", "Running"}};
  store.put(forged);
  reconcile("forged");  // the transfer it names is refused to namespace default: as an agent not answering
  ASSERT_TRUE(store.delete_job({"default", "forged"}).ok());
  for (int i = 0; i < 3 && store.exists("forged"); ++i) reconcile("forged");

  EXPECT_FALSE(store.exists("forged")) << "refusals do not hold the job's deletion";
  EXPECT_EQ(agents.nodes["node-b"].regions.count("victim"), 1U) << "team-b's region is still there";
  EXPECT_EQ(agents.nodes["node-b"].grants.count(g->id), 1U) << "team-b's grant is still live";
  EXPECT_TRUE(agents.cancelled.empty()) << "team-b's transfer was not cancelled";
  EXPECT_EQ(agents.transfers.at(t->id).state, "Running");
}

// decide() alone: the rows of the table that the stories above do not reach.
TEST(Decide, Table) {
  const TimePoint now = std::chrono::system_clock::from_time_t(1'800'000'000);
  JobView view;
  view.has_finalizer = true;
  view.phase = "Running";
  view.spec = *TransferJobSpec::parse(
      {{"source", {{"node", "a"}, {"region", "r"}}}, {"targets", {{{"node", "b"}, {"region", "r"}}}}});
  RunState run;
  Observation seen;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::StartAttempt);
  run.not_before = now + 2s;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::WaitBackoff);
  EXPECT_EQ(decide(view, run, seen, now).wait, 2000ms);
  run.grants.push_back({"b", "g-1"});
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::Fence);
  run.transfer = NodeRef{"a", "t-1"};
  seen.kind = Observation::Kind::Lost;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::Retry);
  EXPECT_EQ(decide(view, run, seen, now).reason, "TransferLost");
  view.deleting = true;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::Finalize);
  view.has_finalizer = false;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::Idle);
  view.deleting = false;
  EXPECT_EQ(decide(view, run, seen, now).kind, StepKind::Retry)
      << "no finalizer yet is no step of its own: it comes with the first run record";
}

TEST(Decide, RunningTransfersAreLookedAtWhenTheyShouldFinish) {
  using std::chrono::milliseconds;
  const milliseconds poll{500};
  api::TransferStatus t;
  t.state = "Running";
  t.bytes_total = 1000;
  t.bytes_done = 500;
  t.throughput = 2000;  // 250 ms left
  EXPECT_EQ(next_look(t, poll), milliseconds(250));
  t.throughput = 100;  // 5 s left: no later than the poll interval
  EXPECT_EQ(next_look(t, poll), poll);
  t.throughput = 1e9;  // done in a microsecond: not sooner than 50 ms
  EXPECT_EQ(next_look(t, poll), milliseconds(50));
  t.throughput = 0;  // no rate yet
  EXPECT_EQ(next_look(t, poll), milliseconds(100));
  t.bytes_done = 1000;  // verifying
  t.throughput = 2000;
  EXPECT_EQ(next_look(t, poll), milliseconds(100));
  t.state = "Queued";  // waiting behind other transfers on the agent: no estimate
  EXPECT_EQ(next_look(t, poll), poll);
  EXPECT_EQ(next_look(t, milliseconds(20)), milliseconds(20)) << "a shorter poll interval always wins";
}

TEST(Decide, BackoffDoublesAndCapsAtAMinute) {
  EXPECT_EQ(backoff_delay(0), 1000ms);
  EXPECT_EQ(backoff_delay(1), 2000ms);
  EXPECT_EQ(backoff_delay(2), 4000ms);
  EXPECT_EQ(backoff_delay(5), 32000ms);
  EXPECT_EQ(backoff_delay(6), 60000ms);
  EXPECT_EQ(backoff_delay(20), 60000ms);
}

TEST(WorkQueue, KeepsEachKeyOnceAtItsEarliestTime) {
  WorkQueue queue;
  const auto now = std::chrono::steady_clock::now();
  queue.add({"default", "late"}, now + 50ms);
  queue.add({"default", "soon"}, now + 200ms);
  queue.add({"default", "soon"}, now);        // earlier wins
  queue.add({"default", "late"}, now + 10s);  // later loses
  EXPECT_EQ(queue.size(), 2U);
  EXPECT_EQ(queue.pop()->name, "soon");
  EXPECT_EQ(queue.pop()->name, "late");
  EXPECT_GE(std::chrono::steady_clock::now(), now + 50ms);
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    queue.shutdown();
  });
  EXPECT_FALSE(queue.pop().has_value()) << "shutdown wakes a waiting worker";
  stopper.join();
}

TEST(WorkQueue, ResyncKeepsScheduledLooksAndSkipsHeldKeys) {
  WorkQueue queue;
  const auto now = std::chrono::steady_clock::now();
  queue.add({"default", "scheduled"}, now + 10s);
  queue.add_if_absent({"default", "scheduled"});  // a resync: the scheduled look stays where it is
  queue.add_if_absent({"default", "new"});
  EXPECT_EQ(queue.pop()->name, "new");
  queue.add_if_absent({"default", "new"});  // held: not queued again
  EXPECT_EQ(queue.size(), 1U);
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    queue.shutdown();
  });
  EXPECT_FALSE(queue.pop().has_value()) << "\"scheduled\" is not due for 10 s";
  stopper.join();
}

TEST(WorkQueue, AKeyHeldByOneWorkerIsNotHandedToAnother) {
  WorkQueue queue;
  queue.add({"default", "a"});
  const auto held = queue.pop();
  ASSERT_TRUE(held.has_value());
  queue.add({"default", "a"});  // changed while a worker reconciles it
  queue.add({"default", "b"});
  EXPECT_EQ(queue.pop()->name, "b") << "a is held: the next worker gets b";
  std::optional<ObjectKey> second;
  std::thread worker([&] { second = queue.pop(); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(second.has_value()) << "a must wait until the first worker is done with it";
  queue.done(*held);
  worker.join();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->name, "a") << "the change made while it was held is not lost";
}

// The agent's transfer JSON says which GPU path ran; the controller keeps only the values the CRD allows and
// keeps every target at its spec index.
TEST(TransferInfoJson, CarriesTheGpuPathAndEachTargetsStagedFlag) {
  const auto t = api::TransferStatus::from_json(json::parse(R"({
    "id": "t-1", "state": "Running", "gpuPath": "staged",
    "targets": [{"state": "Running", "bytesDone": 5, "staged": true}, 7, {"state": "Running"}]})"));
  EXPECT_EQ(t.gpu_path, "staged");
  ASSERT_EQ(t.targets.size(), 3U);
  EXPECT_TRUE(t.targets[0].staged);
  EXPECT_EQ(t.targets[0].bytes_done, 5U);
  EXPECT_FALSE(t.targets[1].staged) << "a malformed entry keeps its place";
  EXPECT_FALSE(t.targets[2].staged) << "absent: not staged";
  EXPECT_TRUE(t.any_staged());

  EXPECT_EQ(api::TransferStatus::from_json(json::parse(R"({"gpuPath": "dmabuf"})")).gpu_path, "dmabuf");
  EXPECT_EQ(api::TransferStatus::from_json(json::parse(R"({"gpuPath": "warp-drive"})")).gpu_path, "")
      << "a value the CRD would refuse is not copied";
  EXPECT_EQ(api::TransferStatus::from_json(json::parse(R"({"gpuPath": 3})")).gpu_path, "");
  EXPECT_EQ(api::TransferStatus::from_json(json::parse(R"({"id": "t-2"})")).gpu_path, "") << "an older agent";
  EXPECT_FALSE(api::TransferStatus::from_json(json::parse(R"({"gpuPath": "none"})")).any_staged());
}

// The agent's proof of path (docs/path.md) survives the wire both ways, and the job's copy fits the CRD.
TEST(JobStatusPath, CopiesTheAgentsVerdictCutToWhatTheCrdHolds) {
  const auto t = api::TransferStatus::from_json(json::parse(R"({
    "id": "t-1", "state": "Succeeded",
    "path": {"verdict": "Misrouted", "counted": "tx", "message": "planned NIC not carrying its bytes: veth1",
             "nics": [{"nic": "veth1", "kind": "net", "planned": true, "plannedBytes": 16777216,
                       "windowBytes": 16777216, "counterDelta": {"txBytes": 2310, "rxBytes": 9000},
                       "verdict": "NotCarried"},
                      {"nic": "veth2", "kind": "net", "planned": false, "plannedBytes": 0, "windowBytes": 0,
                       "counterDelta": {"txBytes": 17301630, "rxBytes": 0}, "verdict": "Unplanned"}]}})"));
  ASSERT_TRUE(t.path);
  EXPECT_EQ(t.path->verdict, "Misrouted");
  ASSERT_EQ(t.path->nics.size(), 2U);
  EXPECT_EQ(t.path->nics[1].counter_delta->tx_bytes, 17301630U);
  EXPECT_FALSE(t.path->nics[1].counter_delta->send_bytes) << "EFA's fields only where the agent gave them";
  EXPECT_EQ(api::TransferStatus::from_json(t.to_json()).path->to_json(), t.path->to_json());
  EXPECT_FALSE(api::TransferStatus::from_json(json::parse(R"({"id": "t-2"})")).path) << "an older agent";

  api::TransferPath big = *t.path;
  big.message.assign(10000, 'x');
  big.nics.resize(70, big.nics[0]);
  const json cut = path_status(big);
  EXPECT_EQ(cut["message"].get<std::string>().size(), 4096U);
  EXPECT_EQ(cut["nics"].size(), 64U);
  EXPECT_EQ(cut["verdict"], "Misrouted");
}

TEST(JobStatusGpuPath, NamesTheEndsThatRanStaged) {
  TransferJobSpec spec;
  spec.source.node = "node-a";
  spec.source.region = "weights";
  spec.targets.resize(2);
  spec.targets[0].node = "node-b";
  spec.targets[0].region = "w1";
  spec.targets[1].node = "node-c";
  spec.targets[1].region = "w2";
  api::TransferStatus t;
  t.gpu_path = "peermem";
  t.targets.resize(2);
  EXPECT_EQ(staged_summary(t, spec), "");
  t.targets[1].staged = true;
  EXPECT_EQ(staged_summary(t, spec),
            "CUDA memory went through host memory (staged), not GPU-direct: target node-c/w2");
  t.gpu_path = "staged";
  EXPECT_EQ(staged_summary(t, spec),
            "CUDA memory went through host memory (staged), not GPU-direct: source node-a/weights, target "
            "node-c/w2");

  json entry = json::object();
  set_gpu_path(entry, t, 1);
  EXPECT_EQ(entry, (json{{"gpuPath", "staged"}, {"staged", true}}));
  json unknown = json::object();
  set_gpu_path(unknown, api::TransferStatus{}, 0);
  EXPECT_EQ(unknown, json::object()) << "nothing said, nothing claimed";

  EXPECT_FALSE(status_shows_staged(json::object()));
  EXPECT_FALSE(status_shows_staged(json{{"targets", {{{"gpuPath", "dmabuf"}, {"staged", false}}}}}));
  EXPECT_TRUE(status_shows_staged(json{{"targets", {{{"gpuPath", "none"}, {"staged", true}}}}}));
  EXPECT_TRUE(status_shows_staged(json{{"targets", {{{"gpuPath", "staged"}}}}}));
}

TEST_F(ReconcilerTest, GpuDirectPathIsCopiedPerTargetWithoutAWarning) {
  store.put(job("direct"));
  start("direct");
  agents.last().gpu_path = "dmabuf";
  clock.advance(1s);
  agents.progress(8 * MiB);
  reconcile("direct");
  EXPECT_EQ(status("direct")["targets"][0]["gpuPath"], "dmabuf");
  EXPECT_EQ(status("direct")["targets"][0]["staged"], false);
  clock.advance(1s);
  agents.finish("Succeeded");
  reconcile("direct");
  EXPECT_EQ(phase("direct"), "Succeeded");
  EXPECT_EQ(status("direct")["targets"][0]["gpuPath"], "dmabuf");
  EXPECT_EQ(condition("direct", "Complete")["message"].get<std::string>().find("staged"), std::string::npos);
  EXPECT_EQ(std::count(store.events.begin(), store.events.end(), "Warning/StagedGpuPath"), 0);
}

TEST_F(ReconcilerTest, AStagedRunSaysSoInStatusOneWarningEventAndTheCompleteCondition) {
  store.put(job("staged"));
  start("staged");
  agents.last().gpu_path = "none";         // host source ...
  agents.last().targets[0].staged = true;  // ... into a CUDA target its transport cannot register
  for (int i = 1; i <= 3; ++i) {
    clock.advance(1s);
    agents.progress(static_cast<std::uint64_t>(i) * 8 * MiB);
    reconcile("staged");
  }
  EXPECT_EQ(status("staged")["targets"][0]["gpuPath"], "none");
  EXPECT_EQ(status("staged")["targets"][0]["staged"], true);
  EXPECT_EQ(std::count(store.events.begin(), store.events.end(), "Warning/StagedGpuPath"), 1)
      << "said once, not on every look";

  // A controller that restarts mid-job reads the stored status and does not say it again.
  Reconciler fresh(store, agents, clock.clock());
  clock.advance(1s);
  agents.progress(40 * MiB);
  reconcile("staged", &fresh);
  EXPECT_EQ(std::count(store.events.begin(), store.events.end(), "Warning/StagedGpuPath"), 1);

  clock.advance(1s);
  agents.finish("Succeeded");
  reconcile("staged", &fresh);
  EXPECT_EQ(phase("staged"), "Succeeded");
  const std::string message = condition("staged", "Complete")["message"];
  EXPECT_NE(message.find("staged"), std::string::npos) << message;
  EXPECT_NE(message.find("target node-b/weights"), std::string::npos) << message;
  EXPECT_EQ(status("staged")["targets"][0]["staged"], true) << "kept after success";
}

TEST_F(ReconcilerTest, EachTransferSettingOfTheSpecReachesTheAgentsBody) {
  // The agent's half (body -> run -> each Chain hop) is tests/agent/chain_hop_test.cpp.
  agents.add_node("node-d");
  store.put(job("settings", {{"strategy", "Chain"},
                             {"verify", "crc32c"},
                             {"chunkBytes", 256 * 1024},
                             {"window", 7},
                             {"maxBytesPerSecond", 3 * MiB},
                             {"activeDeadlineSeconds", 900},
                             {"targets",
                              {{{"node", "node-b"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}},
                               {{"node", "node-d"}, {"region", "w"}, {"create", {{"bytes", 64 * MiB}}}}}}}));
  start("settings");
  const api::TransferRequest& sent = agents.requests.at("t-1");
  EXPECT_TRUE(sent.chain);
  EXPECT_EQ(sent.verify, api::Verify::Crc32c);
  EXPECT_EQ(sent.chunk_bytes, 256U * 1024);
  EXPECT_EQ(sent.window, 7U);
  EXPECT_EQ(sent.max_bytes_per_second, 3 * MiB);
  EXPECT_EQ(sent.deadline_seconds, 900U) << "no time has passed on this clock since the job started";
  EXPECT_EQ(sent.ns, "default");
  EXPECT_EQ(sent.source_file, "weights.bin");
  // The agent reads the body the controller wrote as it was written.
  auto read = api::TransferRequest::from_json(sent.to_json());
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->to_json(), sent.to_json());
}

TEST_F(ReconcilerTest, TargetRegionsAJobCreatesHoldTheSourcesManifest) {
  // A source region that names its tensors (docs/tensors.md): the regions the job makes name them too.
  auto manifest = api::Manifest::from_json({{"tensors",
                                             {{{"name", "model.embed.weight"},
                                               {"dtype", "BF16"},
                                               {"shape", {1024}},
                                               {"offset", 0},
                                               {"length", 2048}}}},
                                            {"metadata", {{"format", "pt"}}}},
                                           64 * MiB);
  ASSERT_TRUE(manifest) << manifest.error().message;
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 64 * MiB, .manifest = *manifest}));
  store.put(job("named", {{"source", {{"node", "node-a"}, {"file", nullptr}, {"region", "model"}}}}));
  start("named");
  ASSERT_EQ(agents.nodes["node-b"].manifests.count("weights"), 1U) << "the target was made without it";
  EXPECT_EQ(agents.nodes["node-b"].manifests.at("weights").to_json(), manifest->to_json());

  // A source that names none makes targets that name none.
  ASSERT_TRUE(agents.create_region("node-a", "plain", 64 * MiB, "host", ""));
  store.put(
      job("unnamed",
          {{"source", {{"node", "node-a"}, {"file", nullptr}, {"region", "plain"}}},
           {"targets", {{{"node", "node-c"}, {"region", "weights"}, {"create", {{"bytes", 64 * MiB}}}}}}}));
  for (int i = 0; i < 3 && agents.starts < 2; ++i) reconcile("unnamed");
  ASSERT_EQ(phase("unnamed"), "Running") << store.job("unnamed").dump(2);
  EXPECT_EQ(agents.nodes["node-c"].regions.count("weights"), 1U);
  EXPECT_EQ(agents.nodes["node-c"].manifests.count("weights"), 0U);
}

// A model's manifest for the subset stories: layer 0 (two 1 KiB tensors back to back), layer 1, the head,
// laid out from `base` in the region.
api::Manifest model_manifest(std::uint64_t base = 0, const std::string& head_dtype = "BF16") {
  auto tensor = [](const char* name, const std::string& dtype, std::uint64_t offset) {
    return api::Tensor{name, dtype, {512}, offset, 1024};
  };
  return {{tensor("model.layers.0.q.weight", "BF16", base),
           tensor("model.layers.0.k.weight", "BF16", base + 1024),
           tensor("model.layers.1.q.weight", "BF16", base + 2048),
           tensor("lm_head.weight", head_dtype, base + 4096)},
          {}};
}

// spec.tensors: source region "model" on node-a into region "model" on node-b, which exists with `target`.
json subset_job(const std::string& name, const json& tensors) {
  return job(name, {{"source", {{"node", "node-a"}, {"file", nullptr}, {"region", "model"}}},
                    {"targets", {{{"node", "node-b"}, {"region", "model"}}}},
                    {"verify", "none"},
                    {"tensors", tensors}});
}

TEST_F(ReconcilerTest, TensorsMoveOnlyTheNamedTensorsAsOneScatterBatch) {
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  // The target holds the same tensors 1 MiB further in.
  ASSERT_TRUE(agents.create_region(
      "node-b", api::CreateRegion{.name = "model", .bytes = 2 * MiB, .manifest = model_manifest(MiB)}));
  store.put(subset_job("subset", {"model.layers.0.*", "lm_head.weight"}));
  start("subset");
  const api::TransferRequest& sent = agents.requests.at("t-1");
  ASSERT_EQ(sent.ops.size(), 2U) << "layer 0 as one range, the head as another";
  EXPECT_EQ(sent.ops[0].source_offset, 0U);
  EXPECT_EQ(sent.ops[0].target_offset, MiB);
  EXPECT_EQ(sent.ops[0].length, 2048U);
  EXPECT_EQ(sent.ops[1].source_offset, 4096U);
  EXPECT_EQ(sent.ops[1].target_offset, MiB + 4096);
  EXPECT_EQ(sent.length, 0U) << "an op list carries its own ranges";
  auto body = api::TransferRequest::from_json(sent.to_json());
  EXPECT_TRUE(body) << "the agent refuses the body: " << body.error().message;

  agents.finish("Succeeded");
  reconcile("subset");
  EXPECT_EQ(phase("subset"), "Succeeded");
  EXPECT_EQ(status("subset").value("bytesTotal", 0U), 3072U) << "the subset's bytes, not the region's";
  // A scatter batch takes no landing reports: the job commits the target to its next version itself.
  EXPECT_EQ(agents.commits, std::vector<std::string>{"node-b:model@1"});
}

// The target's agent does not answer the commit: the job waits (Running, the bytes in) and commits once
// it answers, exactly once.
TEST_F(ReconcilerTest, TensorsCommitTheTargetOnceItsAgentAnswersAgain) {
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  ASSERT_TRUE(agents.create_region(
      "node-b", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  agents.nodes["node-b"].regions["model"].version = 4;
  store.put(subset_job("later", {"lm_head.weight"}));
  start("later");
  agents.finish("Succeeded");
  agents.nodes["node-b"].down = true;
  reconcile("later");
  EXPECT_EQ(phase("later"), "Running");
  EXPECT_TRUE(agents.commits.empty());
  agents.nodes["node-b"].down = false;
  reconcile("later");
  reconcile("later");
  EXPECT_EQ(phase("later"), "Succeeded");
  EXPECT_EQ(agents.commits, std::vector<std::string>{"node-b:model@5"});
}

// Verified by default: the batch goes with verify crc32c and the target's url and grantId, where the source
// agent asks for the sum of the ops' ranges once they landed; the body is one the agent takes.
TEST_F(ReconcilerTest, TensorsAreVerifiedByDefault) {
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  ASSERT_TRUE(agents.create_region(
      "node-b", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  json spec = subset_job("verified", {"lm_head.weight"});
  spec["spec"].erase("verify");
  store.put(spec);
  start("verified");
  const api::TransferRequest& sent = agents.requests.at("t-1");
  EXPECT_EQ(sent.verify, api::Verify::Crc32c);
  ASSERT_EQ(sent.targets.size(), 1U);
  EXPECT_FALSE(sent.targets[0].grant_id.empty()) << "the grant the source asks for its sum";
  EXPECT_FALSE(sent.targets[0].url.empty());
  EXPECT_EQ(sent.targets[0].resume_offset, 0U);
  auto body = api::TransferRequest::from_json(sent.to_json());
  EXPECT_TRUE(body) << "the agent refuses the body: " << body.error().message;

  // A mismatch fails the attempt after every byte landed; the next one sends the whole op list again (an
  // op list is not resumed).
  agents.last().targets[0].committed_bytes = 1024;
  agents.finish("Failed", "ChecksumMismatch", "crc32c mismatch over the 1 ops' 1024 bytes");
  for (int i = 0; i < 5 && agents.starts < 2; ++i) {
    reconcile("verified");
    clock.advance(2s);  // past the retry's backoff
  }
  ASSERT_EQ(agents.starts, 2) << store.job("verified").dump(2);
  const api::TransferRequest& again = agents.requests.at("t-2");
  ASSERT_EQ(again.targets.size(), 1U);
  EXPECT_EQ(again.targets[0].resume_offset, 0U);
  EXPECT_EQ(again.ops.size(), 1U);
  EXPECT_TRUE(api::TransferRequest::from_json(again.to_json()));
}

TEST_F(ReconcilerTest, TensorsReachTheTargetRegionsAJobCreatesWithTheSourcesManifest) {
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  json spec = subset_job("created", {"lm_head.weight"});
  spec["spec"]["targets"][0]["create"] = {{"bytes", 8192}};
  spec["spec"]["targets"][0]["region"] = "copy";
  store.put(spec);
  start("created");
  EXPECT_EQ(agents.nodes["node-b"].manifests.at("copy").to_json(), model_manifest().to_json());
  ASSERT_EQ(agents.requests.at("t-1").ops.size(), 1U);
  EXPECT_EQ(agents.requests.at("t-1").ops[0].target_offset, 4096U);
}

TEST_F(ReconcilerTest, TensorsThatDoNotMatchTheTargetFailTheJobNamingTheTensorBeforeAByteMoves) {
  ASSERT_TRUE(agents.create_region(
      "node-a", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest()}));
  ASSERT_TRUE(agents.create_region(
      "node-b", api::CreateRegion{.name = "model", .bytes = 8192, .manifest = model_manifest(0, "F16")}));
  ASSERT_TRUE(agents.create_region("node-c", "plain", 8192, "host", ""));
  struct Case {
    const char* name;
    json tensors;
    const char* node = "node-b";
    const char* region = "model";
    const char* says;
  };
  const Case cases[] = {
      {"dtype",
       {"lm_head.weight"},
       "node-b",
       "model",
       "\"lm_head.weight\" is BF16 [512] in the source but F16 [512] in the target"},
      {"unmatched", {"model.layers.7.*"}, "node-b", "model", "\"model.layers.7.*\" matches no tensor"},
      {"unnamed",
       {"lm_head.weight"},
       "node-c",
       "plain",
       "target region \"plain\" on node \"node-c\" has no manifest"},
  };
  for (const Case& c : cases) {
    json spec = subset_job(c.name, c.tensors);
    spec["spec"]["targets"][0]["node"] = c.node;
    spec["spec"]["targets"][0]["region"] = c.region;
    store.put(spec);
    for (int i = 0; i < 3 && phase(c.name) != "Failed"; ++i) reconcile(c.name);
    EXPECT_EQ(phase(c.name), "Failed") << c.name;
    const json failed = condition(c.name, "Failed");
    EXPECT_EQ(failed.value("reason", ""), "TensorMismatch") << c.name;
    EXPECT_NE(failed.value("message", "").find(c.says), std::string::npos) << c.name << ": " << failed.dump();
  }
  EXPECT_EQ(agents.starts, 0) << "no transfer started";
  EXPECT_EQ(agents.grants_made, 0) << "no grant handed out";
}

TEST_F(ReconcilerTest, TensorsAreRefusedWhereAScatterBatchCannotRun) {
  const struct {
    json overrides;
    const char* says;
  } cases[] = {
      {{{"tensors", {"a"}}, {"verify", "none"}}, "spec.tensors: needs source.region"},
      {{{"tensors", {"a"}}}, "spec.tensors: needs source.region"},
  };
  for (const auto& c : cases) {
    json spec = job("x", c.overrides)["spec"];
    auto parsed = TransferJobSpec::parse(spec);
    ASSERT_FALSE(parsed) << spec.dump();
    EXPECT_NE(parsed.error().message.find(c.says), std::string::npos) << parsed.error().message;
  }
  json chain = job("x", testing::fanout_to_b_and_c())["spec"];
  chain["strategy"] = "Chain";
  chain["verify"] = "none";
  chain["source"] = {{"node", "node-a"}, {"region", "model"}};
  chain["tensors"] = {"a"};
  auto refused = TransferJobSpec::parse(chain);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("cannot be used with strategy Chain"), std::string::npos);
  json empty = job("x", {{"source", {{"file", nullptr}, {"region", "model"}}}, {"verify", "none"}})["spec"];
  empty["tensors"] = json::array();
  refused = TransferJobSpec::parse(empty);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("spec.tensors: must hold 1 to 128"), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace conduit::controller
