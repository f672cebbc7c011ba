#include "rail.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "wc_error.h"

namespace conduit::verbs {

namespace {

using Clock = std::chrono::steady_clock;

// wr_id = QP index (within the connection's rail) in the top byte, SendQueue sequence below, so a
// completion finds its send queue without touching the slice record it once named.
constexpr int kQpShift = 56;
constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kQpShift) - 1;

std::uint64_t make_wr_id(std::uint32_t qp, std::uint64_t seq) {
  return static_cast<std::uint64_t>(qp) << kQpShift | (seq & kSeqMask);
}
PostedOp* op_of(std::uint64_t tag) { return reinterpret_cast<PostedOp*>(tag); }
std::uint64_t tag_of(PostedOp* op) { return reinterpret_cast<std::uint64_t>(op); }

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Rail::Rail(std::shared_ptr<Device> device, Options options)
    : device_(std::move(device)),
      options_(options),
      batches_(options.index),
      thread_(batches_.wake(), [this] { round(); }) {}

std::string Rail::describe(const PostedOp& op) const {
  return std::string(op.kind == OpKind::Write ? "RDMA write" : "RDMA read") + " of " +
         std::to_string(op.length) + " bytes at remote " + hex(op.remote_address) + " (rkey " + hex(op.rkey) +
         ") on " + device_->name() + " toward " + op.connection->peer_name();
}

void Rail::round() {
  const bool progressed = batches_.round([this] { return post_all(); }, [this] { return reap(); },
                                         options_.stall_timeout, [this] { return stall_error(); });
  if (progressed) {
    last_active_ = Clock::now();
  } else {
    idle_wait();
  }
}

Error Rail::stall_error() const {
  return make_error(ErrorCode::TimedOut, "no completion on " + device_->name() + " for " +
                                             std::to_string(options_.stall_timeout.count()) +
                                             " ms: the device or the peer stopped answering");
}

bool Rail::post_all() {
  std::vector<Chain> chains;
  bool progressed = false;
  for (auto& b : batches_) progressed |= post(*b, chains);
  for (Chain& c : chains) flush(c);
  return progressed;
}

bool Rail::post(Batch& batch, std::vector<Chain>& chains) {
  const std::uint32_t rail = options_.index;
  if (batch.done(rail)) return false;
  bool progressed = false;
  while (PostedOp* next = batch.next_to_post(rail)) {
    PostedOp& op = *next;
    Connection& connection = *op.connection;
    if (connection.broken()) {
      const auto reason = connection.broken_reason();
      batch.fail(make_error(reason ? reason->code : ErrorCode::Provider,
                            "the connection to " + connection.peer_name() +
                                " broke: " + (reason ? reason->message : std::string("unknown reason"))));
      break;
    }
    RailLink& link = connection.rail(rail);
    const auto n = static_cast<std::uint32_t>(link.qps.size());
    std::uint32_t chosen = n;
    for (std::uint32_t k = 0; k < n && chosen == n; ++k) {
      const std::uint32_t i = (link.next_qp + k) % n;
      if (link.qps[i].sq.room() > 0) chosen = i;
    }
    if (chosen == n) break;  // every send queue to this peer is full: completions will make room
    link.next_qp = (chosen + 1) % n;
    op.seq = link.qps[chosen].sq.push(tag_of(&op));
    auto chain = std::find_if(chains.begin(), chains.end(),
                              [&](const Chain& c) { return c.connection == &connection && c.qp == chosen; });
    if (chain == chains.end()) chain = chains.insert(chains.end(), Chain{&connection, chosen, {}});
    chain->ops.push_back(&op);
    track(op.connection);
    batch.posted(rail);
    progressed = true;
  }
  batch.close_if_done(rail);
  return progressed;
}

void Rail::flush(Chain& chain) {
  RailLink& link = chain.connection->rail(options_.index);
  QpLink& q = link.qps[chain.qp];
  q.sq.seal();
  const std::size_t n = chain.ops.size();
  std::vector<ibv_sge> sge(n);
  std::vector<ibv_send_wr> wr(n);
  for (std::size_t i = 0; i < n; ++i) {
    const PostedOp& op = *chain.ops[i];
    sge[i] = ibv_sge{op.local_address, op.length, op.lkey};
    wr[i].wr_id = make_wr_id(chain.qp, op.seq);
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = op.kind == OpKind::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr[i].send_flags = q.sq.signaled(op.seq) ? IBV_SEND_SIGNALED : 0;
    wr[i].wr.rdma.remote_addr = op.remote_address;
    wr[i].wr.rdma.rkey = op.rkey;
    wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(q.qp.get(), wr.data(), &bad);
  if (rc == 0) return;

  std::size_t first = bad != nullptr ? static_cast<std::size_t>(bad - wr.data()) : 0;
  if (first >= n) first = 0;
  const Error error =
      errno_error("ibv_post_send on " + device_->name() + " toward " + chain.connection->peer_name(), rc);
  chain.connection->mark_broken(error);
  std::vector<std::uint64_t> failed = q.sq.drop_unposted(chain.ops[first]->seq);
  // WRs posted before the refused one but after the last signaled WR: no completion will ever name them.
  // Stop the QP so they do not run on behind our back, and fail them now.
  const std::vector<std::uint64_t> uncovered = q.sq.drop_uncovered();
  if (!uncovered.empty()) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(q.qp.get(), &attr, IBV_QP_STATE);
  }
  failed.insert(failed.begin(), uncovered.begin(), uncovered.end());
  for (std::uint64_t t : failed) complete(*op_of(t), &error);
}

bool Rail::reap() {
  bool progressed = false;
  for (std::size_t i = 0; i < polling_.size(); ++i) progressed |= reap_link(*polling_[i]);
  std::erase_if(polling_, [this](const std::shared_ptr<Connection>& c) {
    return c->rail(options_.index).outstanding() == 0;
  });
  return progressed;
}

bool Rail::reap_link(Connection& connection) {
  RailLink& link = connection.rail(options_.index);
  std::array<ibv_wc, 32> wc{};
  bool progressed = false;
  for (;;) {
    const int n = ibv_poll_cq(link.cq.get(), static_cast<int>(wc.size()), wc.data());
    if (n < 0) {
      const Error error =
          make_error(ErrorCode::Provider, "ibv_poll_cq on " + device_->name() + " toward " +
                                              connection.peer_name() + " failed (" + std::to_string(n) + ")");
      connection.mark_broken(error);
      for (QpLink& q : link.qps) {
        for (std::uint64_t t : q.sq.retire_through(~std::uint64_t{0})) complete(*op_of(t), &error);
      }
      return true;
    }
    if (n == 0) return progressed;
    progressed = true;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& c = wc[i];
      const auto qp = static_cast<std::uint32_t>(c.wr_id >> kQpShift);
      const std::uint64_t seq = c.wr_id & kSeqMask;
      if (qp >= link.qps.size()) continue;
      SendQueue& sq = link.qps[qp].sq;
      const bool named_held = sq.holds(seq);
      const std::vector<std::uint64_t> tags = sq.retire_through(seq);
      if (c.status == IBV_WC_SUCCESS) {
        for (std::uint64_t t : tags) complete(*op_of(t), nullptr);
        continue;
      }
      if (c.status == IBV_WC_WR_FLUSH_ERR) {
        // The QP is in error because of an earlier failure: report that one, it is what went wrong.
        const auto reason = connection.broken_reason();
        const Error error =
            reason ? make_error(reason->code, "flushed after an earlier failure on the connection to " +
                                                  connection.peer_name() + ": " + reason->message)
                   : make_error(classify_wc_status(c.status).code,
                                describe_wc_error(c.status, c.vendor_err,
                                                  "a work request on " + device_->name() + " toward " +
                                                      connection.peer_name()));
        connection.mark_broken(error);
        for (std::uint64_t t : tags) complete(*op_of(t), &error);
        continue;
      }
      const std::string what = named_held && !tags.empty() ? describe(*op_of(tags.back()))
                                                           : "a work request on " + device_->name() +
                                                                 " toward " + connection.peer_name();
      const Error error =
          make_error(classify_wc_status(c.status).code, describe_wc_error(c.status, c.vendor_err, what));
      connection.mark_broken(error);
      // RC completes in order: the WRs before the failed one finished; the failed one is the last retired.
      for (std::size_t k = 0; k < tags.size(); ++k) {
        const bool is_failed = named_held && k + 1 == tags.size();
        complete(*op_of(tags[k]), is_failed ? &error : nullptr);
      }
    }
    if (n < static_cast<int>(wc.size())) return progressed;
  }
}

void Rail::complete(PostedOp& op, const Error* error) {
  op.batch->complete(options_.index, op.length, error);
}

void Rail::track(const std::shared_ptr<Connection>& connection) {
  if (std::find(polling_.begin(), polling_.end(), connection) == polling_.end())
    polling_.push_back(connection);
}

bool Rail::busy() const {
  return std::any_of(polling_.begin(), polling_.end(), [this](const std::shared_ptr<Connection>& c) {
    return c->rail(options_.index).outstanding() > 0;
  });
}

void Rail::idle_wait() {
  int timeout_ms = 100;
  if (busy()) {
    // Right after a completion the next is likely microseconds away: yield rather than sleep.
    if (Clock::now() - last_active_ < std::chrono::microseconds(50)) {
      sched_yield();
      return;
    }
    // Steady state of a large transfer: sleep until the device raises a completion event.
    for (const auto& c : polling_) {
      RailLink& link = c->rail(options_.index);
      if (link.outstanding() > 0) ibv_req_notify_cq(link.cq.get(), 0);
    }
    // A completion that landed before the CQ was armed raises no event: look once more.
    if (reap()) {
      last_active_ = Clock::now();
      return;
    }
    timeout_ms = 1;  // keeps stall checks and new batches timely
  }
  std::array<pollfd, 2> fds{pollfd{batches_.wake().fd(), POLLIN, 0},
                            pollfd{device_->channel()->fd, POLLIN, 0}};
  if (poll(fds.data(), fds.size(), timeout_ms) > 0 && (fds[0].revents & POLLIN) != 0) batches_.wake().drain();
  // Acknowledge every event at once: ibv_destroy_cq waits for the events it delivered to be acknowledged.
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(device_->channel(), &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

}  // namespace conduit::verbs
