// The agent's own client certificate, naming conduit:agent:<node> (rest/identity.h), asked for through the
// Kubernetes CSR API as the kubelet asks for its own: the agent makes a key that never leaves the node,
// sends a CertificateSigningRequest to the signer conduit.dev/agent with its pod's service-account token,
// and the controller (controller/kube/agent_signer.h) signs it only when the apiserver says the token belongs
// to a pod of the agent's service account on that very node. So a node's agent can prove which node it is
// to the other agents, and a stolen certificate speaks for one node, not for every agent of the install.
//
// The key and the certificate are kept together in one PEM file (0600), replaced by a rename, so a caller
// loading it (api::AgentClient, per new connection) always reads a matching pair; a valid one found at start
// is used at once. It is renewed with a new key when two thirds of its life have passed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "conduit/common/result.h"
#include "kube_client/kube_config.h"

namespace conduit::kube_client {
class KubeClient;
}

namespace conduit::agent {

struct NodeCertificateOptions {
  std::string file;  // where the key and certificate are kept
  std::string node;  // the certificate names conduit:agent:<node>
  kube_client::KubeConfig kube;
  std::chrono::seconds lifetime{std::chrono::hours(24)};  // asked for; the signer may give less
  std::chrono::milliseconds poll{250};                    // how often a pending request is looked at
};

class NodeCertificate {
 public:
  // Starts keeping the certificate in the background; fails only for options that can never work.
  static Result<std::unique_ptr<NodeCertificate>> start(NodeCertificateOptions options);
  ~NodeCertificate();
  NodeCertificate(const NodeCertificate&) = delete;
  NodeCertificate& operator=(const NodeCertificate&) = delete;

  // nullopt once the file holds a certificate valid now; otherwise why not (for /readyz), e.g. "waiting
  // for the controller to sign CertificateSigningRequest conduit-agent-node-a-x7k2p".
  std::optional<std::string> not_ready() const;

 private:
  explicit NodeCertificate(NodeCertificateOptions options);
  void run();
  // One request: make a key and a CSR, send it, wait until it is signed or refused; true when the file
  // holds the new certificate. `have_valid`: the file's certificate still serves meanwhile (the agent
  // stays ready while it is renewed).
  bool request(bool have_valid);
  // Until when the file's certificate needs no renewal; nullopt when it holds none usable for this node.
  std::optional<std::chrono::system_clock::time_point> renew_at() const;
  void set_state(std::optional<std::string> not_ready);
  bool sleep_for(std::chrono::milliseconds d);  // false when stopping

  NodeCertificateOptions options_;
  std::unique_ptr<kube_client::KubeClient> client_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<std::string> not_ready_;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace conduit::agent
