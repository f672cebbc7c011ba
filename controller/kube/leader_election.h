// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: every retry period a candidate
// reads the Lease and takes it when it is free or expired; the leader renews it. Every write carries the
// resourceVersion it read, so of two racing writers exactly one wins and the other sees 409. Expiry is
// judged on OUR clock: a Lease counts as expired when we have seen the same resourceVersion for a whole
// leaseDurationSeconds, never by comparing its renewTime with our time (clocks differ across machines).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <thread>

#include "kube_client/client.h"
#include "kube_client/kube_config.h"

namespace conduit::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;  // empty: the config's namespace
  std::string lease_name = "conduit-controller";
  std::string identity;  // empty: hostname_random
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};  // a leader that could not renew this long steps down
  std::chrono::milliseconds retry_period{2000};
  // Called on the elector's thread (on_stopped_leading also from stop()'s caller); neither may call stop().
  // on_stopped_leading must stop the leader's work before it returns: the Lease is released (and another
  // replica may start) right after.
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
};

class LeaderElector {
 public:
  // Talks on its own connections, with timeouts shorter than the renew deadline, so a hung API server costs
  // leadership on time rather than after a 30 s read timeout.
  LeaderElector(const kube_client::KubeConfig& config, LeaderElectionConfig election);
  ~LeaderElector();  // stop(/*release=*/true)
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void start();
  // Steps down (on_stopped_leading) and, with `release`, empties holderIdentity so another replica takes
  // over at its next retry instead of after a whole lease duration. Without: what a crash looks like.
  void stop(bool release = true);

  // True while we hold the Lease and renewed it within the renew deadline (shorter than the lease duration,
  // so we stop believing we lead before anyone else may conclude the Lease expired).
  bool is_leader() const;
  const std::string& identity() const { return election_.identity; }

  // One attempt to take or renew the Lease; what the loop does every retry period (public for tests).
  bool try_acquire_or_renew();
  // Hands the Lease back if we hold it (holderIdentity empty, leaseDurationSeconds 1).
  Status release();

 private:
  enum class Phase { Candidate, Leading };
  void run(std::stop_token stop);
  Phase candidate_step(std::stop_token stop);
  Phase leader_step(std::stop_token stop);
  bool attempt();
  void begin_leading();
  void end_leading();
  static void call(const std::function<void()>& callback, const char* name);
  bool sleep(std::stop_token stop, std::chrono::milliseconds d);
  Result<nlohmann::json> create_lease();
  void observe(const nlohmann::json& lease);

  kube_client::KubeClient client_;
  LeaderElectionConfig election_;
  std::string ns_;

  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  std::string observed_rv_;  // the Lease as last read (its resourceVersion only: RVs compare for equality)
  std::string observed_holder_;
  std::chrono::steady_clock::time_point observed_at_{};  // when observed_rv_ was first seen, on our clock
  std::atomic<bool> leading_{false};
  std::atomic<std::chrono::steady_clock::rep> last_renew_{0};
  std::jthread thread_;
};

// The hostname and a random suffix: unique among the controller's replicas.
std::string default_identity();

}  // namespace conduit::kube
