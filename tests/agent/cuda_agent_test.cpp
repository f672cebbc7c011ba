// `memory: cuda:N` through real conduit-agent processes, as a user meets it:
//  - where CUDA cannot be used (these build machines: no driver, or a build without CUDA) a clear 422 on
//    the API and the CLI, /v1/node saying why, and a TransferJob that fails Unsupported with the reason;
//  - with the CUDA host double (conduit-agent-cuda-double, a test build of the agent whose "device" memory is
//    host memory behind the same copies) the staged path end to end over tcp;ofi_rxm: host -> GPU region and
//    GPU -> GPU region,
//    CRC32C-verified, the path visible in /v1/node, the grant, the transfer status and
//    conduit_agent_staged_fallback_total. bench/gpu-check.sh runs the same flows on a real GPU.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "agent_process.h"
#include "build_paths.h"
#include "conduit/crc32c.h"
#include "conduit/cuda_device.h"
#include "conduit/pattern.h"
#include "eventually.h"
#include "file_bytes.h"
#include "local_mode_dir.h"
#include "peer_process.h"
#include "temp_dir.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::AgentProcess;
using testing::quiet_tcp_agent;

constexpr std::uint64_t MiB = 1 << 20;

// What an agent started from this test process says about cuda:0 (it sees the same machine and build).
std::string expected_cuda_error() {
  const auto& gpu = cuda::availability();
  return gpu.built ? "no CUDA device 0: " + gpu.reason
                   : "this agent was built without CUDA: cuda:0 regions are not available";
}

class CudaUnavailable : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::availability().usable()) GTEST_SKIP() << "CUDA is usable here; the staged tests cover it";
  }
};

TEST_F(CudaUnavailable, RegionCreateIs422WithTheReasonAndNodeSaysWhy) {
  AgentProcess a(quiet_tcp_agent());
  ASSERT_TRUE(a.started());
  auto r = a.post("/v1/regions", {{"name", "gpu"}, {"bytes", 4096}, {"memory", "cuda:0"}});
  EXPECT_EQ(r.status, 422) << r.body.dump();
  EXPECT_EQ(r.body["error"]["code"], "Unsupported");
  EXPECT_EQ(r.body["error"]["message"], expected_cuda_error());
  EXPECT_EQ(a.get("/v1/regions").body["items"].size(), 0u);

  const json node = a.get("/v1/node").body;
  EXPECT_EQ(node["cuda"]["built"], cuda::availability().built);
  EXPECT_EQ(node["cuda"]["reason"], cuda::availability().reason);
  ASSERT_EQ(node["fabric"].size(), 1u);
  EXPECT_EQ(node["fabric"][0]["gpuDirect"], "none");
  EXPECT_EQ(node["fabric"][0]["gpuDirectDetail"], cuda::availability().reason);
  for (const auto& c : node["checks"]) {
    if (c["name"] == "gpu") {
      EXPECT_FALSE(c["ok"].get<bool>());
    }
  }

  // The CLI prints the agent's reason and exits 1.
  testing::TempDir out;
  const std::string cmd = "CONDUIT_TOKEN=" + a.token() + " " + conduit::testing::built_binary("conduit") +
                          " --agent " + a.url() + " regions create gpu --bytes 4096 --memory cuda:0 > " +
                          (out.path() / "out").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
  std::ifstream in(out.path() / "out");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(expected_cuda_error()), std::string::npos) << text;
}

TEST_F(CudaUnavailable, ACudaIpcImportIsRefusedWithTheReason) {
  AgentProcess a(quiet_tcp_agent());
  ASSERT_TRUE(a.started());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = (a.data_dir().parent_path() / "import.sock").string();
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << path;
  const std::string line =
      json{{"name", "ipc"}, {"bytes", 4096}, {"cudaIpcHandle", std::string(128, '0')}, {"device", 0}}.dump() +
      "\n";
  ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; reply.find('\n') == std::string::npos && (n = ::read(fd, buf, sizeof buf)) > 0;) {
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const json answer = json::parse(reply, nullptr, false);
  EXPECT_EQ(answer["error"]["code"], "Unsupported") << reply;
  EXPECT_EQ(answer["error"]["message"], expected_cuda_error()) << reply;
}

// Local mode for real: a TransferJob from a file on node-a into a new `cuda:0` region on node-b, run by the
// conduit-controller binary until the job ends; its status as the job file says then (null on timeout).
YAML::Node run_gpu_job(AgentProcess& a, AgentProcess& b, std::uint64_t bytes) {
  testing::LocalModeDir dir("conduit-cuda-job");
  dir.write_token(a.token());
  testing::write_seeded(a.data_dir() / "weights.bin", bytes, 3);
  dir.apply("to-gpu",
            "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: to-gpu\nspec:\n"
            "  source: {node: node-a, file: weights.bin}\n  targets:\n    - node: node-b\n      region: w\n"
            "      create: {bytes: " +
                std::to_string(bytes) + ", memory: \"cuda:0\"}\n  verify: crc32c\n");
  testing::PeerProcess controller(dir.controller(a.url(), b.url()));
  YAML::Node status;
  testing::eventually(
      [&] {
        try {
          const YAML::Node job = YAML::LoadFile((dir.jobs() / "to-gpu.yaml").string());
          const std::string phase = job["status"] ? job["status"]["phase"].as<std::string>("") : "";
          if (phase != "Failed" && phase != "Succeeded") return false;
          status = YAML::Clone(job["status"]);
          return true;
        } catch (const std::exception&) {
          return false;  // caught mid-rename
        }
      },
      90s);
  return status;
}

std::string condition(const YAML::Node& status, const std::string& type, const std::string& field) {
  for (const auto& c : status["conditions"]) {
    if (c["type"].as<std::string>() == type) return c[field].as<std::string>("");
  }
  return "";
}

TEST_F(CudaUnavailable, ATransferJobIntoCudaMemoryFailsUnsupportedWithTheAgentsReason) {
  AgentProcess a(quiet_tcp_agent());
  AgentProcess b(quiet_tcp_agent());
  ASSERT_TRUE(a.started() && b.started());
  const YAML::Node status = run_gpu_job(a, b, MiB);
  ASSERT_TRUE(status) << "the job did not end";
  EXPECT_EQ(status["phase"].as<std::string>(), "Failed");
  EXPECT_EQ(condition(status, "Failed", "reason"), "Unsupported");
  EXPECT_NE(condition(status, "Failed", "message").find(expected_cuda_error()), std::string::npos)
      << condition(status, "Failed", "message");
}

// ---- The staged path with the CUDA host double (conduit-agent-cuda-double) ----

class StagedAgents : public testing::TwoAgents {
 protected:
  StagedAgents()
      : TwoAgents(quiet_tcp_agent(conduit::testing::built_binary("conduit-agent-cuda-double")),
                  quiet_tcp_agent(conduit::testing::built_binary("conduit-agent-cuda-double"))) {}
  void SetUp() override { ASSERT_TRUE(a.started() && b.started()); }

  json grant(AgentProcess& target, const std::string& region, std::uint64_t length) {
    return testing::region_grant(target, region,
                                 {{"length", length}, {"access", "write"}, {"ttlSeconds", 600}});
  }

  json transfer(AgentProcess& source, const std::string& region, AgentProcess& target, const std::string& to,
                const json& key) {
    auto r =
        source.post("/v1/transfers", {{"source", {{"region", region}}},
                                      {"targets", {{{"grant", key}, {"url", target.url()}, {"region", to}}}},
                                      {"chunkBytes", MiB},
                                      {"verify", "crc32c"}});
    EXPECT_EQ(r.status, 202) << r.body.dump();
    return source.wait_transfer(r.body.value("id", ""));
  }

  std::uint32_t crc(AgentProcess& agent, const std::string& region, std::uint64_t bytes) {
    return testing::region_crc(agent, region, bytes);
  }
};

TEST_F(StagedAgents, NodeSaysTcpReachesCudaMemoryStaged) {
  const json node = a.get("/v1/node").body;
  EXPECT_EQ(node["cuda"]["devices"].size(), 1u);
  EXPECT_NE(node["cuda"]["devices"][0]["name"].get<std::string>().find("host double"), std::string::npos);
  EXPECT_EQ(node["fabric"][0]["gpuDirect"], "staged");
  EXPECT_NE(node["fabric"][0]["gpuDirectDetail"].get<std::string>().find("FI_HMEM"), std::string::npos)
      << node["fabric"][0].dump();
  auto r = a.post("/v1/regions", {{"name", "g1"}, {"bytes", 4096}, {"memory", "cuda:1"}});
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["error"]["message"], "no CUDA device 1: this node has 1 (cuda:0..0)");
}

TEST_F(StagedAgents, HostToGpuThenGpuToGpuAreVerifiedAndSayStagedEverywhere) {
  // Not a multiple of the 32 MiB staging slot, so the last piece is short.
  constexpr std::uint64_t kBytes = 72 * MiB + 4096;
  const auto data = load_seeded(a, "weights", kBytes, 21);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "gpu-b"}, {"bytes", kBytes}, {"memory", "cuda:0"}}).status, 201);
  const json region = b.get("/v1/regions/gpu-b").body;
  EXPECT_EQ(region["memory"], "cuda:0");

  // host (a) -> GPU (b): b grants its staging buffer; a writes and tells b to copy each landed piece.
  const json g1 = grant(b, "gpu-b", kBytes);
  EXPECT_EQ(g1["gpuPath"], "staged");
  EXPECT_EQ(g1["key"]["staged"], true);
  const json t1 = transfer(a, "weights", b, "gpu-b", g1["key"]);
  EXPECT_EQ(t1["state"], "Succeeded") << t1.dump();
  EXPECT_EQ(t1["verified"], true);
  EXPECT_EQ(t1["gpuPath"], "none");  // the source is host memory
  EXPECT_EQ(t1["targets"][0]["staged"], true);
  EXPECT_EQ(t1["targets"][0]["committedBytes"], kBytes);
  EXPECT_EQ(crc(b, "gpu-b", kBytes), crc32c(data));  // read back from the "device"
  EXPECT_EQ(b.del("/v1/grants/" + g1["id"].get<std::string>()).status, 204);

  // GPU (b) -> GPU (a): b's source goes through its bounce slots, a's target through its staging buffer.
  ASSERT_EQ(a.post("/v1/regions", {{"name", "gpu-a"}, {"bytes", kBytes}, {"memory", "cuda:0"}}).status, 201);
  const json g2 = grant(a, "gpu-a", kBytes);
  const json t2 = transfer(b, "gpu-b", a, "gpu-a", g2["key"]);
  EXPECT_EQ(t2["state"], "Succeeded") << t2.dump();
  EXPECT_EQ(t2["verified"], true);
  EXPECT_EQ(t2["gpuPath"], "staged");
  EXPECT_EQ(t2["targets"][0]["staged"], true);
  EXPECT_EQ(crc(a, "gpu-a", kBytes), crc32c(data));

  // Never silent: each node counted the ends it staged (b: the grant of t1 and the source of t2;
  // a: the grant of t2).
  EXPECT_EQ(b.metric("conduit_agent_staged_fallback_total"), 2);
  EXPECT_EQ(a.metric("conduit_agent_staged_fallback_total"), 1);

  // A read into GPU memory from a staged GPU region: b reads a's gpu-a into its gpu-r (inbound staging at
  // b, a copies each piece from its device into its staging buffer before b reads it).
  ASSERT_EQ(b.post("/v1/regions", {{"name", "gpu-r"}, {"bytes", kBytes}, {"memory", "cuda:0"}}).status, 201);
  auto g3 = a.post("/v1/regions/gpu-a/grants", {{"access", "read"}, {"ttlSeconds", 600}});
  ASSERT_EQ(g3.status, 201) << g3.body.dump();
  auto r3 = b.post("/v1/transfers",
                   {{"source", {{"region", "gpu-r"}}},
                    {"targets", {{{"grant", g3.body["key"]}, {"url", a.url()}, {"region", "gpu-a"}}}},
                    {"op", "read"},
                    {"verify", "crc32c"}});
  ASSERT_EQ(r3.status, 202) << r3.body.dump();
  const json t3 = b.wait_transfer(r3.body["id"]);
  EXPECT_EQ(t3["state"], "Succeeded") << t3.dump();
  EXPECT_EQ(t3["gpuPath"], "staged");
  EXPECT_EQ(crc(b, "gpu-r", kBytes), crc32c(data));

  // Saved to a file from device memory, byte for byte.
  ASSERT_EQ(a.post("/v1/regions/gpu-a/save", {{"file", "out.bin"}}).status, 200);
  std::ifstream in(a.data_dir() / "out.bin", std::ios::binary);
  std::vector<char> saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(saved.size(), kBytes);
  EXPECT_EQ(crc32c(std::as_bytes(std::span(saved))), crc32c(data));
}

TEST_F(StagedAgents, ATransferJobIntoCudaMemorySucceedsVerified) {
  const YAML::Node status = run_gpu_job(a, b, 40 * MiB + 512);
  ASSERT_TRUE(status) << "the job did not end";
  EXPECT_EQ(status["phase"].as<std::string>(), "Succeeded") << YAML::Dump(status);
  std::vector<std::byte> data(40 * MiB + 512);
  fill_pattern(data, 3);
  EXPECT_EQ(crc(b, "w", data.size()), crc32c(data));
  EXPECT_EQ(b.get("/v1/regions/w").body["memory"], "cuda:0");
}

TEST_F(StagedAgents, StagingCopiesOnlyWithAStagedGrantAndOnlyValidRanges) {
  ASSERT_EQ(b.post("/v1/regions", {{"name", "gpu"}, {"bytes", MiB}, {"memory", "cuda:0"}}).status, 201);
  const json body{{"offset", 0}, {"length", MiB}, {"direction", "toDevice"}};
  // No staged grant yet: nothing to copy, and the answer says so.
  auto none = b.post("/v1/regions/gpu/staging", body);
  EXPECT_EQ(none.status, 200) << none.body.dump();
  EXPECT_EQ(none.body["copied"], false);
  grant(b, "gpu", MiB);
  auto copied = b.post("/v1/regions/gpu/staging", body);
  EXPECT_EQ(copied.status, 200) << copied.body.dump();
  EXPECT_EQ(copied.body["copied"], true);
  EXPECT_EQ(
      b.post("/v1/regions/gpu/staging", {{"offset", 1}, {"length", MiB}, {"direction", "toHost"}}).status,
      400);
  EXPECT_EQ(b.post("/v1/regions/gpu/staging", {{"offset", 0}, {"length", 1}, {"direction", "up"}}).status,
            400);
  EXPECT_EQ(b.post("/v1/regions/nope/staging", body).status, 404);

  // A staged key without the target's url and region cannot be honoured: refused up front.
  const json g = grant(b, "gpu", MiB);
  load_seeded(a, "src", MiB, 1);
  auto r = a.post("/v1/transfers", {{"source", {{"region", "src"}}}, {"targets", {{{"grant", g["key"]}}}}});
  EXPECT_EQ(r.status, 400) << r.body.dump();
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("staged CUDA range"), std::string::npos);
}

// A CUDA region's write grant takes no landing reports: its holder commits it, to a version; and its ranges
// sum as a verified scatter batch's target sums them (device memory read through a pinned buffer), equal to
// GET checksum over the same bytes.
TEST_F(StagedAgents, ACudaRegionsWriteGrantCommitsToAVersionAndItsRangesSum) {
  ASSERT_EQ(b.post("/v1/regions", {{"name", "gpu"}, {"bytes", MiB}, {"memory", "cuda:0"}}).status, 201);
  load_seeded(a, "src", MiB, 4);
  const json g = grant(b, "gpu", MiB);
  const json done = transfer(a, "src", b, "gpu", g["key"]);  // no grantId: nothing commits
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_EQ(b.get("/v1/regions/gpu/version").body["version"], 0);

  const std::string id = g["id"];
  auto committed = b.post("/v1/grants/" + id + "/commit", {{"bytes", MiB}, {"version", 1}});
  ASSERT_EQ(committed.status, 200) << committed.body.dump();
  EXPECT_EQ(committed.body["region"]["version"], 1);
  EXPECT_EQ(b.post("/v1/grants/" + id + "/commit", {{"bytes", MiB}, {"version", 1}}).status, 409);

  // [4096, +65536): little-endian uint64 offset 4096, length 65536.
  auto sum = b.post("/v1/grants/" + id + "/checksum", {{"rangesPacked", "ABAAAAAAAAAAAAEAAAAAAA=="}});
  ASSERT_EQ(sum.status, 200) << sum.body.dump();
  auto whole = b.get("/v1/regions/gpu/checksum?offset=4096&length=65536&slice=65536");
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  EXPECT_EQ(sum.body["crc32c"], whole.body["crc32c"][0]);
  auto source = a.get("/v1/regions/src/checksum?offset=4096&length=65536&slice=65536");
  EXPECT_EQ(sum.body["crc32c"], source.body["crc32c"][0]) << "the bytes the transfer moved";
}

}  // namespace
}  // namespace conduit
