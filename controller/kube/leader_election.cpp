#include "leader_election.h"

#include <unistd.h>

#include <ctime>
#include <random>

#include "conduit/common/random.h"
#include "conduit/common/time.h"
#include "kube_client/log.h"

namespace conduit::kube {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string default_identity() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  return std::string(host) + "_" + random_hex(16);
}

namespace {

kube_client::ClientOptions election_client_options(const LeaderElectionConfig& e) {
  kube_client::ClientOptions o;
  auto half = e.renew_deadline / 2;
  o.connect_timeout = std::min(o.connect_timeout, half);
  o.request_timeout = std::min(o.request_timeout, half);
  o.user_agent = "conduit-controller/leader-election";
  o.max_idle_connections = 1;
  return o;
}

}  // namespace

LeaderElector::LeaderElector(const kube_client::KubeConfig& config, LeaderElectionConfig election)
    : client_(config, election_client_options(election)), election_(std::move(election)) {
  ns_ = election_.lease_namespace.empty() ? config.ns : election_.lease_namespace;
  if (election_.identity.empty()) election_.identity = default_identity();
}

LeaderElector::~LeaderElector() { stop(/*release=*/true); }

void LeaderElector::start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

void LeaderElector::stop(bool release_lease) {
  if (thread_.joinable()) {
    thread_.request_stop();
    wake_.notify_all();
    thread_.join();
  }
  // Work stops first (on_stopped_leading), then the Lease goes: never two replicas acting at once.
  bool was_leading = leading_.load();
  end_leading();
  if (release_lease && was_leading) {
    if (auto r = release(); !r)
      kube_client::log(kube_client::LogLevel::Warn, "leader election: release failed: " + r.error().message);
  }
}

bool LeaderElector::is_leader() const {
  if (!leading_.load()) return false;
  auto since = Clock::now() - Clock::time_point(Clock::duration(last_renew_.load()));
  return since < election_.renew_deadline;
}

// ---- the loop: Candidate <-> Leading ----------------------------------------------------------------------

void LeaderElector::run(std::stop_token stop) {
  Phase phase = Phase::Candidate;
  while (!stop.stop_requested()) {
    phase = phase == Phase::Candidate ? candidate_step(stop) : leader_step(stop);
  }
}

LeaderElector::Phase LeaderElector::candidate_step(std::stop_token stop) {
  if (try_acquire_or_renew()) {
    begin_leading();
    return Phase::Leading;
  }
  sleep(stop, election_.retry_period);
  return Phase::Candidate;
}

LeaderElector::Phase LeaderElector::leader_step(std::stop_token stop) {
  if (!sleep(stop, election_.retry_period)) return Phase::Leading;  // stopping: stop() steps down
  if (try_acquire_or_renew()) return Phase::Leading;
  std::string holder;
  {
    std::lock_guard lock(mutex_);
    holder = observed_holder_;
  }
  // Someone else holds it now, or renewals have failed for the whole deadline: step down.
  bool taken = !holder.empty() && holder != election_.identity;
  if (taken || !is_leader()) {
    kube_client::log(kube_client::LogLevel::Warn,
                     "leader election: lost lease " + ns_ + "/" + election_.lease_name +
                         (taken ? " to " + holder : " (no renewal within the renew deadline)"));
    end_leading();
    return Phase::Candidate;
  }
  return Phase::Leading;
}

void LeaderElector::begin_leading() {
  kube_client::log(kube_client::LogLevel::Info,
                   "leader election: " + election_.identity + " leads " + ns_ + "/" + election_.lease_name);
  leading_.store(true);
  call(election_.on_started_leading, "on_started_leading");
}

void LeaderElector::end_leading() {
  if (!leading_.exchange(false)) return;
  call(election_.on_stopped_leading, "on_stopped_leading");
}

void LeaderElector::call(const std::function<void()>& callback, const char* name) {
  if (!callback) return;
  try {
    callback();
  } catch (const std::exception& e) {
    kube_client::log(kube_client::LogLevel::Error,
                     std::string("leader election: ") + name + " threw: " + e.what());
  }
}

bool LeaderElector::sleep(std::stop_token stop, std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

// ---- one attempt ------------------------------------------------------------------------------------------

void LeaderElector::observe(const json& lease) {
  std::string rv = kube_client::meta_string(lease, "resourceVersion");
  const json& spec = lease.contains("spec") ? lease["spec"] : json::object();
  std::lock_guard lock(mutex_);
  if (rv != observed_rv_) {
    observed_rv_ = rv;
    observed_at_ = Clock::now();
  }
  observed_holder_ = spec.contains("holderIdentity") && spec["holderIdentity"].is_string()
                         ? spec["holderIdentity"].get<std::string>()
                         : std::string();
}

Result<json> LeaderElector::create_lease() {
  auto now = format_rfc3339(std::chrono::system_clock::now(), TimePrecision::Micros);
  json lease = {
      {"apiVersion", "coordination.k8s.io/v1"},
      {"kind", "Lease"},
      {"metadata", {{"name", election_.lease_name}, {"namespace", ns_}}},
      {"spec",
       {{"holderIdentity", election_.identity},
        {"leaseDurationSeconds", std::chrono::ceil<std::chrono::seconds>(election_.lease_duration).count()},
        {"acquireTime", now},
        {"renewTime", now},
        {"leaseTransitions", 0}}}};
  return client_.create(kube_client::resources::leases(), ns_, lease);
}

bool LeaderElector::try_acquire_or_renew() {
  try {
    return attempt();
  } catch (const std::exception& e) {
    // A Lease we cannot make sense of (someone else's writer) counts as a failed attempt, not a crash.
    kube_client::log(kube_client::LogLevel::Error, std::string("leader election: ") + e.what());
    return false;
  }
}

bool LeaderElector::attempt() {
  auto started = Clock::now();
  auto got = client_.get(kube_client::resources::leases(), ns_, election_.lease_name);
  if (!got && got.error().code == ErrorCode::NotFound) {
    auto created = create_lease();  // AlreadyExists: another replica created it first
    if (!created) return false;
    observe(*created);
    last_renew_.store(started.time_since_epoch().count());
    return true;
  }
  if (!got) {
    kube_client::log(kube_client::LogLevel::Warn, "leader election: " + got.error().message);
    return false;
  }
  json lease = std::move(*got);
  observe(lease);
  json& spec = lease["spec"];
  if (!spec.is_object()) spec = json::object();
  std::string holder =
      spec.value("holderIdentity", json()).is_string() ? spec["holderIdentity"].get<std::string>() : "";
  std::chrono::seconds duration(spec.value("leaseDurationSeconds", 0));
  if (duration.count() <= 0) duration = std::chrono::ceil<std::chrono::seconds>(election_.lease_duration);
  bool ours = holder == election_.identity;
  if (!holder.empty() && !ours) {
    std::lock_guard lock(mutex_);
    if (Clock::now() < observed_at_ + duration)
      return false;  // held, and renewed within a duration we watched
  }

  auto now = format_rfc3339(std::chrono::system_clock::now(), TimePrecision::Micros);
  spec["holderIdentity"] = election_.identity;
  spec["leaseDurationSeconds"] = std::chrono::ceil<std::chrono::seconds>(election_.lease_duration).count();
  spec["renewTime"] = now;
  if (!ours) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  // metadata.resourceVersion is still the one we read: a 409 means someone wrote first and won.
  auto put = client_.replace(kube_client::resources::leases(), ns_, election_.lease_name, lease);
  if (!put) {
    if (put.error().code != ErrorCode::Conflict)
      kube_client::log(kube_client::LogLevel::Warn, "leader election: " + put.error().message);
    return false;
  }
  observe(*put);
  last_renew_.store(started.time_since_epoch().count());
  return true;
}

Status LeaderElector::release() {
  auto got = client_.get(kube_client::resources::leases(), ns_, election_.lease_name);
  if (!got) return got.error();
  json lease = std::move(*got);
  json& spec = lease["spec"];
  if (!spec.is_object()) return {};
  if (!spec.value("holderIdentity", json()).is_string() || spec["holderIdentity"] != election_.identity)
    return {};
  auto now = format_rfc3339(std::chrono::system_clock::now(), TimePrecision::Micros);
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["renewTime"] = now;
  spec["acquireTime"] = now;
  auto put = client_.replace(kube_client::resources::leases(), ns_, election_.lease_name, lease);
  if (!put) return put.error();
  kube_client::log(kube_client::LogLevel::Info,
                   "leader election: released " + ns_ + "/" + election_.lease_name);
  return {};
}

}  // namespace conduit::kube
