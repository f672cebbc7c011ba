// conduit-agent's settings. Each comes from a flag, else an environment variable (CONDUIT_<NAME>, e.g.
// CONDUIT_DATA_DIR; NODE_NAME for the node), else the YAML file given by --config, else its default. The
// data plane's (conduit/data_plane_settings.h: libfabric progress, ibverbs, the CUDA driver) are options
// like any other, passed down to the transports as values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/data_plane_settings.h"

namespace conduit::agent {

struct AgentConfig {
  std::string node_name;                  // default: NODE_NAME, else hostname
  std::string listen = "127.0.0.1:7070";  // REST listen HOST:PORT (port 0 = any; the bound one is logged)
  std::vector<std::string> providers{"auto"};  // tcp, shm, efa, verbs, auto
  int rails = 1;
  // Register every region on every rail instead of only the rails whose NIC is nearest its memory
  // (conduit/rail_choice.h): for nodes whose cross-switch bandwidth is known to be worth it, or to compare.
  bool stripe_all_rails = false;
  std::string bind_address;  // fabric endpoints' local address ("" = provider default)
  std::string token_file;    // bearer token; required unless --insecure-no-auth
  bool insecure_no_auth = false;
  // Where the NICs' byte counters are read (docs/path.md): the node's sysfs; tests point it elsewhere.
  std::string nic_counters_root = "/sys";
  std::string data_dir = "/var/lib/conduit";
  std::uint64_t memory_cap = 8ULL << 30;  // bytes of agent-owned regions
  // The node's link rate as its operator states it (--link-rate), in bytes per second; 0: unknown. Reported
  // by GET /v1/node as linkBytesPerSecond: a Reshard plan's lower bound divides by it.
  double link_bytes_per_second = 0;
  // Memory of deleted host regions kept, zeroed, for new regions of the same size (memory_pool.h).
  std::uint64_t region_pool = 2ULL << 30;
  // Per pipelined transfer and file: a file source's read-ahead slots, a file target's landing ring.
  std::uint64_t pipeline_bytes = 64ULL << 20;
  // Saved files written through the page cache instead of around it (files/save_file.h).
  bool save_page_cache = false;
  std::string log_level = "info";     // debug | info | warn | error
  std::string log_format = "logfmt";  // logfmt | json
  std::string tls_cert;
  std::string tls_key;
  std::string peer_ca_file;      // calls to other agents over https trust this CA
  std::string peer_server_name;  // and expect this name in their certificates (empty: their address)
  // Callers' certificates signed by this CA name them (rest/identity.h); needs --tls-cert. Empty: only the
  // token.
  std::string client_ca_file;
  // The certificate this agent presents to other agents (conduit:agent[:<node>]); then it sends no token.
  std::string peer_client_cert;
  std::string peer_client_key;
  // Certificates signed by this CA name agents alone (conduit:agent:<node>): the controller's signer of node
  // certificates (node_certificate.h), which must not be able to mint controllers or operators.
  std::string agent_client_ca_file;
  // Ask the Kubernetes API for this node's certificate and keep it (and its key) in this file; it is then
  // the certificate presented to other agents (node_certificate.h). Empty: none.
  std::string node_certificate;
  std::string kubeconfig;     // for the node certificate's request; empty: in-cluster (or $KUBECONFIG)
  std::string import_socket;  // unix socket for memfd import ("" = <data_dir>/conduit.sock)
  // A TransferJob's files are those under <data_dir>/<its namespace>/ (tenancy.h, file_refusal).
  bool namespace_files = false;
  std::chrono::milliseconds stall_timeout{30000};
  std::size_t max_body_bytes = 1 << 20;
  // The longest one long-poll (a region version, a transfer's end) holds its request before answering with
  // the state then; the caller asks again. Below a proxy's idle timeout, for one.
  std::chrono::seconds long_poll_max{60};
  DataPlaneSettings data_plane;  // --progress, --cuda-driver, --ib-*
};

struct ParsedConfig {
  AgentConfig config;
  bool help = false;  // --help was asked for; `help_text` holds it
  std::string help_text;
};

// argv and the environment -> config. InvalidArgument with one line of why on bad input.
Result<ParsedConfig> parse_config(int argc, const char* const* argv, char** envp);

}  // namespace conduit::agent
