// A rail's progress thread: posts the slices of active batches as chains of RDMA WRITE/READ work requests
// (bounded by each batch's window and each QP's send queue, signaled per send_queue.h), polls the CQs of
// the connections it has work on, retires completions, fails stalled batches, and sleeps on the device's
// completion channel instead of spinning once a transfer is in its steady state.
//
// Unlike libfabric's tcp and shm providers, RC hardware moves bytes without the target's CPU: a target
// transport's progress threads sleep, and an initiator's thread wakes only for its own completions.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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
  ~Rail();
  Rail(const Rail&) = delete;
  Rail& operator=(const Rail&) = delete;

  const std::shared_ptr<Device>& device() const { return device_; }
  void enqueue(std::shared_ptr<Batch> batch);

 private:
  struct Chain {  // WRs gathered for one QP in this round, posted with one ibv_post_send
    Connection* connection;
    std::uint32_t qp;
    std::vector<PostedOp*> ops;
  };

  void run();
  bool post_all();
  bool post(Batch& batch, RailPart& part, std::vector<Chain>& chains);
  void flush(Chain& chain);
  bool reap();
  bool reap_link(Connection& connection);
  void complete(PostedOp& op, const Error* error);
  void finish_if_done(Batch& batch, RailPart& part);
  void check_stalls();
  void track(const std::shared_ptr<Connection>& connection);
  bool busy() const;
  void idle_wait();
  std::string describe(const PostedOp& op) const;

  std::shared_ptr<Device> device_;
  Options options_;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};

  std::mutex inbox_mu_;
  std::vector<std::shared_ptr<Batch>> inbox_;
  std::vector<std::shared_ptr<Batch>> active_;        // progress thread only
  std::vector<std::shared_ptr<Connection>> polling_;  // connections with WRs outstanding on this rail
  std::chrono::steady_clock::time_point last_active_;

  std::thread thread_;  // last: starts after everything above is constructed
};

}  // namespace conduit::verbs
