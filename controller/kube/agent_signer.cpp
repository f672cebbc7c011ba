#include "agent_signer.h"

#include <algorithm>
#include <condition_variable>
#include <set>
#include <stop_token>
#include <thread>

#include "conduit/common/base64.h"
#include "conduit/common/time.h"
#include "kube_client/log.h"
#include "kube_list_watch.h"
#include "signer_ca.h"
#include "watcher.h"

namespace conduit::kube {
namespace {

using nlohmann::json;

constexpr const char* kApprovedReason = "AgentSignerApproved";
constexpr const char* kDeniedReason = "AgentSignerDenied";
constexpr const char* kFailedReason = "AgentSignerFailed";

void say(kube_client::LogLevel level, const std::string& csr, const std::string& what) {
  kube_client::log(level, "agent signer: CSR " + csr + ": " + what);
}

}  // namespace

// One term of leadership: its own LIST+WATCH of the CSRs and a worker that handles the ones that changed.
struct AgentSigner::Term {
  Term(kube_client::KubeClient& client, const std::string& label_selector)
      // Only this signer's CSRs: the cluster's others (kubelets', say) are none of ours to cache.
      : source(client, kube_client::resources::certificate_signing_requests(), "", label_selector, 0,
               std::string("spec.signerName=") + kube_client::kAgentSignerName),
        watcher(source, [this](const std::vector<controller::ObjectKey>& keys) {
          std::lock_guard lock(mu);
          queued.insert(keys.begin(), keys.end());
          wake.notify_all();
        }) {}

  // Declared before the watcher whose callback fills them, so they outlive its thread.
  std::mutex mu;
  std::condition_variable_any wake;
  std::set<controller::ObjectKey> queued;
  KubeListWatch source;
  Watcher watcher;
  std::jthread worker;
};

AgentSigner::AgentSigner(kube_client::KubeClient& client, AgentSignerOptions options)
    : client_(client), options_(std::move(options)) {}

AgentSigner::~AgentSigner() { stop(); }

void AgentSigner::start() {
  std::lock_guard lock(term_mutex_);
  if (term_) return;
  term_ = std::make_unique<Term>(client_, options_.label_selector);
  Term* term = term_.get();
  term->worker = std::jthread([this, term](std::stop_token stop) { work(*term, stop); });
  term->watcher.start();
  kube_client::log(kube_client::LogLevel::Info,
                   "agent signer started (signer " + std::string(kube_client::kAgentSignerName) +
                       ", service account " + options_.agent.ns + "/" + options_.agent.name + ")");
}

void AgentSigner::stop() {
  std::unique_ptr<Term> term;
  {
    std::lock_guard lock(term_mutex_);
    term = std::move(term_);
  }
  if (!term) return;
  // The worker first: it reads the watcher's cache, and its write in flight must land before we return.
  term->worker.request_stop();
  if (term->worker.joinable()) term->worker.join();
  term->watcher.stop();
  kube_client::log(kube_client::LogLevel::Info, "agent signer stopped");
}

AgentSignerStats AgentSigner::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void AgentSigner::count(std::uint64_t AgentSignerStats::*counter) {
  std::lock_guard lock(stats_mutex_);
  ++(stats_.*counter);
}

void AgentSigner::work(Term& term, std::stop_token stop) {
  auto next_resync = std::chrono::steady_clock::now() + options_.resync;
  while (!stop.stop_requested()) {
    std::set<controller::ObjectKey> keys;
    {
      std::unique_lock lock(term.mu);
      term.wake.wait_until(lock, stop, next_resync, [&] { return !term.queued.empty(); });
      if (stop.stop_requested()) return;
      keys.swap(term.queued);
    }
    if (std::chrono::steady_clock::now() >= next_resync) {
      for (const json& csr : term.watcher.objects()) {
        if (csr_phase(csr) != CsrPhase::NotOurs) keys.insert(key_of(csr));
      }
      next_resync = std::chrono::steady_clock::now() + options_.resync;
    }
    for (const auto& key : keys) {
      if (stop.stop_requested()) return;
      if (auto csr = term.watcher.get(key)) handle(std::move(*csr));
    }
  }
}

void AgentSigner::handle(json csr) {
  const std::string name = kube_client::meta_string(csr, "name");
  // One write per pass: Pending -> ApprovedUnsigned -> Finished takes two, and every 409 one more. Every
  // write carries the resourceVersion read, so a cached copy older than our own last write (the watch lags
  // behind it) costs a 409 and a re-read, never a second decision or a second certificate written.
  for (int pass = 0; pass < 2 + kube_client::KubeClient::kMaxConflictAttempts; ++pass) {
    const CsrPhase phase = csr_phase(csr);
    if (phase == CsrPhase::NotOurs || phase == CsrPhase::Finished) return;
    if (!may_act()) return;
    Result<json> written = phase == CsrPhase::Pending ? decide(csr) : sign(csr);
    if (!written && written.error().code == ErrorCode::Conflict) {
      written = client_.get(kube_client::resources::certificate_signing_requests(), "", name);
    }
    if (!written) {
      if (written.error().code == ErrorCode::NotFound) return;  // deleted meanwhile: nothing to do
      say(kube_client::LogLevel::Warn, name,
          written.error().message + " (tried again in " + std::to_string(options_.resync.count()) + " s)");
      count(&AgentSignerStats::errors);
      return;
    }
    csr = std::move(*written);
  }
  say(kube_client::LogLevel::Warn, name,
      "still changing under us after several writes; tried again at the next resync");
  count(&AgentSignerStats::errors);
}

Result<json> AgentSigner::decide(const json& csr) {
  const std::string name = kube_client::meta_string(csr, "name");
  const CsrVerdict verdict = review_agent_csr(csr, options_.agent);
  if (!verdict.approved) {
    auto denied = add_condition(csr, "Denied", kDeniedReason, verdict.message, "approval");
    if (denied) {
      count(&AgentSignerStats::denied);
      say(kube_client::LogLevel::Warn, name, "denied: " + verdict.message);
    }
    return denied;
  }
  auto approved = add_condition(csr, "Approved", kApprovedReason, verdict.message, "approval");
  if (approved) say(kube_client::LogLevel::Info, name, "approved: " + verdict.message);
  return approved;
}

Result<json> AgentSigner::sign(const json& csr) {
  const std::string name = kube_client::meta_string(csr, "name");
  // The rules hold for every certificate this signer makes, whoever approved the CSR: a conduit:agent:<node>
  // certificate must mean that node's agent.
  const CsrVerdict verdict = review_agent_csr(csr, options_.agent);
  if (!verdict.approved) {
    const std::string message = "approved, but the agent signer does not sign it: " + verdict.message;
    auto failed = add_condition(csr, "Failed", kFailedReason, message, "status");
    if (failed) {
      count(&AgentSignerStats::failed);
      say(kube_client::LogLevel::Warn, name, message);
    }
    return failed;
  }
  auto ca = SignerCa::load(options_.ca_cert_file, options_.ca_key_file);
  if (!ca) return ca.error();
  std::chrono::seconds lifetime = options_.max_lifetime;
  const json asked = csr.value("/spec/expirationSeconds"_json_pointer, json());
  if (asked.is_number_integer() && asked.get<long long>() > 0) {
    lifetime = std::min(lifetime, std::chrono::seconds(asked.get<long long>()));
  }
  auto issued = ca->issue(verdict.request_pem, lifetime);
  if (!issued) return issued.error();

  json updated = csr;  // conditions and all: a PUT of status replaces the whole status
  updated["status"]["certificate"] = base64_encode(issued->pem);
  auto written =
      client_.replace(kube_client::resources::certificate_signing_requests(), "", name, updated, "status");
  if (written) {
    count(&AgentSignerStats::issued);
    say(kube_client::LogLevel::Info, name,
        "signed for node \"" + verdict.node + "\": serial " + issued->serial + ", valid until " +
            issued->not_after);
  }
  return written;
}

Result<json> AgentSigner::add_condition(const json& csr, const char* type, const char* reason,
                                        const std::string& message, const char* subresource) {
  json updated = csr;
  if (!updated["status"].is_object()) updated["status"] = json::object();
  json& conditions = updated["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string now = format_rfc3339(std::chrono::system_clock::now());
  conditions.push_back({{"type", type},
                        {"status", "True"},
                        {"reason", reason},
                        {"message", message},
                        {"lastUpdateTime", now},
                        {"lastTransitionTime", now}});
  return client_.replace(kube_client::resources::certificate_signing_requests(), "",
                         kube_client::meta_string(csr, "name"), updated, subresource);
}

}  // namespace conduit::kube
