// A rail's progress thread. libfabric's tcp and shm providers make progress only inside fi_cq_read, on the
// initiator and on the passive target alike, so every endpoint gets one thread that posts slices within
// each batch's window, reaps completions, detects stalls, and sleeps as cheaply as the provider allows.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "../src/progress_thread.h"
#include "../src/rail_batches.h"
#include "batch.h"
#include "endpoint.h"

namespace conduit::fabric {

// The mode a rail on `endpoint` runs in (never Auto): `asked` (TransportConfig::progress) where the endpoint
// can do it, else Fd where the CQ has a wait fd, else Backoff. Decided once, when the rail opens.
ProgressMode choose_progress_mode(ProgressMode asked, const Endpoint& endpoint);

class Rail {
 public:
  struct Options {
    std::uint32_t index = 0;
    ProgressMode mode = ProgressMode::Backoff;
    std::chrono::milliseconds stall_timeout{30000};
  };

  Rail(std::shared_ptr<Endpoint> endpoint, Options options);

  const std::shared_ptr<Endpoint>& endpoint() const { return endpoint_; }

  // Hands a batch with work on this rail to the progress thread.
  void enqueue(std::shared_ptr<Batch> batch) { batches_.enqueue(std::move(batch)); }
  // Wakes the progress thread so it looks at its batches now (a cancel: parts with nothing in flight close).
  void wake() const { batches_.wake().notify(); }

  // Any thread (poll and submit ask): why this rail can never move again, or nullopt. libfabric 1.17's shm
  // takes a spinlock inside the peer's shared region; a peer killed while holding it leaves our progress
  // thread spinning inside the provider for good, where its own stall check never runs. The rail is
  // wedged once its thread has been inside one round for the stall timeout and the peer it was posting
  // to (or, inside fi_cq_read, any of its peers) has exited: that lock will never be released, so the
  // provider will never touch the batches' memory again and failing them is safe. Latches. Never for
  // tcp, whose calls return.
  std::optional<Error> wedged();
  // The wedged rail's destructor would join a thread that never returns: the transport leaks it instead.
  bool known_wedged() const { return wedged_.load(std::memory_order_acquire); }

 private:
  void round();               // one turn of the progress thread: post, reap, fail stalls, sleep if idle
  Error stall_error() const;  // why a batch with work on this rail and no completion for so long failed
  bool post_all();
  bool post(Batch& batch);
  int post_one(PostedOp& op);
  bool reap();
  void complete(PostedOp& op, const Error* error);
  void idle_wait(bool busy);

  std::shared_ptr<Endpoint> endpoint_;
  Options options_;
  RailBatches<Batch> batches_;
  std::uint32_t idle_rounds_ = 0;  // idle sleeps since the last activity
  std::chrono::steady_clock::time_point last_active_;
  // What wedged() reads: when the current round began, whom the thread is posting to (FI_ADDR_UNSPEC
  // outside a post), and the latch.
  std::atomic<std::chrono::steady_clock::rep> round_began_{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  std::atomic<fi_addr_t> posting_to_{FI_ADDR_UNSPEC};
  std::atomic<bool> wedged_{false};

  ProgressThread thread_;  // last: starts after everything above is built, stops before it goes
};

}  // namespace conduit::fabric
