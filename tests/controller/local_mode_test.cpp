// Local mode for real: two conduit-agent processes on loopback, the conduit-controller binary on a temp
// directory, and TransferJob YAML files written into it, as a user would. The test reads what the user reads
// (the job file's status) and checks the bytes through the agents.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <thread>

#include "agent_process.h"
#include "conduit/crc32c.h"
#include "eventually.h"
#include "file_bytes.h"
#include "local_mode_dir.h"
#include "peer_process.h"
#include "store/yaml_json.h"
#include "tls_files.h"

namespace conduit::controller {
namespace {

using namespace std::chrono_literals;
using conduit::testing::AgentOptions;
using conduit::testing::AgentProcess;
using conduit::testing::eventually;
using conduit::testing::LocalModeDir;
using conduit::testing::PeerProcess;
using conduit::testing::quiet_tcp_agent;
using conduit::testing::region_crc;
using conduit::testing::write_seeded;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

// An agent serving HTTPS with `cert`, trusting `ca` for its calls to other agents, and taking `extra` flags.
AgentOptions tls_agent(const conduit::testing::TestCa& ca, const conduit::testing::CertFiles& cert,
                       const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags{"--peer-ca-file", ca.cert().string()};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return conduit::testing::tls_agent(cert, ca.cert(), flags, quiet_tcp_agent());
}

class LocalMode : public conduit::testing::TwoAgents {
 protected:
  LocalMode() : TwoAgents(quiet_tcp_agent(), quiet_tcp_agent()) {}

  void SetUp() override {
    ASSERT_TRUE(a.started() && b.started());
    jobs.write_token(a.token());
  }

  std::unique_ptr<PeerProcess> start_controller(const std::vector<std::string>& extra = {}) {
    return std::make_unique<PeerProcess>(jobs.controller(a.url(), b.url(), extra));
  }

  // Seeded bytes as a file in node-a's data directory.
  std::vector<std::byte> source_file(const std::string& name, std::uint64_t bytes, std::uint64_t seed) {
    return write_seeded(a.data_dir() / name, bytes, seed);
  }

  void apply(const std::string& name, const std::string& yaml) { jobs.apply(name, yaml); }

  json read_job(const std::string& name) {
    std::ifstream in(jobs.jobs() / (name + ".yaml"));
    if (!in) return json();
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = parse_yaml(text);
    return parsed.ok() ? *parsed : json();
  }

  // The job's status as the file says now; an empty object before the controller wrote one.
  json status(const std::string& name) {
    const json job = read_job(name);
    return job.is_object() && job.contains("status") && job["status"].is_object() ? job["status"]
                                                                                  : json::object();
  }
  std::string phase(const std::string& name) { return status(name).value("phase", ""); }

  json condition(const std::string& name, const std::string& type) {
    for (const auto& c : status(name).value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return json();
  }

  static std::string job_yaml(const std::string& name, const std::string& target_node, std::uint64_t bytes,
                              const std::string& extra_spec = "") {
    return "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: " + name +
           "\nspec:\n  source: {node: node-a, file: " + name +
           ".bin}\n  targets:\n    - node: " + target_node + "\n      region: " + name +
           "\n      create: {bytes: " + std::to_string(bytes) + "}\n  verify: crc32c\n" + extra_spec;
  }

  LocalModeDir jobs{"conduit-local-mode"};
};

TEST_F(LocalMode, JobMovesSixtyFourMiBVerifiedAndAMissingNodeFailsReadably) {
  const auto source = source_file("weights.bin", 64 * MiB, 11);
  auto controller = start_controller();
  apply("weights", job_yaml("weights", "node-b", 64 * MiB));
  apply("lost", job_yaml("lost", "node-z", 64 * MiB));

  ASSERT_TRUE(eventually([&] { return phase("weights") == "Succeeded"; }, 60s))
      << read_job("weights").dump(2);
  const json done = status("weights");
  EXPECT_EQ(done["bytesTransferred"], 64 * MiB);
  EXPECT_EQ(done["bytesTotal"], 64 * MiB);
  EXPECT_EQ(done["progress"], "100%");
  EXPECT_EQ(done["targets"][0]["verified"], true);
  EXPECT_EQ(done["targets"][0]["transport"], "tcp");
  EXPECT_EQ(condition("weights", "Complete")["status"], "True");
  EXPECT_EQ(region_crc(b, "weights", 64 * MiB), crc32c(source));
  // Nothing is left open or loaded: no grants on the target, no temporary region on the source.
  EXPECT_TRUE(b.get("/v1/grants").body["items"].empty()) << b.get("/v1/grants").body.dump();
  EXPECT_TRUE(a.get("/v1/regions").body["items"].empty()) << a.get("/v1/regions").body.dump();

  ASSERT_TRUE(eventually([&] { return phase("lost") == "Failed"; }, 30s)) << read_job("lost").dump(2);
  EXPECT_EQ(condition("lost", "Failed")["reason"], "NodeNotFound");
  EXPECT_NE(condition("lost", "Failed")["message"].get<std::string>().find("\"node-z\""), std::string::npos);

  ::kill(controller->pid(), SIGTERM);
  EXPECT_EQ(controller->wait(), 0) << "SIGTERM stops the controller cleanly";
}

TEST_F(LocalMode, OnceJobExitsWithTheOutcomeAndSavesTheTargetFile) {
  const auto source = source_file("ckpt.bin", 16 * MiB, 5);
  // The target also saves its region to a file on node-b once the bytes are in.
  std::string yaml = job_yaml("ckpt", "node-b", 16 * MiB);
  yaml.insert(yaml.find("  verify"), "      file: restored/ckpt.bin\n");
  apply("ckpt", yaml);
  auto controller = start_controller({"--once-job", "ckpt"});
  const auto line = controller->read_line(60s);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("Succeeded"), std::string::npos) << *line;
  EXPECT_EQ(controller->wait(), 0);
  std::ifstream saved(b.data_dir() / "restored" / "ckpt.bin", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 16 * MiB);
  EXPECT_EQ(crc32c(std::as_bytes(std::span(bytes))), crc32c(source));

  apply("bad", job_yaml("bad", "node-b", 16 * MiB, "  chunkBytes: 1024\n"));
  auto second = start_controller({"--once-job", "bad"});
  const auto failed = second->read_line(30s);
  ASSERT_TRUE(failed.has_value());
  EXPECT_NE(failed->find("InvalidSpec"), std::string::npos) << *failed;
  EXPECT_EQ(second->wait(), 1);
}

// A script waiting on --once-job gets its answer when the outcome is written, not at the controller's next
// tick: the median of five runs, from the job file's last write to the exit, stays far under the 0.3-0.5 s
// an exit on a 200 ms tick (and a half-second wait for changes) took.
TEST_F(LocalMode, OnceJobExitsAsSoonAsTheOutcomeIsWritten) {
  source_file("quick.bin", 64 * MiB, 9);
  std::vector<double> lags;
  for (int i = 0; i < 5; ++i) {
    const std::string name = "quick-" + std::to_string(i);
    std::string yaml = job_yaml(name, "node-b", 64 * MiB);
    yaml.replace(yaml.find("file: " + name + ".bin"), ("file: " + name + ".bin").size(), "file: quick.bin");
    apply(name, yaml);
    auto controller = start_controller({"--once-job", name});
    ASSERT_EQ(controller->wait(), 0);
    const auto exited = std::filesystem::file_time_type::clock::now();
    const auto written = std::filesystem::last_write_time(jobs.path() / "jobs" / (name + ".yaml"));
    ASSERT_EQ(phase(name), "Succeeded");
    lags.push_back(std::chrono::duration<double>(exited - written).count());
  }
  std::sort(lags.begin(), lags.end());
  EXPECT_LT(lags[2], 0.15) << "median seconds from the Succeeded write to the exit";
}

TEST_F(LocalMode, ANewControllerFinishesTheTransferItDidNotStartExactlyOnce) {
  source_file("slow.bin", 64 * MiB, 3);
  // 16 MiB/s: four seconds, time to kill the controller half way.
  apply("slow", job_yaml("slow", "node-b", 64 * MiB, "  maxBytesPerSecond: 16777216\n"));
  auto first = start_controller();
  ASSERT_TRUE(eventually([&] { return status("slow").value("bytesTransferred", std::uint64_t{0}) > 0; }, 30s))
      << read_job("slow").dump(2);
  first->kill(SIGKILL);
  auto second = start_controller();
  ASSERT_TRUE(eventually([&] { return phase("slow") == "Succeeded"; }, 60s)) << read_job("slow").dump(2);
  const json transfers = a.get("/v1/transfers").body["items"];
  EXPECT_EQ(transfers.size(), 1U) << transfers.dump(2);
  EXPECT_EQ(status("slow").value("retries", 0), 0);
}

TEST_F(LocalMode, RemovingTheJobFileCancelsTheTransferAndRevokesTheGrant) {
  source_file("gone.bin", 64 * MiB, 9);
  apply("gone", job_yaml("gone", "node-b", 64 * MiB, "  maxBytesPerSecond: 8388608\n"));
  auto controller = start_controller();
  ASSERT_TRUE(eventually([&] { return phase("gone") == "Running"; }, 30s)) << read_job("gone").dump(2);
  ASSERT_TRUE(eventually([&] { return !b.get("/v1/grants").body["items"].empty(); }, 10s));
  std::filesystem::remove(jobs.path() / "jobs" / "gone.yaml");
  ASSERT_TRUE(eventually([&] { return b.get("/v1/grants").body["items"].empty(); }, 20s))
      << b.get("/v1/grants").body.dump();
  const json transfers = a.get("/v1/transfers").body["items"];
  ASSERT_EQ(transfers.size(), 1U);
  EXPECT_TRUE(
      eventually([&] { return a.get("/v1/transfers").body["items"][0]["state"] == "Cancelled"; }, 10s))
      << a.get("/v1/transfers").body.dump();
  EXPECT_TRUE(eventually([&] { return a.get("/v1/regions").body["items"].empty(); }, 10s))
      << "the loaded source is released";
}

TEST_F(LocalMode, AJobReachesOnlyItsNamespacesRegionsUntilTheOwnerSharesThem) {
  // Regions of team-a on node-b: one private, one shared with team-b. A job of team-b names each.
  source_file("w.bin", MiB, 5);
  ASSERT_EQ(b.post("/v1/regions",
                   {{"name", "private"}, {"bytes", MiB}, {"memory", "host"}, {"namespace", "team-a"}})
                .status,
            201);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "shared"},
                                   {"bytes", MiB},
                                   {"memory", "host"},
                                   {"namespace", "team-a"},
                                   {"sharedWith", {"team-b"}}})
                .status,
            201);
  auto job = [](const std::string& name, const std::string& region) {
    return "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata: {name: " + name +
           ", namespace: team-b}\nspec:\n  source: {node: node-a, file: w.bin}\n  targets:\n    - {node: "
           "node-b, region: " +
           region + "}\n";
  };
  auto controller = start_controller();
  apply("into-private", job("into-private", "private"));
  apply("into-shared", job("into-shared", "shared"));

  ASSERT_TRUE(eventually([&] { return phase("into-private") == "Failed"; }, 30s))
      << read_job("into-private").dump(2);
  const json failed = condition("into-private", "Failed");
  EXPECT_EQ(failed["reason"], "RegionNotShared");
  EXPECT_NE(failed.value("message", "")
                .find("belongs to namespace team-a, which does not share it with "
                      "namespace team-b"),
            std::string::npos)
      << failed.dump();
  ASSERT_TRUE(eventually([&] { return phase("into-shared") == "Succeeded"; }, 30s))
      << read_job("into-shared").dump(2);

  // The agent checks again: a grant or a transfer that names team-b on team-a's private region is refused
  // even with the operator's credentials the controller holds.
  auto grant = b.post("/v1/regions/private/grants", {{"access", "write"}, {"namespace", "team-b"}});
  EXPECT_EQ(grant.status, 403) << grant.body.dump();
  EXPECT_EQ(grant.body["error"]["code"], "Forbidden");
  auto into = b.post("/v1/regions/shared/grants", {{"access", "write"}});
  ASSERT_EQ(into.status, 201) << into.body.dump();
  auto send = b.post("/v1/transfers",
                     {{"source", {{"region", "private"}}},
                      {"namespace", "team-b"},
                      {"targets", {{{"grant", into.body["key"]}, {"url", b.url()}, {"region", "shared"}}}}});
  EXPECT_EQ(send.status, 403) << send.body.dump();

  // A team-b job whose run record, written by hand, claims team-a's private region as one it created: the
  // job fails (no agent on node-z) and the controller deletes what it created, as team-b's alone, so the
  // agent refuses and the region stays.
  apply("forged",
        "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: forged\n"
        "  namespace: team-b\n  annotations:\n    conduit.dev/run: '{\"attempt\": 1, \"created\": "
        "[{\"node\": \"node-b\", \"name\": \"private\"}]}'\nspec:\n  source: {node: node-a, "
        "file: w.bin}\n  targets:\n    - {node: node-z, region: x}\n");
  ASSERT_TRUE(eventually([&] { return phase("forged") == "Failed"; }, 30s)) << read_job("forged").dump(2);
  EXPECT_EQ(b.get("/v1/regions/private").status, 200) << "team-a's region was deleted for a team-b job";
  EXPECT_EQ(b.get("/v1/regions/private").body["namespace"], "team-a");
}

// Two nodes' serving certificates from one test CA, in a controller's working directory: what every TLS
// story starts from. A test issues what else it needs (a tenant's, another node's) and checks ca.ok().
class LocalModeTls : public ::testing::Test {
 protected:
  LocalModeDir work{"conduit-local-tls"};
  conduit::testing::TestCa ca{work.path() / "ca", "conduit-test-ca"};
  const conduit::testing::CertFiles cert_a = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  const conduit::testing::CertFiles cert_b = ca.issue("node-b", "DNS:node-b,IP:127.0.0.1");
};

// Every REST hop over TLS: the controller to both agents (--agent-ca-file), and the source agent's landing
// reports to the target agent (--peer-ca-file), with a file saved as it lands; then a controller that does
// not trust the agents' CA fails the job at once with the reason.
TEST_F(LocalModeTls, AJobRunsOverHttpsEveryHopAndAnUntrustedAgentFailsItWithTheReason) {
  ASSERT_TRUE(ca.ok()) << "openssl could not make test certificates";
  AgentProcess a(tls_agent(ca, cert_a));
  AgentProcess b(tls_agent(ca, cert_b));
  ASSERT_TRUE(a.started() && b.started());
  ASSERT_EQ(a.url().rfind("https://", 0), 0U);
  const auto data = write_seeded(a.data_dir() / "w.bin", 8 * MiB + 4321, 21);
  work.write_token(a.token());
  auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::ofstream(work.jobs() / (name + ".yaml"))
        << "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: " << name
        << "\nspec:\n  source: {node: node-a, file: w.bin}\n  targets:\n    - {node: node-b, region: " << name
        << ", create: {bytes: " << data.size() << "}, file: " << name
        << ".bin}\n  verify: crc32c\n  backoffLimit: 0\n";
    std::vector<std::string> flags{"--once-job", name};
    flags.insert(flags.end(), extra.begin(), extra.end());
    PeerProcess controller(work.controller(a.url(), b.url(), flags));
    const auto line = controller.read_line(60s);
    return std::pair{line.value_or(""), controller.wait()};
  };
  const auto [ok_line, ok_status] = run("tls", {"--agent-ca-file", ca.cert().string()});
  EXPECT_EQ(ok_status, 0) << ok_line;
  EXPECT_NE(ok_line.find("Succeeded"), std::string::npos) << ok_line;
  std::ifstream saved(b.data_dir() / "tls.bin", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  EXPECT_EQ(crc32c(std::as_bytes(std::span(bytes))), crc32c(data));

  const auto [refused_line, refused_status] = run("untrusted", {});
  EXPECT_EQ(refused_status, 1) << refused_line;
  EXPECT_NE(refused_line.find("certificate is not trusted"), std::string::npos) << refused_line;
}

// A refusal no retry changes fails the job at once: the source agent presents another node's certificate, so
// the target agent answers its landing reports 403 (the grant is made for the source's node). Before, the
// job burned its whole backoffLimit (4 attempts, BackoffLimitExceeded) on the same 403.
TEST_F(LocalModeTls, ARefusalBetweenAgentsFailsTheJobAtOnce) {
  const auto not_node_a = ca.issue("conduit:agent:node-c", "DNS:node-c");
  ASSERT_TRUE(ca.ok()) << "openssl could not make test certificates";
  const std::string clients = ca.cert().string();
  AgentProcess a(tls_agent(ca, cert_a,
                           {"--client-ca-file", clients, "--peer-client-cert", not_node_a.cert.string(),
                            "--peer-client-key", not_node_a.key.string()}));
  AgentProcess b(tls_agent(ca, cert_b, {"--client-ca-file", clients}));
  ASSERT_TRUE(a.started() && b.started());
  const auto data = write_seeded(a.data_dir() / "w.bin", 2 * MiB + 5, 29);
  work.write_token(a.token());
  std::ofstream(work.jobs() / "refused.yaml")
      << "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: refused\nspec:\n"
      << "  source: {node: node-a, file: w.bin}\n  targets:\n    - {node: node-b, region: refused, create: "
      << "{bytes: " << data.size() << "}}\n  verify: crc32c\n  backoffLimit: 3\n";
  PeerProcess controller(
      work.controller(a.url(), b.url(), {"--agent-ca-file", ca.cert().string(), "--once-job", "refused"}));
  const std::string line = controller.read_line(60s).value_or("");
  EXPECT_EQ(controller.wait(), 1) << line;
  EXPECT_NE(line.find("Failed: RemoteAccessDenied: "), std::string::npos) << line;
  EXPECT_NE(line.find("the agent of node \"node-c\" may not POST /v1/grants/"), std::string::npos) << line;
  EXPECT_EQ(line.find("BackoffLimitExceeded"), std::string::npos) << line;
}

// A tenant's controller (a client certificate naming conduit:controller:team-a, and no token) runs team-a's
// jobs; a job of another namespace it is handed fails at once with the agents' refusal, whatever the job
// says: the namespace is bound to the controller's certificate, not to what it claims.
TEST_F(LocalModeTls, ATenantsControllerRunsItsNamespacesJobsAndNoOneElses) {
  const auto tenant = ca.issue("conduit:controller:team-a", "DNS:x");
  ASSERT_TRUE(ca.ok()) << "openssl could not make test certificates";
  AgentProcess a(tls_agent(ca, cert_a, {"--client-ca-file", ca.cert().string()}));
  AgentProcess b(tls_agent(ca, cert_b, {"--client-ca-file", ca.cert().string()}));
  ASSERT_TRUE(a.started() && b.started());
  const auto data = write_seeded(a.data_dir() / "w.bin", 4 * MiB + 77, 23);
  auto run = [&](const std::string& name, const std::string& ns) {
    std::ofstream(work.jobs() / (name + ".yaml"))
        << "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: " << name
        << "\n  namespace: " << ns << "\nspec:\n  source: {node: node-a, file: w.bin}\n  targets:\n"
        << "    - {node: node-b, region: " << name << ", create: {bytes: " << data.size()
        << "}}\n  verify: crc32c\n  backoffLimit: 2\n";
    // No token: the tenant's client certificate is its identity.
    PeerProcess controller(
        work.controller(a.url(), b.url(),
                        {"--agent-ca-file", ca.cert().string(), "--agent-client-cert", tenant.cert.string(),
                         "--agent-client-key", tenant.key.string(), "--once-job", ns + "/" + name}));
    const auto line = controller.read_line(60s);
    return std::pair{line.value_or(""), controller.wait()};
  };
  const auto [ok_line, ok_status] = run("ours", "team-a");
  EXPECT_EQ(ok_status, 0) << ok_line;
  EXPECT_NE(ok_line.find("Succeeded"), std::string::npos) << ok_line;
  auto landed = b.get("/v1/regions/ours/checksum");
  ASSERT_EQ(landed.status, 200) << landed.body.dump();
  EXPECT_EQ(b.get("/v1/regions/ours").body.value("namespace", ""), "team-a");

  const auto [refused_line, refused_status] = run("theirs", "team-b");
  EXPECT_EQ(refused_status, 1) << refused_line;
  EXPECT_NE(refused_line.find("RemoteAccessDenied"), std::string::npos) << refused_line;
  EXPECT_NE(refused_line.find("the controller of namespace \"team-a\" may not act for namespace \"team-b\""),
            std::string::npos)
      << refused_line;
  EXPECT_EQ(b.get("/v1/regions/theirs").status, 404) << "nothing was made for team-b";
}

// Files of namespaces (agents with --namespace-files): a team-a job reads and writes only under "team-a/" of
// each agent's data directory, whether the file is its source, a target saved as it lands, a file target
// with no region or a save after the transfer; a file of another namespace fails the job at once, naming the
// rule. An operator's own request (no namespace) still reaches every file.
TEST(LocalModeFiles, WithNamespaceFilesAJobReachesOnlyItsNamespacesFiles) {
  LocalModeDir work{"conduit-local-files"};
  AgentOptions options = quiet_tcp_agent();
  options.extra_args.push_back("--namespace-files");
  AgentProcess a(options);
  AgentProcess b(options);
  ASSERT_TRUE(a.started() && b.started());
  const auto data = write_seeded(a.data_dir() / "team-a" / "w.bin", 4 * MiB + 123, 31);
  conduit::testing::write_file(a.data_dir() / "team-b" / "w.bin", data);
  work.write_token(a.token());
  auto run = [&](const std::string& name, const std::string& source, const std::string& target) {
    std::ofstream(work.jobs() / (name + ".yaml"))
        << "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata: {name: " << name
        << ", namespace: team-a}\nspec:\n  source: {node: node-a, file: " << source << "}\n  targets:\n    - "
        << target << "\n  verify: crc32c\n  backoffLimit: 3\n";
    PeerProcess controller(work.controller(a.url(), b.url(), {"--once-job", "team-a/" + name}));
    const auto line = controller.read_line(60s);
    controller.wait();
    return line.value_or("");
  };
  auto retries = [&](const std::string& name) {
    std::ifstream in(work.jobs() / (name + ".yaml"));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto job = parse_yaml(text);
    return job.ok() ? job->value("status", json::object()).value("retries", 0) : -1;
  };
  auto crc_of = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return crc32c(std::as_bytes(std::span(bytes)));
  };

  // Its own namespace's files: a region saved as it lands, and a file with no region.
  std::string line = run("own", "team-a/w.bin",
                         "{node: node-b, region: own, create: {bytes: 4194427}, file: team-a/own.bin}");
  EXPECT_NE(line.find("team-a/own Succeeded"), std::string::npos) << line;
  EXPECT_EQ(crc_of(b.data_dir() / "team-a" / "own.bin"), crc32c(data));
  line = run("ring", "team-a/w.bin", "{node: node-b, file: team-a/ring.bin}");
  EXPECT_NE(line.find("team-a/ring Succeeded"), std::string::npos) << line;
  EXPECT_EQ(crc_of(b.data_dir() / "team-a" / "ring.bin"), crc32c(data));

  // Another namespace's, or none: refused by the agent, the job Failed at once (no retry can change that).
  const std::pair<std::string, std::pair<std::string, std::string>> refused[] = {
      {"their-source", {"team-b/w.bin", "{node: node-b, region: theirs, create: {bytes: 4194427}}"}},
      {"their-save",
       {"team-a/w.bin", "{node: node-b, region: save, create: {bytes: 4194427}, file: team-b/x.bin}"}},
      {"top-ring", {"team-a/w.bin", "{node: node-b, file: x.bin}"}},
  };
  for (const auto& [name, job] : refused) {
    line = run(name, job.first, job.second);
    EXPECT_NE(line.find("team-a/" + name + " Failed: RemoteAccessDenied: "), std::string::npos) << line;
    EXPECT_NE(line.find("is not in namespace team-a's directory \"team-a/\""), std::string::npos) << line;
    EXPECT_EQ(retries(name), 0) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(b.data_dir() / "team-b" / "x.bin"));
  EXPECT_FALSE(std::filesystem::exists(b.data_dir() / "x.bin"));

  // An operator (no namespace) reaches any file; a request naming team-a does not reach team-b's.
  EXPECT_EQ(a.post("/v1/files/stat", {{"path", "team-b/w.bin"}}).status, 200);
  const auto stat = a.post("/v1/files/stat", {{"path", "team-b/w.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(stat.status, 403) << stat.body.dump();
  EXPECT_EQ(stat.body["error"]["code"], "Forbidden");
}

}  // namespace
}  // namespace conduit::controller
