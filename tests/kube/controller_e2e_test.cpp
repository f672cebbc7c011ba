// Kubernetes mode end to end: a real kube-apiserver (the kube_api fixture), two conduit-agent processes on
// loopback, the conduit-controller binary with the env's kubeconfig, and the real kubectl, driven as a user
// drives them. The bytes are checked through the agents, never taken from the controller's word.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>

#include "agent_process.h"
#include "build_paths.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "kube_api_env.h"
#include "peer_process.h"
#include "temp_dir.h"

namespace conduit::kube::testing {
namespace {

using namespace std::chrono_literals;
using conduit::testing::AgentOptions;
using conduit::testing::AgentProcess;
using conduit::testing::PeerProcess;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

AgentOptions agent_options() {
  return conduit::testing::quiet_tcp_agent(conduit::testing::built_binary("conduit-agent"));
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CommandResult {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

CommandResult shell(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The kubectl scripts/kube-tools.sh built (the machine's own may be of another version).
std::string kubectl_path() {
  const auto printed =
      shell(shell_quote(std::string(conduit::testing::source_dir()) + "/scripts/kube-tools.sh") + " --print");
  const std::string key = "KUBECTL=";
  const auto at = printed.out.find(key);
  if (at == std::string::npos) return {};
  const auto end = printed.out.find('\n', at);
  return printed.out.substr(at + key.size(),
                            end == std::string::npos ? std::string::npos : end - at - key.size());
}

// A free loopback port: bound and released, so a later bind by the controller is very likely to get it.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

class ControllerKube : public KubeApiTest {
 protected:
  void SetUp() override {
    KubeApiTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    kubectl_ = kubectl_path();
    ASSERT_FALSE(kubectl_.empty()) << "scripts/kube-tools.sh --print names no KUBECTL";
    ASSERT_TRUE(a.started() && b.started());
    std::ofstream(dir.path() / "token") << a.token() << "\n";
  }

  // With the agents given by --agents unless `extra` names --agent-service.
  std::unique_ptr<PeerProcess> start_controller(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{conduit::testing::built_binary("conduit-controller"),
                                  "--kubeconfig",
                                  api_->kubeconfig(),
                                  "--namespace",
                                  ns_,
                                  "--agent-token-file",
                                  (dir.path() / "token").string(),
                                  "--log-level",
                                  "warn"};
    if (std::find(extra.begin(), extra.end(), "--agent-service") == extra.end()) {
      argv.insert(argv.end(), {"--agents", "node-a=" + a.url() + ",node-b=" + b.url()});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<PeerProcess>(argv);
  }

  CommandResult kubectl(const std::string& args) {
    return shell(shell_quote(kubectl_) + " --kubeconfig " + shell_quote(api_->kubeconfig()) + " -n " + ns_ +
                 " " + args);
  }

  CommandResult apply(const std::string& name, const std::string& yaml) {
    const auto file = dir.path() / (name + ".yaml");
    std::ofstream(file) << yaml;
    return kubectl("apply -f " + shell_quote(file.string()));
  }

  // Seeded bytes loaded into a region on node-a through the agent API.
  std::vector<std::byte> source_region(const std::string& name, std::uint64_t bytes, std::uint64_t seed) {
    std::vector<std::byte> data(bytes);
    fill_pattern(data, seed);
    std::ofstream(a.data_dir() / (name + ".bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    auto r = a.post("/v1/regions", {{"name", name}, {"file", name + ".bin"}, {"mode", "load"}});
    EXPECT_EQ(r.status, 201) << r.body.dump();
    return data;
  }

  std::uint32_t region_crc(AgentProcess& agent, const std::string& region, std::uint64_t bytes) {
    auto sums = agent.get("/v1/regions/" + region + "/checksum?slice=" + std::to_string(bytes));
    EXPECT_EQ(sums.status, 200) << sums.body.dump();
    return sums.status == 200 ? sums.body["crc32c"][0].get<std::uint32_t>() : 0;
  }

  static std::string job_yaml(const std::string& name, const std::string& source_region, std::uint64_t bytes,
                              const std::string& extra_spec = "") {
    return "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: " + name +
           "\nspec:\n  source:\n    node: node-a\n    region: " + source_region +
           "\n  targets:\n    - node: node-b\n      region: " + name +
           "\n      create:\n        bytes: " + std::to_string(bytes) +
           "\n        memory: host\n  strategy: PointToPoint\n  verify: crc32c\n" + extra_spec;
  }

  std::string metrics(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1s);
    c.set_read_timeout(2s);
    auto res = c.Get("/metrics");
    return res && res->status == 200 ? res->body : std::string();
  }

  std::string kubectl_;
  AgentProcess a{agent_options()};
  AgentProcess b{agent_options()};
  conduit::testing::TempDir dir{"conduit-kube-e2e"};
};

TEST_F(ControllerKube, KubectlAppliedJobCompletesVerifiedAndShowsInGet) {
  const auto source = source_region("kv-src", 32 * MiB, 21);
  auto controller = start_controller();
  const auto applied = apply("p2p", job_yaml("p2p", "kv-src", 32 * MiB));
  ASSERT_EQ(applied.rc, 0) << applied.out;

  const auto waited = kubectl("wait --for=condition=Complete transferjob/p2p --timeout=60s");
  ASSERT_EQ(waited.rc, 0) << waited.out << kubectl("get transferjob p2p -o yaml").out;
  const auto got = kubectl("get transferjobs");
  EXPECT_NE(got.out.find("Succeeded"), std::string::npos) << got.out;
  EXPECT_NE(got.out.find("100%"), std::string::npos) << got.out;
  EXPECT_EQ(region_crc(b, "p2p", 32 * MiB), crc32c(source));

  const auto status = json::parse(kubectl("get transferjob p2p -o json").out, nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status["status"]["bytesTransferred"], 32 * MiB);
  EXPECT_EQ(status["status"]["targets"][0]["verified"], true);

  // The controller also keeps a FabricNode per agent, valid for the CRD: reachable, with its transports.
  const auto reachable = [&](const std::string& node) {
    return kubectl("get fabricnode " + node +
                   " -o jsonpath='{.status.conditions[?(@.type==\"Reachable\")].status}'")
        .out;
  };
  ASSERT_TRUE(eventually([&] { return reachable("node-a") == "True" && reachable("node-b") == "True"; }, 15s))
      << kubectl("get fabricnodes -o yaml").out;
  const auto nodes = kubectl("get fabricnodes node-a node-b");
  EXPECT_NE(nodes.out.find("tcp"), std::string::npos) << nodes.out;
  const auto node_a = json::parse(kubectl("get fabricnode node-a -o json").out, nullptr, false);
  ASSERT_FALSE(node_a.is_discarded());
  EXPECT_EQ(node_a["status"]["memory"]["capBytes"], 2048 * MiB);
  EXPECT_EQ(node_a["status"]["conditions"].size(), 3U) << node_a.dump(2);

  // An agent that stops answering turns its node Reachable=False within ~10 s.
  b.process().kill(SIGKILL);
  EXPECT_TRUE(eventually([&] { return reachable("node-b") == "False"; }, 15s))
      << kubectl("get fabricnode node-b -o yaml").out;

  ::kill(controller->pid(), SIGTERM);
  EXPECT_EQ(controller->wait(), 0) << "SIGTERM stops the controller cleanly";
}

TEST_F(ControllerKube, KubectlDeleteOfARunningJobCancelsItAndRevokesTheGrant) {
  source_region("kv-src", 64 * MiB, 9);
  auto controller = start_controller();
  // 8 MiB/s: eight seconds, time to delete it half way.
  ASSERT_EQ(apply("gone", job_yaml("gone", "kv-src", 64 * MiB, "  maxBytesPerSecond: 8388608\n")).rc, 0);
  const auto running =
      kubectl("wait --for=jsonpath='{.status.phase}'=Running transferjob/gone --timeout=30s");
  ASSERT_EQ(running.rc, 0) << running.out << kubectl("get transferjob gone -o yaml").out;
  ASSERT_TRUE(eventually([&] { return !b.get("/v1/grants").body["items"].empty(); }, 10s));

  // The finalizer holds the object until the controller has cancelled and revoked; then it is gone.
  const auto deleted = kubectl("delete transferjob gone --wait=true --timeout=30s");
  ASSERT_EQ(deleted.rc, 0) << deleted.out;
  EXPECT_NE(kubectl("get transferjob gone").out.find("NotFound"), std::string::npos);
  EXPECT_TRUE(b.get("/v1/grants").body["items"].empty()) << b.get("/v1/grants").body.dump();
  const json transfers = a.get("/v1/transfers").body["items"];
  ASSERT_EQ(transfers.size(), 1U) << transfers.dump(2);
  EXPECT_TRUE(
      eventually([&] { return a.get("/v1/transfers").body["items"][0]["state"] == "Cancelled"; }, 10s))
      << a.get("/v1/transfers").body.dump();

  ::kill(controller->pid(), SIGTERM);
  EXPECT_EQ(controller->wait(), 0);
}

TEST_F(ControllerKube, AControllerKilledMidTransferIsReplacedAndTheJobCompletesExactlyOnce) {
  const auto source = source_region("kv-src", 64 * MiB, 3);
  // 16 MiB/s: four seconds, time to kill the controller half way.
  ASSERT_EQ(apply("slow", job_yaml("slow", "kv-src", 64 * MiB, "  maxBytesPerSecond: 16777216\n")).rc, 0);
  auto first = start_controller();
  ASSERT_TRUE(eventually(
      [&] {
        // Some digit other than 0: bytes have moved.
        const std::string bytes =
            kubectl("get transferjob slow -o jsonpath='{.status.bytesTransferred}'").out;
        return bytes.find_first_of("123456789") != std::string::npos;
      },
      30s))
      << kubectl("get transferjob slow -o yaml").out;
  first->kill(SIGKILL);
  auto second = start_controller();
  const auto waited = kubectl("wait --for=condition=Complete transferjob/slow --timeout=60s");
  ASSERT_EQ(waited.rc, 0) << waited.out << kubectl("get transferjob slow -o yaml").out;
  EXPECT_EQ(region_crc(b, "slow", 64 * MiB), crc32c(source));
  // The second controller reattached to the transfer the first started: one transfer, no retry.
  EXPECT_EQ(a.get("/v1/transfers").body["items"].size(), 1U) << a.get("/v1/transfers").body.dump(2);
  // status.retries is written once there is one: absent or 0 both mean none.
  const std::string retries = kubectl("get transferjob slow -o jsonpath='{.status.retries}'").out;
  EXPECT_TRUE(retries.empty() || retries == "0") << retries;

  ::kill(second->pid(), SIGTERM);
  EXPECT_EQ(second->wait(), 0);
}

TEST_F(ControllerKube, TwoControllersWithLeaderElectionExactlyOneActsAndTheOtherTakesOver) {
  const std::vector<std::string> election{"--leader-elect",
                                          "--leader-election-namespace",
                                          ns_,
                                          "--lease-duration",
                                          "3",
                                          "--renew-deadline",
                                          "2",
                                          "--retry-period",
                                          "0.5"};
  const int port1 = free_port();
  const int port2 = free_port();
  auto with_port = [&](int port) {
    auto args = election;
    args.insert(args.end(), {"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
    return args;
  };
  auto first = start_controller(with_port(port1));
  auto second = start_controller(with_port(port2));
  // Whole sample lines, so the metric's HELP text can never match.
  const std::string leading = "\nconduit_controller_is_leader 1\n";
  const std::string standing_by = "\nconduit_controller_is_leader 0\n";
  // One leads; the other stands by, and keeps standing by.
  ASSERT_TRUE(eventually(
      [&] {
        const auto m1 = metrics(port1), m2 = metrics(port2);
        return (m1.find(leading) != std::string::npos && m2.find(standing_by) != std::string::npos) ||
               (m2.find(leading) != std::string::npos && m1.find(standing_by) != std::string::npos);
      },
      20s))
      << metrics(port1) << "\n---\n"
      << metrics(port2);
  const bool first_leads = metrics(port1).find(leading) != std::string::npos;
  // And stays so over a few renewals.
  std::this_thread::sleep_for(2s);
  const auto m_leader = metrics(first_leads ? port1 : port2);
  const auto m_standby = metrics(first_leads ? port2 : port1);
  EXPECT_NE(m_leader.find(leading), std::string::npos) << m_leader;
  EXPECT_NE(m_standby.find(standing_by), std::string::npos) << m_standby;
  auto& leader = first_leads ? first : second;
  auto& standby = first_leads ? second : first;
  const int standby_port = first_leads ? port2 : port1;

  // Killed without releasing the Lease, as a crash: the standby takes over after the lease duration and
  // runs the job applied meanwhile.
  leader->kill(SIGKILL);
  const auto source = source_region("kv-src", 8 * MiB, 4);
  ASSERT_EQ(apply("after", job_yaml("after", "kv-src", 8 * MiB)).rc, 0);
  ASSERT_TRUE(eventually([&] { return metrics(standby_port).find(leading) != std::string::npos; }, 15s))
      << metrics(standby_port);
  const auto waited = kubectl("wait --for=condition=Complete transferjob/after --timeout=60s");
  ASSERT_EQ(waited.rc, 0) << waited.out << kubectl("get transferjob after -o yaml").out;
  EXPECT_EQ(region_crc(b, "after", 8 * MiB), crc32c(source));
  EXPECT_EQ(a.get("/v1/transfers").body["items"].size(), 1U) << a.get("/v1/transfers").body.dump(2);

  // What the new leader reports: the finished job, reconciles timed, both agents reachable.
  ASSERT_TRUE(eventually(
      [&] {
        const auto m = metrics(standby_port);
        return m.find("conduit_controller_transferjobs{phase=\"Succeeded\"} 1") != std::string::npos &&
               m.find("conduit_controller_fabricnodes{reachable=\"true\"} 2") != std::string::npos;
      },
      15s))
      << metrics(standby_port);
  const auto m = metrics(standby_port);
  EXPECT_NE(m.find("conduit_controller_reconcile_duration_seconds_count"), std::string::npos) << m;
  EXPECT_NE(m.find("conduit_controller_reconcile_errors_total{reason=\"exception\"} 0"), std::string::npos)
      << m;
  EXPECT_NE(m.find("conduit_controller_queue_depth"), std::string::npos) << m;
  httplib::Client probe("127.0.0.1", standby_port);
  for (const char* path : {"/healthz", "/readyz"}) {
    auto res = probe.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
  }

  ::kill(standby->pid(), SIGTERM);
  EXPECT_EQ(standby->wait(), 0);
}

// Mistakes on the command line are usage errors (exit 2) before anything is contacted.
TEST(ControllerKubeFlags, MistakesAreUsageErrors) {
  const std::vector<std::vector<std::string>> bad{
      {"--kubeconfig", "/nonexistent/kubeconfig", "--agents", "node-a=http://127.0.0.1:1"},
      {"--kubeconfig", "/nonexistent/kubeconfig"},  // no agents at all
      {"--kubeconfig", "/nonexistent/kubeconfig", "--agents", "node-a=http://127.0.0.1:1", "--renew-deadline",
       "20"},
      {"--kubeconfig", "/nonexistent/kubeconfig", "--agents", "node-a=http://127.0.0.1:1", "--once-job", "x"},
      {"--local-dir", "/tmp", "--agents", "node-a=http://127.0.0.1:1", "--leader-elect"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> argv{conduit::testing::built_binary("conduit-controller")};
    argv.insert(argv.end(), args.begin(), args.end());
    PeerProcess controller(argv);
    EXPECT_EQ(controller.wait(), 2) << args[0] << " " << args[1] << " ... " << args.back();
  }
}

}  // namespace
}  // namespace conduit::kube::testing
