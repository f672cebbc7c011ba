// A real conduit-agent for tests: its own data directory and token file in a temp dir, started on an
// ephemeral loopback port, reached through an authenticated httplib client, killed and cleaned up at the end.
// With it, what the suites that drive agents over HTTP all start from: the options of the agents they run,
// a pair of agents as a fixture, and the region set-up calls every story makes.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "build_paths.h"
#include "peer_process.h"
#include "tls_files.h"

namespace conduit::testing {

struct AgentOptions {
  // This build's agent unless a suite starts a test build of it (conduit-agent-cuda-double).
  std::string binary = built_binary("conduit-agent");
  std::string provider = "tcp";
  std::string memory_cap = "2GiB";
  std::string token = "test-token-0123456789";
  std::vector<std::string> extra_args;
  // HTTPS: the agent serves with this certificate and key; the test's own client trusts `ca_cert`.
  std::string tls_cert, tls_key, ca_cert;

  AgentOptions& serve_tls(const std::filesystem::path& cert, const std::filesystem::path& key,
                          const std::filesystem::path& ca) {
    tls_cert = cert.string();
    tls_key = key.string();
    ca_cert = ca.string();
    return *this;
  }
};

// A tcp agent with a 1 GiB memory cap: what the agent's HTTP suites start.
inline AgentOptions small_tcp_agent(std::string binary = built_binary("conduit-agent")) {
  AgentOptions o;
  o.binary = std::move(binary);
  o.memory_cap = "1GiB";
  return o;
}

// A tcp agent that logs warnings only: what the controller suites run as nodes.
inline AgentOptions quiet_tcp_agent(std::string binary = built_binary("conduit-agent")) {
  AgentOptions o;
  o.binary = std::move(binary);
  o.extra_args = {"--log-level", "warn"};
  return o;
}

// `base` serving HTTPS with `cert`, its test client trusting `ca`, and taking `extra` flags after its own.
inline AgentOptions tls_agent(const CertFiles& cert, const std::filesystem::path& ca,
                              const std::vector<std::string>& extra = {},
                              AgentOptions base = small_tcp_agent()) {
  base.serve_tls(cert.cert, cert.key, ca);
  base.extra_args.insert(base.extra_args.end(), extra.begin(), extra.end());
  return base;
}

class AgentProcess {
 public:
  explicit AgentProcess(const AgentOptions& options);
  ~AgentProcess();

  bool started() const { return !url_.empty(); }
  const std::string& url() const { return url_; }  // http(s)://127.0.0.1:PORT
  const std::string& token() const { return token_; }
  const std::filesystem::path& data_dir() const { return data_dir_; }
  PeerProcess& process() { return *process_; }

  // Authenticated request with a JSON body (or none); returns status and parsed body (null when empty or
  // not JSON). status 0: no answer.
  struct Reply {
    int status = 0;
    nlohmann::json body;
  };
  Reply get(const std::string& path);
  Reply post(const std::string& path, const nlohmann::json& body);
  Reply put(const std::string& path, const nlohmann::json& body);
  Reply del(const std::string& path);

  // The value of the first sample on GET /metrics that is `sample` (a name, or a name with its labels as
  // the agent prints them: `name{label="value"}`); -1 when there is none or no answer.
  double metric(const std::string& sample);

  // Polls GET /v1/transfers/{id} until it leaves Queued/Running or `timeout` passes.
  nlohmann::json wait_transfer(const std::string& id,
                               std::chrono::seconds timeout = std::chrono::seconds(120));

 private:
  std::filesystem::path dir_;
  std::filesystem::path data_dir_;
  std::string token_;
  std::string url_;
  std::unique_ptr<PeerProcess> process_;
  std::unique_ptr<httplib::Client> client_;
};

// Two agents on loopback, a source and a target, as most stories between agents start: `a` and `b`, started
// with the options given (by default this build's tcp agent) before the test body runs. The test asserts
// they started, as it would for any agent it starts itself.
class TwoAgents : public ::testing::Test {
 protected:
  TwoAgents() : TwoAgents(AgentOptions{}, AgentOptions{}) {}
  TwoAgents(const AgentOptions& a_options, const AgentOptions& b_options) : a(a_options), b(b_options) {}

  AgentProcess a;
  AgentProcess b;
};

// Writes `bytes` of the seeded pattern (conduit/pattern.h) to NAME.bin in the agent's data directory, loads
// it as region NAME (expecting 201 Created) and returns the bytes, so the test knows every byte of the
// region.
std::vector<std::byte> load_seeded(AgentProcess& agent, const std::string& name, std::uint64_t bytes,
                                   std::uint64_t seed);

// POST /v1/regions/REGION/grants with `body`, expecting 201 Created: the grant (id, key, length, ...).
nlohmann::json region_grant(AgentProcess& agent, const std::string& region, const nlohmann::json& body);

// The CRC32C of the first `bytes` of `region` as the agent reckons it (GET .../checksum, expecting 200, one
// slice of that size); 0 when it does not answer so.
std::uint32_t region_crc(AgentProcess& agent, const std::string& region, std::uint64_t bytes);

}  // namespace conduit::testing
