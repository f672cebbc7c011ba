// Rendezvous kept by the agent (docs/python.md, "Rendezvous and acknowledgements"): a GET of a region waits
// for its making, and a region's readers ack the versions they applied while a publisher reads or waits for
// the acks. Real agent over real HTTP; versions move by the grant commit a transfer's target makes.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <string>
#include <thread>

#include "agent_process.h"

namespace conduit {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::AgentProcess;

std::string message(const AgentProcess::Reply& r) { return r.body["error"].value("message", ""); }

// A GET on a connection of its own (the test's own client is busy meanwhile), as a waiting process would.
json get_on_own_connection(const AgentProcess& a, const std::string& path, int* status) {
  httplib::Client c(a.url());
  c.set_bearer_token_auth(a.token());
  c.set_read_timeout(40, 0);
  auto r = c.Get(path);
  *status = r ? r->status : 0;
  return r ? json::parse(r->body, nullptr, false) : json();
}

class AcksHttp : public ::testing::Test {
 protected:
  AgentProcess a{testing::small_tcp_agent()};

  // One more version of region `name`: a write grant's every byte landed and committed, as a transfer's
  // target agent reports it.
  void bump(const std::string& name) {
    auto g = a.post("/v1/regions/" + name + "/grants", {{"access", "write"}, {"length", 4096}});
    ASSERT_EQ(g.status, 201) << g.body.dump();
    const std::string id = g.body["id"];
    ASSERT_EQ(a.post("/v1/grants/" + id + "/landed", {{"offset", 0}, {"length", 4096}}).status, 200);
    auto committed = a.post("/v1/grants/" + id + "/commit", {{"bytes", 4096}});
    ASSERT_EQ(committed.status, 200) << committed.body.dump();
    a.del("/v1/grants/" + id);
  }
  std::uint64_t version(const std::string& name) {
    return a.get("/v1/regions/" + name).body.value("version", std::uint64_t{99});
  }
};

TEST_F(AcksHttp, AWaitForARegionAnswersWhenAnotherThreadMakesIt) {
  ASSERT_TRUE(a.started());
  int status = 0;
  json got;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { got = get_on_own_connection(a, "/v1/regions/late?timeoutSeconds=30", &status); });
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(a.post("/v1/regions", {{"name", "late"}, {"bytes", 4096}}).status, 201);
  waiter.join();
  EXPECT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["name"], "late");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "woken by the making, not by its timeout";
  // Made already: at once, as without the parameter.
  EXPECT_EQ(a.get("/v1/regions/late?timeoutSeconds=30").status, 200);
}

TEST_F(AcksHttp, AWaitForARegionNeverMadeIs404AfterItsTimeout) {
  ASSERT_TRUE(a.started());
  const auto t0 = std::chrono::steady_clock::now();
  const auto never = a.get("/v1/regions/never?timeoutSeconds=1");
  EXPECT_EQ(never.status, 404);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  EXPECT_NE(message(never).find("waited 1 s"), std::string::npos) << never.body.dump();
  EXPECT_EQ(a.get("/v1/regions/never").status, 404) << "without the parameter, at once as before";
  EXPECT_EQ(a.get("/v1/regions/never?timeoutSeconds=61").status, 400);
  EXPECT_EQ(a.get("/v1/regions/never?timeoutSeconds=-1").status, 400);
  EXPECT_EQ(a.get("/v1/regions/never?after=1").status, 400);
}

TEST_F(AcksHttp, WaitsEndWhenTheAgentShutsDown) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  int made = -1, acked = -1;
  std::thread region([&] { get_on_own_connection(a, "/v1/regions/never?timeoutSeconds=60", &made); });
  std::thread acks(
      [&] { get_on_own_connection(a, "/v1/regions/w/acks?readers=1&timeoutSeconds=60", &acked); });
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  a.process().kill(SIGTERM);
  region.join();
  acks.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the waits held the agent's shutdown";
}

TEST_F(AcksHttp, AcksAreRecordedReplacedAndCountedTowardsDone) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  bump("w");
  bump("w");
  ASSERT_EQ(version("w"), 2u);
  auto first = a.post("/v1/regions/w/acks", {{"reader", "node-b/7"}, {"version", 1}});
  ASSERT_EQ(first.status, 200) << first.body.dump();
  EXPECT_EQ(first.body["readers"].size(), 1u);
  ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "node-c/9"}, {"version", 2}}).status, 200);

  auto two = a.get("/v1/regions/w/acks?version=2&readers=2");
  ASSERT_EQ(two.status, 200) << two.body.dump();
  EXPECT_EQ(two.body["region"], "w");
  EXPECT_EQ(two.body["version"], 2);
  EXPECT_FALSE(two.body["done"]) << "node-b/7 applied version 1 only";
  EXPECT_TRUE(a.get("/v1/regions/w/acks?version=1&readers=2").body["done"]) << "a later version counts";

  // A reader's later ack replaces its earlier: still two readers, now both at 2.
  ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "node-b/7"}, {"version", 2}}).status, 200);
  auto now = a.get("/v1/regions/w/acks?version=2&readers=2");
  EXPECT_TRUE(now.body["done"]) << now.body.dump();
  ASSERT_EQ(now.body["readers"].size(), 2u);
  EXPECT_EQ(now.body["readers"][0]["reader"], "node-b/7");
  EXPECT_EQ(now.body["readers"][0]["version"], 2);
  EXPECT_TRUE(now.body["readers"][0]["at"].is_string());

  // Dropped with the region: made again under the same name, it has none.
  ASSERT_EQ(a.del("/v1/regions/w").status, 204);
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  EXPECT_EQ(a.get("/v1/regions/w/acks").body["readers"].size(), 0u);
}

TEST_F(AcksHttp, RefusedAcksSayWhyAndChangeNothing) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  bump("w");
  ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "r"}, {"version", 1}}).status, 200);

  const auto ahead = a.post("/v1/regions/w/acks", {{"reader", "r"}, {"version", 2}});
  EXPECT_EQ(ahead.status, 409);
  EXPECT_NE(message(ahead).find("past its current version 1"), std::string::npos) << ahead.body.dump();
  EXPECT_EQ(a.post("/v1/regions/nope/acks", {{"reader", "r"}, {"version", 0}}).status, 404);
  const auto no_reader = a.post("/v1/regions/w/acks", {{"version", 0}});
  EXPECT_EQ(no_reader.status, 400);
  EXPECT_NE(message(no_reader).find("reader"), std::string::npos) << no_reader.body.dump();
  EXPECT_EQ(a.post("/v1/regions/w/acks", {{"reader", "r"}, {"version", -1}}).status, 400);
  EXPECT_EQ(a.post("/v1/regions/w/acks", {{"reader", std::string(254, 'r')}, {"version", 0}}).status, 400);
  EXPECT_EQ(a.post("/v1/regions/w/acks", {{"reader", "r"}, {"version", 0}, {"colour", 1}}).status, 400);
  EXPECT_EQ(a.get("/v1/regions/w/acks?readers=1025").status, 400);
  EXPECT_EQ(a.get("/v1/regions/w/acks?version=9223372036854775808").status, 400);

  const auto after = a.get("/v1/regions/w/acks?version=1");
  ASSERT_EQ(after.body["readers"].size(), 1u) << after.body.dump();
  EXPECT_EQ(after.body["readers"][0]["version"], 1) << "the refused ack left r at version 1";
}

TEST_F(AcksHttp, AtMost1024ReadersPerRegion) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  for (int i = 0; i < 1024; ++i) {
    ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "r" + std::to_string(i)}, {"version", 0}}).status, 200)
        << i;
  }
  const auto over = a.post("/v1/regions/w/acks", {{"reader", "r1024"}, {"version", 0}});
  EXPECT_EQ(over.status, 422);
  EXPECT_NE(message(over).find("1024 readers"), std::string::npos) << over.body.dump();
  EXPECT_EQ(a.post("/v1/regions/w/acks", {{"reader", "r5"}, {"version", 0}}).status, 200)
      << "a reader already kept may ack again";
  EXPECT_TRUE(a.get("/v1/regions/w/acks?version=0&readers=1024").body["done"]);
}

TEST_F(AcksHttp, AWaitForAcksWakesOnTheAckThatCompletesIt) {
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "w"}, {"bytes", 4096}}).status, 201);
  bump("w");
  int status = 0;
  json got;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread publisher([&] {
    got = get_on_own_connection(a, "/v1/regions/w/acks?version=1&readers=2&timeoutSeconds=30", &status);
  });
  ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "b"}, {"version", 1}}).status, 200);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(a.post("/v1/regions/w/acks", {{"reader", "c"}, {"version", 1}}).status, 200);
  publisher.join();
  EXPECT_EQ(status, 200) << got.dump();
  EXPECT_TRUE(got["done"]) << got.dump();
  EXPECT_EQ(got["readers"].size(), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "woken by the ack, not by its timeout";

  // Not done when the time is up: the acks as they are.
  const auto t1 = std::chrono::steady_clock::now();
  const auto short_of = a.get("/v1/regions/w/acks?version=1&readers=3&timeoutSeconds=1");
  EXPECT_EQ(short_of.status, 200);
  EXPECT_FALSE(short_of.body["done"]);
  EXPECT_GE(std::chrono::steady_clock::now() - t1, 900ms);
}

}  // namespace
}  // namespace conduit
