// A real conduit-agent for tests: its own data directory and token file in a temp dir, started on an
// ephemeral loopback port, reached through an authenticated httplib client, killed and cleaned up at the end.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "peer_process.h"

namespace conduit::testing {

struct AgentOptions {
  std::string binary;
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
inline AgentOptions small_tcp_agent(std::string binary) {
  AgentOptions o;
  o.binary = std::move(binary);
  o.memory_cap = "1GiB";
  return o;
}

// A tcp agent that logs warnings only: what the controller suites run as nodes.
inline AgentOptions quiet_tcp_agent(std::string binary) {
  AgentOptions o;
  o.binary = std::move(binary);
  o.extra_args = {"--log-level", "warn"};
  return o;
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

// Writes `bytes` of the seeded pattern (conduit/pattern.h) to NAME.bin in the agent's data directory, loads
// it as region NAME (expecting 201 Created) and returns the bytes, so the test knows every byte of the
// region.
std::vector<std::byte> load_seeded(AgentProcess& agent, const std::string& name, std::uint64_t bytes,
                                   std::uint64_t seed);

}  // namespace conduit::testing
