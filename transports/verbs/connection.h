// The RC queue pairs between this transport and one peer transport: on each local rail a CQ and
// `qps_per_peer` QPs toward the peer's rail (r mod its rail count), each with its send-queue accounting.
// Built on the initiator by prepare() + complete(reply), on the target by accept(request).
//
// Threads: the rail-r progress thread alone touches rail(r)'s CQ and send queues; the broken flag and its
// reason are shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/verbs.h"
#include "device.h"
#include "handshake.h"
#include "ib_handles.h"
#include "send_queue.h"

namespace conduit::verbs {

struct QpLink {
  QpPtr qp;
  SendQueue sq;
  std::uint32_t psn = 0;
};

struct RailLink {
  std::shared_ptr<Device> device;  // declared first: released after the CQ and QPs
  std::uint32_t peer_rail = 0;
  CqPtr cq;
  std::vector<QpLink> qps;  // declared after the CQ: destroyed before it
  std::uint32_t next_qp = 0;

  std::uint32_t outstanding() const;
};

class Connection {
 public:
  // Initiator: CQs and QPs (in INIT) on every local rail for the peer `address` describes.
  static Result<std::shared_ptr<Connection>> prepare(const std::vector<std::shared_ptr<Device>>& devices,
                                                     const Handshake& address, const VerbsOptions& options);
  // The request to send: `self` is our Address message (instance, listener, rails).
  Handshake request(const Handshake& self) const;
  // The peer's reply: every QP to RTR/RTS against its counterpart.
  Status complete(const Handshake& reply, const VerbsOptions& options);

  // Target: one QP per requested QP, on the rail it names, already at RTS. reply_qps() is the answer.
  static Result<std::shared_ptr<Connection>> accept(const std::vector<std::shared_ptr<Device>>& devices,
                                                    const Handshake& request, const VerbsOptions& options);
  const std::vector<QpInfo>& reply_qps() const { return reply_qps_; }

  const std::string& peer_name() const { return peer_name_; }
  RailLink& rail(std::uint32_t r) { return rails_[r]; }
  std::size_t rails() const { return rails_.size(); }

  // A WR failed (its QP is now in error) or could not be posted: nothing more is posted here and the next
  // batch to this peer opens a new connection. The first reason is kept for the flushed WRs that follow.
  void mark_broken(const Error& reason);
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  std::optional<Error> broken_reason() const;

 private:
  Connection() = default;

  std::uint64_t peer_instance_ = 0;
  std::string peer_name_;
  std::vector<RailLink> rails_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> order_;  // (rail, qp) in handshake order
  std::vector<QpInfo> reply_qps_;

  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  std::optional<Error> reason_;
};

}  // namespace conduit::verbs
