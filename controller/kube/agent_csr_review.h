// The rules under which the controller signs an agent's client certificate: a certificates.k8s.io/v1
// CertificateSigningRequest for signer conduit.dev/agent is approved only when it proves it comes from the
// agent on the node it names. The proof is what the API server wrote into the CSR from the requester's
// credentials, which the requester cannot choose: spec.username (the agent's service account) and
// spec.extra's node name (present only for a token bound to a pod; the node that pod is scheduled on).
// The request itself must then name that node and nothing else. Pure functions of the CSR, no I/O.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kube_client/resource.h"

namespace conduit::kube {

inline constexpr const char* kNodeNameExtra = "authentication.kubernetes.io/node-name";
inline constexpr const char* kPodNameExtra = "authentication.kubernetes.io/pod-name";

struct ServiceAccountRef {
  std::string ns;
  std::string name;
  std::string username() const { return "system:serviceaccount:" + ns + ":" + name; }
};

// Where a CSR stands for this signer.
enum class CsrPhase {
  NotOurs,           // another signerName: never touched
  Finished,          // Denied, Failed, or Approved with a certificate: left alone
  Pending,           // no decision yet: review, then approve or deny
  ApprovedUnsigned,  // approved (by us before a restart, or by someone else): review again, then sign
};
CsrPhase csr_phase(const nlohmann::json& csr);

struct CsrVerdict {
  bool approved = false;
  std::string node;         // the verified node (approved)
  std::string message;      // the condition's message: what was approved, or why not
  std::string request_pem;  // the decoded spec.request (approved)
};

// Applies every rule, in order, and says which one failed; `agent` is the configured agent service account.
CsrVerdict review_agent_csr(const nlohmann::json& csr, const ServiceAccountRef& agent);

}  // namespace conduit::kube
