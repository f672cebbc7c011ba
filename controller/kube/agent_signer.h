// The signer of agents' per-node client certificates (signerName conduit.dev/agent): watches
// CertificateSigningRequests, approves the ones that prove they come from the named node's agent
// (agent_csr_review.h) and denies the rest saying why, then signs the approved ones with the signer CA
// (signer_ca.h) and writes status.certificate. Run by the leader only: start() when leading, stop() when not.
//
// RBAC the controller needs: certificatesigningrequests get/list/watch, certificatesigningrequests/approval
// and /status update, and signers "conduit.dev/agent" approve and sign.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>

#include "agent_csr_review.h"
#include "conduit/common/result.h"
#include "kube_client/client.h"

namespace conduit::kube {

struct AgentSignerOptions {
  // The CA's files are read again at every signing, never cached: signing is rare (an agent a day), the
  // files are small, and a CA that cert-manager rotated is in use from the next certificate on.
  std::string ca_cert_file;
  std::string ca_key_file;
  ServiceAccountRef agent;  // the agents' service account
  std::chrono::seconds max_lifetime{86400};
  // How often CSRs still waiting are looked at again even without a change (a signing that failed because the
  // CA files were unreadable or the API server did not answer is retried then).
  std::chrono::seconds resync{30};
  // Only CSRs carrying these labels; empty: all. Tests sharing one API server give each signer its own.
  std::string label_selector;
  // Asked before every write; false: write nothing (leadership in doubt). Empty: always true.
  std::function<bool()> may_act;
};

struct AgentSignerStats {
  std::uint64_t issued = 0;  // certificates written into status.certificate
  std::uint64_t denied = 0;  // CSRs Denied
  std::uint64_t failed = 0;  // approved CSRs (someone else's approval) marked Failed: they break the rules
  std::uint64_t errors = 0;  // attempts that met an API or signing error; retried at the next resync
};

class AgentSigner {
 public:
  AgentSigner(kube_client::KubeClient& client, AgentSignerOptions options);
  ~AgentSigner();  // stop()
  AgentSigner(const AgentSigner&) = delete;
  AgentSigner& operator=(const AgentSigner&) = delete;

  // A fresh LIST+WATCH and worker per start, so nothing from an earlier term is trusted. Idempotent.
  void start();
  // Returns once the CSR in hand is done: nothing is written for us afterwards. Idempotent.
  void stop();

  // Takes one CSR as far as this signer goes (approve and sign, deny, fail, or leave alone), re-reading it on
  // 409. What the worker does per CSR; public so tests can drive it without the watch.
  void handle(nlohmann::json csr);

  AgentSignerStats stats() const;

 private:
  struct Term;
  void work(Term& term, std::stop_token stop);  // the worker: handles queued CSRs, all of them every resync
  Result<nlohmann::json> decide(const nlohmann::json& csr);
  Result<nlohmann::json> sign(const nlohmann::json& csr);
  Result<nlohmann::json> add_condition(const nlohmann::json& csr, const char* type, const char* reason,
                                       const std::string& message, const char* subresource);
  bool may_act() const { return !options_.may_act || options_.may_act(); }
  void count(std::uint64_t AgentSignerStats::*counter);

  kube_client::KubeClient& client_;
  AgentSignerOptions options_;
  mutable std::mutex stats_mutex_;
  AgentSignerStats stats_;
  std::mutex term_mutex_;
  std::unique_ptr<Term> term_;
};

}  // namespace conduit::kube
