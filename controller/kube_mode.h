// Kubernetes mode of conduit-controller: TransferJobs from the API server (KubeObjectStore), the same
// ControlLoop and Reconciler as local mode, optional Lease leader election, and a health/metrics endpoint.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "reconcile/agent_api.h"

namespace conduit::controller {

struct KubeModeOptions {
  std::string kubeconfig;               // empty: $KUBECONFIG, in-cluster, ~/.kube/config (kubectl's order)
  std::vector<std::string> namespaces;  // none, or one "", means all namespaces
  AgentDirectory agents;                // static agents from --agents
  std::string agent_service;            // EndpointSlices labelled kubernetes.io/service-name=this
  std::string agent_service_namespace;  // empty: the config's namespace
  std::string agent_token_file;
  std::string agent_ca_file;      // https agents: the CA that signed their certificates
  std::string agent_server_name;  // and the name those certificates carry (empty: the agents' addresses)
  std::string agent_client_cert;  // the certificate (conduit:controller) presented to https agents
  std::string agent_client_key;
  bool leader_elect = false;
  std::string lease_namespace;  // empty: the config's namespace
  std::string lease_name = "conduit-controller";
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  std::string metrics_listen;  // HOST:PORT; empty: no endpoint
  // The signer of agents' client certificates (CSRs for conduit.dev/agent), run by the leader: the CA's files
  // and the agents' service account. Empty cert: no signer.
  std::string agent_signer_cert;
  std::string agent_signer_key;
  std::string agent_service_account_namespace;
  std::string agent_service_account_name;
  std::chrono::seconds agent_certificate_max{86400};
};

// Runs until SIGTERM/SIGINT (blocked in the caller and passed in) arrives; returns the exit code.
int run_kube_mode(const KubeModeOptions& options, const sigset_t& signals);

}  // namespace conduit::controller
