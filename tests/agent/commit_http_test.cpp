// Committing a write grant to a version (POST /v1/grants/{id}/commit, docs/tensors.md "Versions"), with real
// agents: the holder of a plain write grant (no writer reported landed bytes to it: the grant a scatter batch
// writes through) commits it, each time, and the region's version moves and wakes its waiters; with
// `version`, only to that version, a mismatch refused with the version the region is at and nothing changed;
// a read grant never commits; a grant that took landing reports still commits through them, once.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "agent_process.h"

namespace conduit {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::AgentProcess;

constexpr std::uint64_t MiB = 1 << 20;

std::string message(const AgentProcess::Reply& r) { return r.body.dump(); }

class PlainCommit : public testing::TwoAgents {
 protected:
  void SetUp() override {
    ASSERT_TRUE(a.started() && b.started());
    testing::load_seeded(a, "src", MiB, 3);
    ASSERT_EQ(b.post("/v1/regions", {{"name", "kv"}, {"bytes", MiB}}).status, 201);
    grant = testing::region_grant(b, "kv",
                                  {{"access", "write"}, {"writer", "trainer/step"}, {"ttlSeconds", 600}});
  }
  // One scatter batch from node-a's region into the grant, as a reshard pair's: two ranges, verify none.
  void scatter() {
    auto done = a.post("/v1/transfers?waitSeconds=30",
                       {{"source", {{"region", "src"}}},
                        {"targets", {{{"grant", grant["key"]}}}},
                        {"ops",
                         {{{"sourceOffset", 0}, {"targetOffset", 4096}, {"length", 65536}},
                          {{"sourceOffset", 512 * 1024}, {"targetOffset", 0}, {"length", 4096}}}}});
    ASSERT_EQ(done.status, 200) << done.body.dump();
    ASSERT_EQ(done.body["state"], "Succeeded") << done.body.dump();
  }
  AgentProcess::Reply commit(const json& body, const json& g) {
    return b.post("/v1/grants/" + g["id"].get<std::string>() + "/commit", body);
  }
  AgentProcess::Reply commit(const json& body) { return commit(body, grant); }
  std::uint64_t version() { return b.get("/v1/regions/kv/version").body.value("version", std::uint64_t{99}); }
  json grant;
};

TEST_F(PlainCommit, ABatchCommittedBumpsTheVersionAndWakesAWaiter) {
  scatter();
  EXPECT_EQ(version(), 0U) << "a scatter batch alone moves no version";
  // A reader waiting for version 1, on a connection of its own.
  json woke;
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    httplib::Client c(b.url());
    c.set_bearer_token_auth(b.token());
    c.set_read_timeout(40, 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.Get("/v1/regions/kv/version?after=0&timeoutSeconds=30");
    waited = std::chrono::steady_clock::now() - t0;
    if (r && r->status == 200) woke = json::parse(r->body, nullptr, false);
  });
  std::this_thread::sleep_for(300ms);  // the reader is waiting
  const auto committed = commit({{"bytes", MiB}});
  waiter.join();
  ASSERT_EQ(committed.status, 200) << message(committed);
  EXPECT_EQ(committed.body["region"]["version"], 1) << message(committed);
  EXPECT_EQ(committed.body["region"]["updatedBy"], "trainer/step") << "the grant's writer";
  EXPECT_EQ(woke.value("version", 0), 1) << woke.dump();
  EXPECT_LT(waited, 10s) << "the waiter was not woken by the commit";

  // The next step through the same long-lived grant: another batch, another commit, with a manifest.
  scatter();
  const json manifest{
      {"tensors",
       {{{"name", "kv.block"}, {"dtype", "U8"}, {"shape", {4096}}, {"offset", 0}, {"length", 4096}}}}};
  const auto second = commit({{"bytes", 69632}, {"manifest", manifest}});
  ASSERT_EQ(second.status, 200) << message(second);
  EXPECT_EQ(version(), 2U);
  EXPECT_EQ(b.get("/v1/regions/kv/manifest").body["tensors"], manifest["tensors"]);

  const auto past = commit({{"bytes", MiB + 1}});
  EXPECT_EQ(past.status, 400) << message(past);
  EXPECT_NE(message(past).find("past the grant's 1048576 bytes"), std::string::npos) << message(past);
  EXPECT_EQ(version(), 2U);
}

TEST_F(PlainCommit, AVersionOtherThanTheNextIsRefusedAndChangesNothing) {
  scatter();
  const auto ahead = commit({{"bytes", MiB}, {"version", 3}});
  EXPECT_EQ(ahead.status, 409) << message(ahead);
  EXPECT_NE(
      message(ahead).find("region \\\"kv\\\" is at version 0: a commit to version 3 needs it at version 2"),
      std::string::npos)
      << message(ahead);
  EXPECT_EQ(version(), 0U);

  const auto step = commit({{"bytes", MiB}, {"version", 1}});
  ASSERT_EQ(step.status, 200) << message(step);
  EXPECT_EQ(step.body["region"]["version"], 1);
  // The same commit again (an answer lost on the way, say) is refused, not counted twice.
  const auto again = commit({{"bytes", MiB}, {"version", 1}});
  EXPECT_EQ(again.status, 409) << message(again);
  EXPECT_NE(message(again).find("is at version 1"), std::string::npos) << message(again);
  EXPECT_EQ(version(), 1U);

  EXPECT_EQ(commit({{"bytes", MiB}, {"version", 0}}).status, 400) << "versions start at 1";
  const json too_long{
      {"tensors",
       {{{"name", "kv.all"}, {"dtype", "U8"}, {"shape", {2 * MiB}}, {"offset", 0}, {"length", 2 * MiB}}}}};
  const auto lying = commit({{"bytes", MiB}, {"version", 2}, {"manifest", too_long}});
  EXPECT_EQ(lying.status, 400) << message(lying);
  EXPECT_NE(message(lying).find("kv.all"), std::string::npos) << message(lying);
  EXPECT_EQ(version(), 1U) << "a manifest refused commits nothing";
}

TEST_F(PlainCommit, AReadGrantCannotCommit) {
  const json read = testing::region_grant(b, "kv", {{"access", "read"}, {"ttlSeconds", 600}});
  const auto refused = commit({{"bytes", 4096}}, read);
  EXPECT_EQ(refused.status, 409) << message(refused);
  EXPECT_NE(message(refused).find("is a read grant"), std::string::npos) << message(refused);
  EXPECT_EQ(commit({{"bytes", 4096}, {"version", 1}}, read).status, 409);
  EXPECT_EQ(version(), 0U);
}

// As before: a grant a writer reported to commits what the reports say, once; a version it names is
// checked before the landing commits, so a refused one leaves the write to commit again.
TEST_F(PlainCommit, AGrantThatTookLandingReportsCommitsThroughThemOnce) {
  const std::string landed = "/v1/grants/" + grant["id"].get<std::string>() + "/landed";
  ASSERT_EQ(b.post(landed, {{"offset", 0}, {"length", 4096}}).status, 200);
  const auto short_of = commit({{"bytes", 8192}});
  EXPECT_EQ(short_of.status, 409) << message(short_of);
  EXPECT_NE(message(short_of).find("4096 of the grant's 1048576 were reported landed"), std::string::npos)
      << message(short_of);
  EXPECT_EQ(commit({{"bytes", 4096}, {"version", 2}}).status, 409);
  const auto step = commit({{"bytes", 4096}, {"version", 1}});
  ASSERT_EQ(step.status, 200) << message(step);
  EXPECT_EQ(step.body["region"]["version"], 1);
  EXPECT_EQ(step.body["landing"]["committed"], true);
  const auto again = commit({{"bytes", 4096}});
  EXPECT_EQ(again.status, 200) << message(again);
  EXPECT_EQ(version(), 1U) << "a reported write commits once";
}

}  // namespace
}  // namespace conduit
