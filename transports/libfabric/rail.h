// A rail's progress thread. libfabric's tcp and shm providers make progress only inside fi_cq_read, on the
// initiator and on the passive target alike, so every endpoint gets one thread that posts slices within
// each batch's window, reaps completions, detects stalls, and sleeps as cheaply as the provider allows.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "batch.h"
#include "endpoint.h"

namespace conduit::fabric {

// How an idle progress thread waits. Fd: sleep in poll() on the CQ's wait fd (tcp). Backoff: spin briefly,
// then sleep with growing intervals (providers without a wait fd, e.g. shm). Spin: never sleep (costs a
// core; the baseline the other two are measured against).
enum class ProgressMode : std::uint8_t { Fd, Backoff, Spin };

// CONDUIT_PROGRESS=fd|backoff|spin overrides the choice (for measurement); default: Fd where the CQ has a
// wait fd, else Backoff.
ProgressMode choose_progress_mode(const Endpoint& endpoint);
std::string_view to_string(ProgressMode mode);

class Rail {
 public:
  struct Options {
    std::uint32_t index = 0;
    ProgressMode mode = ProgressMode::Backoff;
    std::chrono::milliseconds stall_timeout{30000};
  };

  Rail(std::shared_ptr<Endpoint> endpoint, Options options);
  ~Rail();
  Rail(const Rail&) = delete;
  Rail& operator=(const Rail&) = delete;

  const std::shared_ptr<Endpoint>& endpoint() const { return endpoint_; }
  ProgressMode mode() const { return options_.mode; }

  // Hands a batch with work on this rail to the progress thread.
  void enqueue(std::shared_ptr<Batch> batch);

 private:
  void run();
  bool post_all();
  bool post(Batch& batch, RailPart& part);
  int post_one(PostedOp& op);
  bool reap();
  void complete(PostedOp& op, const Error* error);
  void finish_if_done(Batch& batch, RailPart& part);
  void check_stalls();
  void idle_wait(bool busy);

  std::shared_ptr<Endpoint> endpoint_;
  Options options_;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};

  std::mutex inbox_mu_;
  std::vector<std::shared_ptr<Batch>> inbox_;
  std::vector<std::shared_ptr<Batch>> active_;  // progress thread only
  std::uint32_t idle_rounds_ = 0;               // idle sleeps since the last activity
  std::chrono::steady_clock::time_point last_active_;

  std::thread thread_;  // last: starts after everything above is constructed
};

}  // namespace conduit::fabric
