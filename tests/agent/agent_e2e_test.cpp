// Real conduit-agent processes on loopback, driven over HTTP as the controller and the CLI drive them:
// bytes move agent to agent and verify, and cancellation, deadlines, concurrency and SIGTERM end cleanly.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "agent_process.h"
#include "build_paths.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::AgentOptions;
using testing::AgentProcess;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

AgentOptions agent_options(const std::string& provider) {
  AgentOptions o;
  o.provider = provider;
  return o;
}

json grant(AgentProcess& target, const std::string& region, std::uint64_t length, int ttl = 600) {
  return testing::region_grant(target, region,
                               {{"offset", 0}, {"length", length}, {"access", "write"}, {"ttlSeconds", ttl}});
}

json transfer_body(const std::string& source, const json& g, const AgentProcess& target,
                   const std::string& region, std::uint64_t chunk = MiB, int window = 16,
                   const std::string& verify = "crc32c") {
  return {{"source", {{"region", source}}},
          {"targets",
           {{{"grant", g["key"]},
             {"offset", 0},
             {"url", target.url()},
             {"region", region},
             {"regionOffset", 0}}}},
          {"op", "write"},
          {"chunkBytes", chunk},
          {"window", window},
          {"verify", verify}};
}

class AgentToAgent : public ::testing::TestWithParam<std::string> {};

TEST_P(AgentToAgent, FileRoundTripsThroughTwoAgentsVerified) {
  AgentProcess a(agent_options(GetParam()));
  AgentProcess b(agent_options(GetParam()));
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 256 * MiB;
  const auto source = load_seeded(a, "weights", size, 7);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "landing"}, {"bytes", size}, {"memory", "host"}}).status, 201);

  const json g = grant(b, "landing", size);
  auto started = a.post("/v1/transfers", transfer_body("weights", g, b, "landing"));
  ASSERT_EQ(started.status, 202) << started.body.dump();
  const json done = a.wait_transfer(started.body["id"]);
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_EQ(done["bytesDone"], size);
  EXPECT_EQ(done["verified"], true);

  // The landed bytes, as the target agent reports them, equal the source file.
  auto sums = b.get("/v1/regions/landing/checksum?slice=" + std::to_string(size));
  ASSERT_EQ(sums.status, 200) << sums.body.dump();
  EXPECT_EQ(sums.body["crc32c"][0].get<std::uint32_t>(), crc32c(source));

  // Saved on the target, the file is byte-identical to the file loaded on the source.
  ASSERT_EQ(b.post("/v1/regions/landing/save", {{"file", "out/weights.bin"}}).status, 200);
  std::ifstream saved(b.data_dir() / "out/weights.bin", std::ios::binary);
  std::vector<std::byte> bytes(size);
  saved.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  EXPECT_EQ(saved.gcount(), static_cast<std::streamsize>(size));
  EXPECT_TRUE(bytes == source) << "saved file differs from the source";
  EXPECT_EQ(b.del("/v1/grants/" + g["id"].get<std::string>()).status, 204);
}

INSTANTIATE_TEST_SUITE_P(Providers, AgentToAgent, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// Two tcp agents for each story below, a the source and b the target.
using Agent = testing::TwoAgents;
using Cli = testing::TwoAgents;

// Slow on purpose: capped at 64 MiB/s. `extra` adds request fields (a deadline).
json slow_transfer(AgentProcess& a, AgentProcess& b, std::uint64_t size, const json& extra = json::object()) {
  load_seeded(a, "big", size, 3);
  EXPECT_EQ(b.post("/v1/regions", {{"name", "sink"}, {"bytes", size}, {"memory", "host"}}).status, 201);
  const json g = grant(b, "sink", size);
  auto body = transfer_body("big", g, b, "sink", 4096, 1, "none");
  body["maxBytesPerSecond"] = 64 * MiB;  // 8 s for 512 MiB, however fast the machine is
  body.update(extra);
  auto started = a.post("/v1/transfers", body);
  EXPECT_EQ(started.status, 202) << started.body.dump();
  return started.body;
}

TEST_F(Agent, CancelStopsATransfer) {
  ASSERT_TRUE(a.started() && b.started());
  const json t = slow_transfer(a, b, 512 * MiB);
  std::this_thread::sleep_for(300ms);
  auto c = a.del("/v1/transfers/" + t["id"].get<std::string>());
  EXPECT_EQ(c.status, 202) << c.body.dump();
  const json done = a.wait_transfer(t["id"], 10s);
  EXPECT_EQ(done["state"], "Cancelled") << done.dump();
  EXPECT_LT(done["bytesDone"].get<std::uint64_t>(), 512 * MiB);
  // The source region is free again.
  EXPECT_EQ(a.del("/v1/regions/big").status, 204);
}

TEST_F(Agent, DeadlineFailsTheTransfer) {
  ASSERT_TRUE(a.started() && b.started());
  const json started = slow_transfer(a, b, 512 * MiB, {{"deadlineSeconds", 1}});
  ASSERT_TRUE(started.contains("id")) << started.dump();
  const json done = a.wait_transfer(started["id"], 20s);
  EXPECT_EQ(done["state"], "Failed") << done.dump();
  EXPECT_EQ(done["reason"], "DeadlineExceeded") << done.dump();
}

TEST_F(Agent, SixteenConcurrentTransfersAllVerify) {
  ASSERT_TRUE(a.started() && b.started());
  constexpr int kTransfers = 16;
  const std::uint64_t size = 8 * MiB;
  std::vector<std::string> ids;
  for (int i = 0; i < kTransfers; ++i) {
    const std::string n = "part-" + std::to_string(i);
    load_seeded(a, n, size, 100 + i);
    ASSERT_EQ(b.post("/v1/regions", {{"name", n}, {"bytes", size}, {"memory", "host"}}).status, 201);
  }
  for (int i = 0; i < kTransfers; ++i) {
    const std::string n = "part-" + std::to_string(i);
    auto started = a.post("/v1/transfers", transfer_body(n, grant(b, n, size), b, n, 256 * 1024, 8));
    ASSERT_EQ(started.status, 202) << started.body.dump();
    ids.push_back(started.body["id"]);
  }
  for (int i = 0; i < kTransfers; ++i) {
    const json done = a.wait_transfer(ids[i]);
    EXPECT_EQ(done["state"], "Succeeded") << done.dump();
    EXPECT_EQ(done["verified"], true);
    std::vector<std::byte> expected(size);
    fill_pattern(expected, 100 + i);
    auto sums = b.get("/v1/regions/part-" + std::to_string(i) + "/checksum?slice=" + std::to_string(size));
    EXPECT_EQ(sums.body["crc32c"][0].get<std::uint32_t>(), crc32c(expected)) << "part " << i;
  }
}

TEST_F(Agent, SigtermDuringTransferExitsCleanly) {
  ASSERT_TRUE(a.started() && b.started());
  const json t = slow_transfer(a, b, 512 * MiB);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(a.get("/v1/transfers/" + t["id"].get<std::string>()).body["state"], "Running");
  const auto start = std::chrono::steady_clock::now();
  ::kill(a.process().pid(), SIGTERM);
  const int status = a.process().wait();
  EXPECT_EQ(status, 0) << "conduit-agent did not exit 0 on SIGTERM";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // The target is unaffected and still serves its region.
  EXPECT_EQ(b.get("/v1/regions/sink").status, 200);
}

TEST_F(Cli, TransferBetweenAgentsSucceedsAndFailsWithReason) {
  ASSERT_TRUE(a.started() && b.started());
  load_seeded(a, "src", 32 * MiB, 9);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", 32 * MiB}, {"memory", "host"}}).status, 201);
  const std::string env = "CONDUIT_TOKEN=" + a.token() + " ";
  const std::string ok = env + conduit::testing::built_binary("conduit") + " transfer --from " + a.url() +
                         "/src --to " + b.url() + "/dst --verify crc32c 2>&1";
  EXPECT_EQ(std::system(ok.c_str()), 0) << ok;
  std::vector<std::byte> expected(32 * MiB);
  fill_pattern(expected, 9);
  EXPECT_EQ(b.get("/v1/regions/dst/checksum?slice=" + std::to_string(32 * MiB)).body["crc32c"][0],
            crc32c(expected));

  const std::string bad = env + conduit::testing::built_binary("conduit") + " transfer --from " + a.url() +
                          "/src --to " + b.url() + "/missing > /dev/null 2>&1";
  const int rc = std::system(bad.c_str());
  EXPECT_NE(rc, 0) << "a transfer to a missing region reported success";

  // A pull: node-b reads 8 MiB from node-a's region (its second quarter) into its own, at 1 MiB.
  ASSERT_EQ(b.post("/v1/regions", {{"name", "pulled"}, {"bytes", 16 * MiB}, {"memory", "host"}}).status, 201);
  const std::string pull = env + conduit::testing::built_binary("conduit") + " transfer --pull --from " +
                           a.url() + "/src --to " + b.url() +
                           "/pulled --from-offset 8MiB --to-offset 1MiB --length 8MiB --verify none 2>&1";
  EXPECT_EQ(std::system(pull.c_str()), 0) << pull;
  const auto got = b.get("/v1/regions/pulled/checksum?offset=" + std::to_string(MiB) +
                         "&length=" + std::to_string(8 * MiB) + "&slice=" + std::to_string(8 * MiB));
  EXPECT_EQ(got.body["crc32c"][0], crc32c(std::span(expected).subspan(8 * MiB, 8 * MiB))) << got.body.dump();
  EXPECT_EQ(a.get("/v1/grants").body["items"].size(), 0U)
      << "the pull's read grant on node-a was not revoked";
  EXPECT_EQ(a.get("/v1/transfers").body["items"].size(), 1U) << "node-a ran the pull; node-b should have";
}

}  // namespace
}  // namespace conduit
