// conduit-controller's settings: every flag, checked together at start. Local mode (--local-dir) keeps the
// TransferJobs in a directory of YAML files; Kubernetes mode (no --local-dir) in the API server. The
// controller reads no environment variable of its own; Kubernetes mode's kubeconfig search reads $KUBECONFIG.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/agent_client.h"
#include "conduit/common/result.h"
#include "store/object_store.h"

namespace conduit::controller {

// Local mode's own settings.
struct LocalModeOptions {
  std::filesystem::path dir;          // the *.yaml TransferJobs; status is written back into them
  std::optional<ObjectKey> once_job;  // exit when this job finishes: 0 Succeeded, 1 Failed
};

// Kubernetes mode's own settings.
struct KubeModeOptions {
  std::string kubeconfig;               // empty: $KUBECONFIG, in-cluster, ~/.kube/config (kubectl's order)
  std::vector<std::string> namespaces;  // none, or one "", means all namespaces
  std::string agent_service;            // EndpointSlices labelled kubernetes.io/service-name=this
  std::string agent_service_namespace;  // empty: the config's namespace
  bool leader_elect = false;
  std::string lease_namespace;  // empty: the config's namespace
  std::string lease_name = "conduit-controller";
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // The signer of agents' client certificates (CSRs for conduit.dev/agent), run by the leader: the CA's files
  // and the agents' service account. Empty cert: no signer.
  std::string agent_signer_cert;
  std::string agent_signer_key;
  std::string agent_service_account_namespace;
  std::string agent_service_account_name;
  std::chrono::seconds agent_certificate_max{86400};
};

struct ControllerConfig {
  std::string log_level = "info";
  std::string metrics_listen;                 // HOST:PORT of /healthz, /readyz and /metrics; empty: none
  std::map<std::string, std::string> agents;  // --agents: node name -> agent base URL
  // How every call to an agent is made (token, TLS, timeouts): handed as it is to the one HttpAgentApi, so
  // the flags land in api::ClientOptions once and are not copied field by field again.
  api::ClientOptions agent_client;
  std::optional<LocalModeOptions> local;  // set: local mode
  KubeModeOptions kube;                   // used when `local` is not set
};

struct ParsedConfig {
  ControllerConfig config;
  bool help = false;  // --help was asked for; `help_text` holds it
  std::string help_text;
};

// argv -> config. InvalidArgument with one line of why on bad input.
Result<ParsedConfig> parse_config(int argc, const char* const* argv);

// The agents' bearer token from `path`, read when first readable and re-read whenever it changes (rotated
// tokens); until it can be read calls go without a token, and the agents refuse them. Empty path: none.
api::TokenSource token_file_source(const std::filesystem::path& path);

}  // namespace conduit::controller
