// /healthz as a supervisor reads it: ok while every rail can move bytes, 503 saying why once one never can
// again, so that the kubelet's liveness probe (or local mode's user) restarts the agent.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "agent_process.h"
#include "build_paths.h"
#include "peer_process.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::AgentProcess;
using testing::PeerProcess;

constexpr std::uint64_t MiB = 1 << 20;

// libfabric 1.17's shm wedges a rail for good when a peer is killed holding the lock in its region
// (docs/reliability.md): the target takes that lock itself and is killed, and the agent writes to it.
TEST(AgentHealth, AWedgedShmRailMakesHealthzUnhealthySayingWhy) {
  auto options = testing::small_tcp_agent();
  options.provider = "shm";
  options.extra_args = {"--stall-timeout-ms", "1000"};
  AgentProcess agent(options);
  ASSERT_TRUE(agent.started());
  EXPECT_EQ(agent.get("/healthz").status, 200);
  ASSERT_EQ(agent.post("/v1/regions", {{"name", "src"}, {"bytes", MiB}}).status, 201);

  PeerProcess target({conduit::testing::built_binary("conduit-test-peer"), "--provider", "shm", "--bytes",
                      std::to_string(MiB), "--seed", "1", "--access", "rw", "--rails", "1",
                      "--register-rails", ""});
  const auto key = target.read_line(30s);
  ASSERT_TRUE(key.has_value()) << "the target printed no key";
  const auto held = target.ask("hold-shm-lock");
  if (held != "held") GTEST_SKIP() << "cannot take shm's lock in the target: " << held.value_or("no answer");
  target.kill(SIGKILL);

  auto sent = agent.post("/v1/transfers?waitSeconds=20",
                         {{"source", {{"region", "src"}}}, {"targets", {{{"grant", json::parse(*key)}}}}});
  ASSERT_EQ(sent.status, 200) << sent.body.dump();
  EXPECT_EQ(sent.body.value("state", ""), "Failed") << sent.body.dump();

  const auto health = agent.get("/healthz");
  EXPECT_EQ(health.status, 503) << health.body.dump();
  const std::string message = health.body["error"].value("message", "");
  EXPECT_NE(message.find("shm"), std::string::npos) << message;
  EXPECT_NE(message.find("wedged"), std::string::npos) << message;
  EXPECT_NE(message.find("restart"), std::string::npos) << message;
  // And it still exits when asked: the wedged rail's thread is left to the process's end, not joined.
  EXPECT_TRUE(agent.process().terminate(10s).has_value()) << "the agent had to be killed";
}

}  // namespace
}  // namespace conduit
