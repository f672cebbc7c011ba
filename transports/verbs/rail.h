// A rail's progress thread: posts the slices of active batches as chains of RDMA WRITE/READ work requests
// (bounded by each batch's window and each QP's send queue, signaled per send_queue.h), polls the CQs of
// the connections it has work on, retires completions, fails stalled batches, and sleeps on the device's
// completion channel instead of spinning once a transfer is in its steady state.
//
// Unlike libfabric's tcp and shm providers, RC hardware moves bytes without the target's CPU: a target
// transport's progress threads sleep, and an initiator's thread wakes only for its own completions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "../src/progress_thread.h"
#include "../src/rail_batches.h"
#include "batch.h"
#include "device.h"

namespace conduit::verbs {

class Rail {
 public:
  struct Options {
    std::uint32_t index = 0;
    std::chrono::milliseconds stall_timeout{30000};
  };

  Rail(std::shared_ptr<Device> device, Options options);

  const std::shared_ptr<Device>& device() const { return device_; }
  void enqueue(std::shared_ptr<Batch> batch) { batches_.enqueue(std::move(batch)); }
  // Wakes the progress thread so it looks at its batches now (a cancel: parts with nothing in flight close).
  void wake() const { batches_.wake().notify(); }

 private:
  struct Chain {  // WRs gathered for one QP in this round, posted with one ibv_post_send
    Connection* connection;
    std::uint32_t qp;
    std::vector<PostedOp*> ops;
  };

  void round();               // one turn of the progress thread: post, reap, fail stalls, sleep if idle
  Error stall_error() const;  // why a batch with work on this rail and no completion for so long failed
  bool post_all();
  bool post(Batch& batch, std::vector<Chain>& chains);
  void flush(Chain& chain);
  bool reap();
  bool reap_link(Connection& connection);
  void complete(PostedOp& op, const Error* error);
  void track(const std::shared_ptr<Connection>& connection);
  bool busy() const;
  void idle_wait();
  std::string describe(const PostedOp& op) const;

  std::shared_ptr<Device> device_;
  Options options_;
  RailBatches<Batch> batches_;
  std::vector<std::shared_ptr<Connection>> polling_;  // connections with WRs outstanding on this rail
  std::chrono::steady_clock::time_point last_active_;

  ProgressThread thread_;  // last: starts after everything above is built, stops before it goes
};

}  // namespace conduit::verbs
