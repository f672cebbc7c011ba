// The agent's edges a user meets first: flags, environment and config file, --help, sizes, log lines, the
// /metrics names dashboards rely on, and the inventory's reasons on a machine without RDMA.
#include "config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "build_paths.h"
#include "conduit/common/log.h"
#include "conduit/common/size.h"
#include "conduit/verbs.h"
#include "fake_sysfs.h"
#include "inventory.h"
#include "metrics/agent_metrics.h"
#include "regions.h"
#include "temp_dir.h"
#include "transport_set.h"

namespace conduit::agent {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// Runs parse_config on a command line and an environment of its own, not the test process's.
Result<ParsedConfig> parse(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), "conduit-agent");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  return parse_config(static_cast<int>(args.size()), argv.data(), envp.data());
}

std::string error_of(const Result<ParsedConfig>& r) { return r ? "(parsed fine)" : r.error().message; }

TEST(AgentConfig, FlagBeatsEnvironmentBeatsFileBeatsDefault) {
  TempDir dir;
  const std::string file = dir.write("agent.yaml",
                                     "listen: 127.0.0.1:1111\n"
                                     "rails: 2\n"
                                     "log-level: warn\n"
                                     "data-dir: /from/yaml\n"
                                     "providers: [tcp, shm]\n"
                                     "insecure-no-auth: true\n"
                                     "memory-cap: 2GiB\n");
  auto r = parse({"--config", file, "--rails", "4"},
                 {"CONDUIT_RAILS=3", "CONDUIT_LOG_LEVEL=debug", "CONDUIT_MEMORY_CAP=1GiB", "NODE_NAME=n1"});
  ASSERT_TRUE(r) << error_of(r);
  const AgentConfig& c = r->config;
  EXPECT_EQ(c.rails, 4);                  // flag
  EXPECT_EQ(c.log_level, "debug");        // environment
  EXPECT_EQ(c.memory_cap, 1ULL << 30);    // environment
  EXPECT_EQ(c.listen, "127.0.0.1:1111");  // file
  EXPECT_EQ(c.data_dir, "/from/yaml");    // file
  EXPECT_EQ(c.providers, (std::vector<std::string>{"tcp", "shm"}));
  EXPECT_TRUE(c.insecure_no_auth);    // file
  EXPECT_EQ(c.log_format, "logfmt");  // default
  EXPECT_EQ(c.stall_timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(c.node_name, "n1");
}

TEST(AgentConfig, NodeNameFromConduitVariableThenNodeNameThenHostname) {
  auto both = parse({"--insecure-no-auth"}, {"CONDUIT_NODE_NAME=a", "NODE_NAME=b"});
  ASSERT_TRUE(both) << error_of(both);
  EXPECT_EQ(both->config.node_name, "a");
  auto flag = parse({"--insecure-no-auth", "--node-name", "c"}, {"CONDUIT_NODE_NAME=a"});
  ASSERT_TRUE(flag) << error_of(flag);
  EXPECT_EQ(flag->config.node_name, "c");
  auto none = parse({"--insecure-no-auth"});
  ASSERT_TRUE(none) << error_of(none);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(none->config.node_name, host);
}

TEST(AgentConfig, ProvidersAsCommaSeparatedText) {
  auto r = parse({"--insecure-no-auth", "--providers", "tcp, shm"});
  ASSERT_TRUE(r) << error_of(r);
  EXPECT_EQ(r->config.providers, (std::vector<std::string>{"tcp", "shm"}));
}

// Regions use only the rails nearest their memory unless told to stripe over every rail.
TEST(AgentConfig, StripeAllRailsIsOffByDefaultAndSetByFlagOrVariable) {
  auto plain = parse({"--insecure-no-auth"});
  ASSERT_TRUE(plain) << error_of(plain);
  EXPECT_FALSE(plain->config.stripe_all_rails);
  auto flag = parse({"--insecure-no-auth", "--stripe-all-rails"});
  ASSERT_TRUE(flag) << error_of(flag);
  EXPECT_TRUE(flag->config.stripe_all_rails);
  auto env = parse({"--insecure-no-auth"}, {"CONDUIT_STRIPE_ALL_RAILS=true"});
  ASSERT_TRUE(env) << error_of(env);
  EXPECT_TRUE(env->config.stripe_all_rails);
}

TEST(AgentConfig, UnknownYamlKeyIsNamed) {
  TempDir dir;
  const std::string file = dir.write("agent.yaml", "insecure-no-auth: true\ncolour: blue\n");
  auto r = parse({"--config", file});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(r.error().message.find("unknown key \"colour\""), std::string::npos) << r.error().message;
}

TEST(AgentConfig, BadInputGetsOneLineNamingTheSetting) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--memory-cap", "8XB"}, "--memory-cap: bad size \"8XB\""},
      {{"--rails", "0"}, "--rails: must be 1..64"},
      {{"--rails", "65"}, "--rails: must be 1..64"},
      {{"--log-level", "loud"}, "--log-level: \"loud\" is not one of"},
      {{"--log-format", "xml"}, "--log-format"},
      {{"--listen", "localhost"}, "--listen: \"localhost\" is not HOST:PORT"},
      {{"--listen", "localhost:99999"}, "--listen"},
      {{"--tls-cert", "c.pem"}, "--tls-cert needs --tls-key"},
      {{"--stall-timeout-ms", "soon"}, "--stall-timeout-ms"},
      {{"--link-rate", "100G"}, "--link-rate: bad link rate \"100G\" (want bits per second"},
      {{"--link-rate", "0bit"}, "--link-rate: bad link rate"},
      {{"--no-such-flag"}, "no-such-flag"},
  };
  for (const auto& [args, want] : cases) {
    auto with_auth = args;
    with_auth.push_back("--insecure-no-auth");
    auto r = parse(with_auth);
    ASSERT_FALSE(r) << args.front();
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
  auto env = parse({"--insecure-no-auth"}, {"CONDUIT_MEMORY_CAP=lots"});
  ASSERT_FALSE(env);
  EXPECT_NE(env.error().message.find("CONDUIT_MEMORY_CAP"), std::string::npos) << env.error().message;
}

TEST(AgentConfig, TokenFileIsRequiredUnlessInsecure) {
  auto r = parse({});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "--token-file is required (or --client-ca-file, or --insecure-no-auth for local testing)");
  auto from_env = parse({}, {"CONDUIT_TOKEN_FILE=/run/secrets/token"});
  ASSERT_TRUE(from_env) << error_of(from_env);
  EXPECT_EQ(from_env->config.token_file, "/run/secrets/token");
}

// With no auth a caller without a certificate would have every route while a certificate holder has less:
// refused at start, with why.
TEST(AgentConfig, InsecureNoAuthDoesNotGoWithClientCertificates) {
  for (const char* flag : {"--client-ca-file", "--agent-client-ca-file"}) {
    auto r = parse({"--insecure-no-auth", "--tls-cert", "c.pem", "--tls-key", "k.pem", flag, "ca.pem"});
    ASSERT_FALSE(r) << flag;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(r.error().message.find("--insecure-no-auth lets every caller in: it cannot go with"),
              std::string::npos)
        << r.error().message;
  }
}

TEST(AgentConfig, HelpDocumentsEveryOptionWithItsVariable) {
  auto r = parse({"--help"});  // no token needed to ask for help
  ASSERT_TRUE(r) << error_of(r);
  ASSERT_TRUE(r->help);
  const std::string& help = r->help_text;
  for (const char* flag : {"config",
                           "node-name",
                           "listen",
                           "providers",
                           "rails",
                           "bind-address",
                           "token-file",
                           "insecure-no-auth",
                           "data-dir",
                           "memory-cap",
                           "log-level",
                           "log-format",
                           "tls-cert",
                           "tls-key",
                           "peer-ca-file",
                           "peer-tls-server-name",
                           "import-socket",
                           "stall-timeout-ms",
                           "long-poll-max-seconds",
                           "max-body-bytes"}) {
    EXPECT_NE(help.find(std::string("--") + flag), std::string::npos) << flag;
    std::string var = "CONDUIT_";
    for (const char* c = flag; *c != '\0'; ++c) var += *c == '-' ? '_' : static_cast<char>(std::toupper(*c));
    EXPECT_NE(help.find(var), std::string::npos) << var;
  }
  EXPECT_NE(help.find("NODE_NAME"), std::string::npos);
  EXPECT_NE(help.find("default 8GiB"), std::string::npos);
}

// The data plane's settings are options like any other: flag, CONDUIT_* variable (the names they had when
// the transports read them), config key; each reaches the transports as a value in their TransportConfig.
TEST(AgentConfig, DataPlaneSettingsReachTheTransportsAsValues) {
  TempDir dir;
  const std::string file = dir.write("agent.yaml",
                                     "insecure-no-auth: true\n"
                                     "ib-devices: [mlx5_0, mlx5_1]\n"
                                     "ib-sl: 3\n"
                                     "ib-sq-depth: 64\n");
  auto r = parse({"--config", file, "--ib-sq-depth", "256", "--cuda-driver", "/opt/nvidia/libcuda.so.1"},
                 {"CONDUIT_PROGRESS=spin", "CONDUIT_IB_QPS_PER_PEER=4", "CONDUIT_IB_SL=5"});
  ASSERT_TRUE(r) << error_of(r);
  const DataPlaneSettings& d = r->config.data_plane;
  EXPECT_EQ(d.progress, ProgressMode::Spin);                                     // environment
  EXPECT_EQ(d.ibverbs.qps_per_peer, 4u);                                         // environment
  EXPECT_EQ(d.ibverbs.service_level, 5);                                         // environment beats the file
  EXPECT_EQ(d.ibverbs.sq_depth, 256u);                                           // flag beats the file
  EXPECT_EQ(d.ibverbs.devices, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));  // file
  EXPECT_EQ(d.cuda_driver, "/opt/nvidia/libcuda.so.1");                          // flag
  EXPECT_EQ(d.ibverbs.signal_every, 16u);                                        // default

  TransportConfig asked;
  asked.provider = "ibverbs";
  asked.rails = 2;
  const TransportConfig config = d.applied_to(asked);
  EXPECT_EQ(config.progress, ProgressMode::Spin);
  EXPECT_EQ(config.ibverbs.sq_depth, 256u);
  EXPECT_EQ(config.ibverbs.qps_per_peer, 4u);
  EXPECT_EQ(config.ibverbs.devices, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(config.rails, 2);

  auto defaults = parse({"--insecure-no-auth"});
  ASSERT_TRUE(defaults) << error_of(defaults);
  EXPECT_EQ(defaults->config.data_plane.progress, ProgressMode::Auto);
  EXPECT_EQ(defaults->config.data_plane.cuda_driver, "libcuda.so.1");
  EXPECT_EQ(defaults->config.data_plane.ibverbs.sq_depth, 128u);
}

TEST(AgentConfig, BadDataPlaneSettingGetsOneLineNamingIt) {
  TempDir dir;
  const std::string file = dir.write("agent.yaml", "insecure-no-auth: true\nib-sl: 16\n");
  const std::vector<std::pair<Result<ParsedConfig>, std::string>> cases{
      {parse({"--insecure-no-auth", "--ib-sq-depth", "1"}),
       "--ib-sq-depth: want an integer in 2..32768, got \"1\""},
      {parse({"--insecure-no-auth"}, {"CONDUIT_IB_SIGNAL_EVERY=0"}),
       "CONDUIT_IB_SIGNAL_EVERY: want an integer in 1..32768, got \"0\""},
      {parse({"--insecure-no-auth"}, {"CONDUIT_IB_PORT=one"}),
       "CONDUIT_IB_PORT: want an integer in 1..255, got \"one\""},
      {parse({"--insecure-no-auth"}, {"CONDUIT_PROGRESS=fast"}),
       "CONDUIT_PROGRESS: \"fast\" is not one of auto, fd, backoff, spin"},
      {parse({"--insecure-no-auth", "--ib-near", "gpu0"}),
       "--ib-near: near \"gpu0\": want a GPU's PCI address (0000:1b:00.0) or numa:N"},
      {parse({"--config", file}), "config file " + file + ": ib-sl: want an integer in 0..15, got \"16\""},
  };
  for (const auto& [r, want] : cases) {
    ASSERT_FALSE(r) << want;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_EQ(r.error().message, want);
  }
}

TEST(AgentConfig, HelpDocumentsTheDataPlaneSettings) {
  auto r = parse({"--help"});
  ASSERT_TRUE(r) << error_of(r);
  const std::string& help = r->help_text;
  EXPECT_NE(help.find("Data-plane options"), std::string::npos);
  for (const char* flag : {"progress", "cuda-driver", "ib-devices", "ib-near", "ib-listen", "ib-port",
                           "ib-gid-index", "ib-qps-per-peer", "ib-sq-depth", "ib-signal-every",
                           "ib-traffic-class", "ib-sl", "ib-timeout", "ib-retry-count"}) {
    EXPECT_NE(help.find(std::string("--") + flag + " "), std::string::npos) << flag;
    std::string var = "CONDUIT_";
    for (const char* c = flag; *c != '\0'; ++c) var += *c == '-' ? '_' : static_cast<char>(std::toupper(*c));
    EXPECT_NE(help.find(var), std::string::npos) << var;
  }
}

TEST(ParseBytes, Table) {
  const std::vector<std::pair<std::string, std::uint64_t>> good{
      {"0", 0},
      {"1073741824", 1ULL << 30},
      {"8GiB", 8ULL << 30},
      {"8Gi", 8ULL << 30},
      {"512MiB", 512ULL << 20},
      {"4KiB", 4096},
      {"1TiB", 1ULL << 40},
      {"16MB", 16'000'000},
      {"2G", 2'000'000'000},
      {"100B", 100},
      {" 1 MiB ", 1ULL << 20},
  };
  for (const auto& [text, want] : good) {
    auto n = parse_size(text);
    ASSERT_TRUE(n) << text << ": " << n.error().message;
    EXPECT_EQ(*n, want) << text;
  }
  for (const std::string bad : {"", "GiB", "-1", "1.5GiB", "8XB", "8 gib", "99999999999TiB", "0x10"}) {
    auto n = parse_size(bad);
    ASSERT_FALSE(n) << "\"" << bad << "\" parsed as " << *n;
    EXPECT_EQ(n.error().code, ErrorCode::InvalidArgument);
  }
}

TEST(ParseBitRate, Table) {
  const std::vector<std::pair<std::string, std::uint64_t>> good{
      {"100Gbit", 100'000'000'000},  {"800Mbit", 800'000'000},
      {"1Tbit", 1'000'000'000'000},  {"9600bit", 9600},
      {" 25 Gbit ", 25'000'000'000}, {"1Kbit", 1000},
  };
  for (const auto& [text, want] : good) {
    auto n = parse_bit_rate(text);
    ASSERT_TRUE(n) << text << ": " << n.error().message;
    EXPECT_EQ(*n, want) << text;
  }
  for (const std::string bad : {"", "Gbit", "0Gbit", "100", "100G", "100GB", "1.5Gbit", "99999999999Tbit"}) {
    auto n = parse_bit_rate(bad);
    ASSERT_FALSE(n) << "\"" << bad << "\" parsed as " << *n;
    EXPECT_EQ(n.error().code, ErrorCode::InvalidArgument);
  }
}

// A stated link rate reaches GET /v1/node in bytes per second, where the controller plans with it; none
// stated, none reported (unknown, not 0).
TEST(Inventory, ReportsTheStatedLinkRateInBytesPerSecond) {
  TempDir sysfs, data;
  AgentConfig config;
  const TransportSet fabric;
  const RegionStore regions(data.path(), 1ULL << 30);
  EXPECT_FALSE(node_inventory(config, fabric, regions, sysfs.path().string()).contains("linkBytesPerSecond"));
  auto parsed = parse({"--insecure-no-auth", "--link-rate", "100Gbit"});
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(node_inventory(parsed->config, fabric, regions, sysfs.path().string())["linkBytesPerSecond"],
            12.5e9);
}

TEST(AgentMetricsText, ExposesEveryListedName) {
  metrics::AgentMetrics m("0.1.0", "node-a");
  const std::string fresh = m.serialize();
  // Dashboards can rate() the results before the first transfer ends.
  for (const char* result : {"succeeded", "failed", "cancelled"}) {
    EXPECT_NE(fresh.find(std::string("conduit_agent_transfers_total{result=\"") + result + "\"} 0"),
              std::string::npos)
        << result;
  }
  m.add_bytes("tcp;ofi_rxm", "write", 1 << 20);
  m.transfer_finished("succeeded", 0.5);
  m.slice_retried();
  m.staged_fallback();
  m.set_active_transfers(2);
  m.set_region_bytes("host", 4096);
  m.observe_registration(0.001);
  m.error("Stalled");
  m.path_judged("Misrouted");
  m.nic_path("veth1", 1 << 20, 0);
  m.nic_mismatch("veth1", "NotCarried");
  const std::string text = m.serialize();

  std::ifstream names(fs::path(conduit::testing::source_dir()) / "metrics/metric_names.txt");
  ASSERT_TRUE(names) << "metrics/metric_names.txt";
  int count = 0;
  for (std::string name; std::getline(names, name);) {
    if (name.empty()) continue;
    ++count;
    EXPECT_TRUE(text.find("\n" + name + " ") != std::string::npos ||
                text.find("\n" + name + "{") != std::string::npos ||
                text.find("# TYPE " + name + " ") != std::string::npos)
        << name;
  }
  EXPECT_GE(count, 10);
  EXPECT_NE(text.find("conduit_agent_build_info{node=\"node-a\",version=\"0.1.0\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("conduit_agent_transfer_bytes_total{direction=\"write\",transport=\"tcp;ofi_rxm\"} 1048576"),
      std::string::npos);
}

TEST(Inventory, SaysWhyRdmaIsUnavailableOnAFakeSysfs) {
  TempDir sysfs;
  fs::create_directories(sysfs.path() / "class" / "infiniband");
  fs::create_directories(sysfs.path() / "class" / "net");
  TempDir data;
  AgentConfig config;
  config.node_name = "node-a";
  const TransportSet fabric;
  const RegionStore regions(data.path(), 1ULL << 30);
  const auto node = node_inventory(config, fabric, regions, sysfs.path().string());
  EXPECT_EQ(node["node"], "node-a");
  EXPECT_EQ(node["version"], kAgentVersion);
  EXPECT_EQ(node["memory"]["cap"], 1ULL << 30);
  EXPECT_EQ(node["memory"]["used"], 0);
  ASSERT_TRUE(node["topology"].is_object());
  ASSERT_EQ(node["checks"].size(), 5u);
  std::map<std::string, nlohmann::json> checks;
  for (const auto& c : node["checks"]) checks[c["name"]] = c;
  EXPECT_FALSE(checks["rdma"]["ok"]);
  EXPECT_EQ(checks["rdma"]["message"],
            "no RDMA device (" + (sysfs.path() / "class" / "infiniband").string() + " is empty)");
  EXPECT_FALSE(checks["gpu"]["ok"]);
  EXPECT_EQ(checks["gpu"]["message"], "no NVIDIA GPU found");
  EXPECT_TRUE(checks.count("memlock"));
  EXPECT_TRUE(checks.count("ipcLock"));
  // No fake sysfs for libibverbs: the check says what opening the ibverbs backend here would say.
  const Status ibverbs = verbs::probe(verbs::VerbsOptions{});
  EXPECT_EQ(checks["ibverbs"]["ok"], ibverbs.ok());
  if (!ibverbs.ok()) {
    EXPECT_EQ(checks["ibverbs"]["message"], ibverbs.error().message);
  }
  for (const auto& [name, c] : checks) {
    if (!c["ok"]) {
      EXPECT_FALSE(c["message"].get<std::string>().empty()) << name;
    }
  }
}

TEST(Inventory, ReportsTheNicsNearestEachGpuOnAP5LikeServer) {
  conduit::testing::FakeSysfs sysfs("inventory-p5");
  sysfs.build_p5_like_server();
  TempDir data;
  AgentConfig config;
  const TransportSet fabric;
  const RegionStore regions(data.path(), 1ULL << 30);
  const auto node = node_inventory(config, fabric, regions, sysfs.root().string());
  const auto& choice = node["topology"]["nicChoice"];
  ASSERT_EQ(choice["gpus"].size(), 8u) << node["topology"].dump(2);
  for (const auto& gpu : choice["gpus"]) {
    EXPECT_EQ(gpu["nics"].size(), 4u) << gpu.dump();
    EXPECT_EQ(gpu["distance"], "SameSwitch") << gpu.dump();
  }
  ASSERT_EQ(choice["numaNodes"].size(), 2u);
  EXPECT_EQ(choice["numaNodes"][0]["nics"].size(), 16u);
}

TEST(Log, LogfmtQuotesOnlyWhatNeedsIt) {
  const auto ts = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796036523123));
  EXPECT_EQ(log::format_line(log::Level::Info, "transfer started",
                             {{"transfer", "t-1"}, {"bytes", "268435456"}}, false, ts),
            "ts=2026-11-30T11:02:03.123Z level=info msg=\"transfer started\" transfer=t-1 bytes=268435456");
  EXPECT_EQ(
      log::format_line(log::Level::Warn, "x", {{"error", "say \"hi\""}, {"k", "a=b"}, {"e", ""}}, false, ts),
      "ts=2026-11-30T11:02:03.123Z level=warn msg=\"x\" error=\"say \\\"hi\\\"\" k=\"a=b\" e=\"\"");
  EXPECT_EQ(log::format_line(log::Level::Error, "two\nlines", {}, false, ts),
            "ts=2026-11-30T11:02:03.123Z level=error msg=\"two\\nlines\"");
}

TEST(Log, JsonLinesParseBack) {
  const auto ts = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796036523123));
  const std::string line = log::format_line(log::Level::Debug, "slice retried",
                                            {{"transfer", "t-2"}, {"why", "a \"b\""}}, true, ts);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2026-11-30T11:02:03.123Z");
  EXPECT_EQ(j["level"], "debug");
  EXPECT_EQ(j["msg"], "slice retried");
  EXPECT_EQ(j["transfer"], "t-2");
  EXPECT_EQ(j["why"], "a \"b\"");
}

TEST(Log, ParseLevel) {
  log::Level level = log::Level::Info;
  EXPECT_TRUE(log::parse_level("warn", level));
  EXPECT_EQ(level, log::Level::Warn);
  EXPECT_FALSE(log::parse_level("loud", level));
}

}  // namespace
}  // namespace conduit::agent
