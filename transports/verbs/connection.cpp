#include "connection.h"

#include <algorithm>
#include <random>

namespace conduit::verbs {

namespace {

std::uint32_t random_psn() {
  thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffffu;
}

// Target QPs never post: one send WR is all they need.
constexpr std::uint32_t kTargetSqDepth = 1;
constexpr int kTargetCqEntries = 4;

}  // namespace

std::uint32_t RailLink::outstanding() const {
  std::uint32_t n = 0;
  for (const QpLink& q : qps) n += q.sq.outstanding();
  return n;
}

Result<std::shared_ptr<Connection>> Connection::prepare(const std::vector<std::shared_ptr<Device>>& devices,
                                                        const Handshake& address,
                                                        const VerbsOptions& options) {
  std::shared_ptr<Connection> c(new Connection());
  c->peer_instance_ = address.instance;
  c->peer_name_ = address.listener.to_string();
  c->rails_.resize(devices.size());
  for (std::uint32_t r = 0; r < devices.size(); ++r) {
    RailLink& link = c->rails_[r];
    link.device = devices[r];
    link.peer_rail = static_cast<std::uint32_t>(r % address.rails.size());
    const std::uint32_t depth =
        std::min(options.sq_depth, std::max<std::uint32_t>(devices[r]->max_qp_wr(), 2));
    // Every outstanding WR can produce at most one completion (an error flushes unsignaled ones too), so a
    // CQ as deep as all its send queues together never overflows.
    auto cq = link.device->create_cq(static_cast<int>(depth * options.qps_per_peer));
    if (!cq) return cq.error();
    link.cq = std::move(*cq);
    for (std::uint32_t q = 0; q < options.qps_per_peer; ++q) {
      auto qp = link.device->create_qp(link.cq.get(), depth);
      if (!qp) return qp.error();
      link.qps.push_back(QpLink{std::move(*qp), SendQueue(depth, options.signal_every), random_psn()});
      c->order_.emplace_back(r, q);
    }
  }
  return c;
}

Handshake Connection::request(const Handshake& self) const {
  Handshake h = self;
  h.kind = HandshakeKind::Request;
  h.qps.clear();
  for (const auto& [r, q] : order_) {
    const QpLink& link = rails_[r].qps[q];
    h.qps.push_back(QpInfo{static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(rails_[r].peer_rail),
                           link.qp->qp_num, link.psn});
  }
  return h;
}

Status Connection::complete(const Handshake& reply, const VerbsOptions& options) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::Provider, "ibverbs handshake with " + peer_name_ + ": " + why);
  };
  if (reply.kind != HandshakeKind::Reply)
    return bad("expected a reply, got a " + std::string(to_string(reply.kind)));
  if (reply.instance != peer_instance_) {
    return bad("answered by another transport instance (the peer restarted?)");
  }
  if (reply.qps.size() != order_.size()) {
    return bad("asked for " + std::to_string(order_.size()) + " queue pairs, got " +
               std::to_string(reply.qps.size()));
  }
  for (std::size_t i = 0; i < order_.size(); ++i) {
    const auto [r, q] = order_[i];
    const QpInfo& theirs = reply.qps[i];
    RailLink& link = rails_[r];
    if (theirs.peer_rail != r || theirs.rail != link.peer_rail) {
      return bad("queue pair " + std::to_string(i) + " answered for the wrong rails");
    }
    if (auto ok = link.device->connect_qp(link.qps[q].qp.get(), link.qps[q].psn, reply.rails[theirs.rail],
                                          theirs.qpn, theirs.psn, options);
        !ok) {
      return make_error(ok.error().code, "connecting to " + peer_name_ + ": " + ok.error().message);
    }
  }
  return {};
}

Result<std::shared_ptr<Connection>> Connection::accept(const std::vector<std::shared_ptr<Device>>& devices,
                                                       const Handshake& request,
                                                       const VerbsOptions& options) {
  if (request.kind != HandshakeKind::Request) {
    return make_error(ErrorCode::InvalidArgument,
                      "expected a handshake request, got a " + std::string(to_string(request.kind)));
  }
  std::shared_ptr<Connection> c(new Connection());
  c->peer_instance_ = request.instance;
  c->peer_name_ = request.listener.to_string();
  c->rails_.resize(devices.size());
  for (std::size_t i = 0; i < request.qps.size(); ++i) {
    const QpInfo& theirs = request.qps[i];
    if (theirs.peer_rail >= devices.size()) {
      return make_error(ErrorCode::InvalidArgument, "queue pair " + std::to_string(i) + " asks for rail " +
                                                        std::to_string(theirs.peer_rail) +
                                                        ", this transport has " +
                                                        std::to_string(devices.size()));
    }
    RailLink& link = c->rails_[theirs.peer_rail];
    if (!link.cq) {
      link.device = devices[theirs.peer_rail];
      link.peer_rail = theirs.rail;
      auto cq = link.device->create_cq(kTargetCqEntries);
      if (!cq) return cq.error();
      link.cq = std::move(*cq);
    }
    auto qp = link.device->create_qp(link.cq.get(), kTargetSqDepth);
    if (!qp) return qp.error();
    const std::uint32_t psn = random_psn();
    if (auto ok = link.device->connect_qp(qp->get(), psn, request.rails[theirs.rail], theirs.qpn, theirs.psn,
                                          options);
        !ok) {
      return ok.error();
    }
    c->reply_qps_.push_back(QpInfo{theirs.peer_rail, theirs.rail, (*qp)->qp_num, psn});
    link.qps.push_back(QpLink{std::move(*qp), SendQueue(kTargetSqDepth, 1), psn});
    c->order_.emplace_back(theirs.peer_rail, static_cast<std::uint32_t>(link.qps.size() - 1));
  }
  return c;
}

void Connection::mark_broken(const Error& reason) {
  std::lock_guard lock(mu_);
  if (!reason_) reason_ = reason;
  broken_.store(true, std::memory_order_release);
}

std::optional<Error> Connection::broken_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

}  // namespace conduit::verbs
