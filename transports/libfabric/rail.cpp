#include "rail.h"

#include <poll.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string>

namespace conduit::fabric {

namespace {

using Clock = std::chrono::steady_clock;

bool connection_lost(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ESHUTDOWN:
    case EPIPE:
      return true;
    default:
      return false;
  }
}

// Which failures mean "the peer is gone" (worth a retry elsewhere) rather than "the peer said no". tcp
// reports a dead peer as FI_ECANCELED with the socket's errno as the provider error, so look there too.
ErrorCode classify(int err, int prov_errno = 0) {
  if (connection_lost(prov_errno)) return ErrorCode::PeerUnreachable;
  switch (err) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ENETDOWN:
    case FI_ESHUTDOWN:
    case FI_ETIMEDOUT:
      return ErrorCode::PeerUnreachable;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
    case FI_ENOKEY:
    case FI_EFAULT:
    case FI_EREMOTEIO:
    case FI_ECANCELED:  // tcp;ofi_rxm: the target rejected the key or the range and dropped the request
      return ErrorCode::RemoteAccess;
    default:
      return ErrorCode::Provider;
  }
}

std::string describe(const PostedOp& op) {
  const char* what = op.kind == OpKind::Write ? "write" : "read";
  std::string text = std::string(what) + " of " + std::to_string(op.length) + " bytes at remote address " +
                     std::to_string(op.remote[0].addr);
  if (op.ranges > 1) text += " (the first of " + std::to_string(op.ranges) + " ranges in one message)";
  return text;
}

}  // namespace

ProgressMode choose_progress_mode(ProgressMode asked, const Endpoint& endpoint) {
  const bool has_fd = endpoint.wait_fd() >= 0;
  if (asked == ProgressMode::Spin || asked == ProgressMode::Backoff) return asked;
  return has_fd ? ProgressMode::Fd : ProgressMode::Backoff;
}

Rail::Rail(std::shared_ptr<Endpoint> endpoint, Options options)
    : endpoint_(std::move(endpoint)),
      options_(options),
      batches_(options.index),
      thread_(batches_.wake(), [this] { round(); }) {}

void Rail::round() {
  if (endpoint_->shm())
    round_began_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  const bool progressed = batches_.round([this] { return post_all(); }, [this] { return reap(); },
                                         options_.stall_timeout, [this] { return stall_error(); });
  if (progressed) {
    idle_rounds_ = 0;
    last_active_ = Clock::now();
  } else {
    idle_wait(!batches_.empty());
  }
}

std::optional<Error> Rail::wedged() {
  if (!endpoint_->shm()) return std::nullopt;
  if (!wedged_.load(std::memory_order_acquire)) {
    const Clock::time_point began{Clock::duration(round_began_.load(std::memory_order_relaxed))};
    if (Clock::now() - began <= options_.stall_timeout) return std::nullopt;
    if (!endpoint_->peer_process_gone(posting_to_.load(std::memory_order_relaxed))) return std::nullopt;
    wedged_.store(true, std::memory_order_release);
  }
  return make_error(ErrorCode::PeerUnreachable,
                    "rail " + std::to_string(options_.index) + " is wedged: a peer process exited while " +
                        "holding the shm provider's lock, and libfabric 1.17's shm spins on it for good " +
                        "(no completion for over " + std::to_string(options_.stall_timeout.count()) +
                        " ms); restart this process to use the rail again");
}

Error Rail::stall_error() const {
  return make_error(ErrorCode::TimedOut, "no completion from the peer for " +
                                             std::to_string(options_.stall_timeout.count()) +
                                             " ms: the peer is gone or not driving progress");
}

bool Rail::post_all() {
  bool progressed = false;
  for (auto& b : batches_) progressed |= post(*b);
  return progressed;
}

bool Rail::post(Batch& batch) {
  const std::uint32_t rail = options_.index;
  if (batch.done(rail)) return false;
  bool progressed = false;
  bool queue_full = false;
  fi_addr_t posted_to = FI_ADDR_UNSPEC;
  while (PostedOp* op = batch.next_to_post(rail)) {
    posting_to_.store(op->peer, std::memory_order_relaxed);
    const int rc = post_one(*op);
    posting_to_.store(FI_ADDR_UNSPEC, std::memory_order_relaxed);
    if (rc == -FI_EAGAIN) {  // provider queue full: reap, then retry
      queue_full = true;
      break;
    }
    if (rc != 0) {
      batch.fail(make_error(classify(-rc), describe(*op) + " could not be posted: " + fi_strerror(-rc)));
      break;
    }
    posted_to = op->peer;
    batch.posted(rail);
    progressed = true;
  }
  // A passive shm target looks at its CQ only every so often once idle (up to 1 ms apart): its doorbell
  // makes it look now (doorbell.h). Rung on every round that posted, not only after a pause: a passive
  // target cannot tell us it is awake (processing a small write does not count as activity for it), and
  // skipping rings within 100 us of the last left a 4 KiB write's p99 at 1.1 ms. The system call per round
  // cost a streaming batch nothing measurable (conduit-bench --self shm, 256 MiB, 8 interleaved runs:
  // median 12.9 GB/s before and after, 2 rails 15.7 and 15.9).
  if (posted_to != FI_ADDR_UNSPEC && endpoint_->shm()) endpoint_->ring(posted_to);
  if (queue_full) return progressed;
  batch.close_if_done(rail);
  return progressed;
}

int Rail::post_one(PostedOp& op) {
  fid_ep* ep = endpoint_->ep();
  // One range without a delivery guarantee is the streaming case: the plain calls, as always.
  if (op.ranges == 1 && (op.kind == OpKind::Read || !op.deliver)) {
    const iovec& l = op.local[0];
    const fi_rma_iov& r = op.remote[0];
    if (op.kind == OpKind::Read) {
      return static_cast<int>(
          fi_read(ep, l.iov_base, l.iov_len, op.desc[0], op.peer, r.addr, r.key, &op.context));
    }
    return static_cast<int>(
        fi_write(ep, l.iov_base, l.iov_len, op.desc[0], op.peer, r.addr, r.key, &op.context));
  }
  fi_msg_rma msg{};
  msg.msg_iov = op.local.data();
  msg.desc = op.desc.data();
  msg.iov_count = op.ranges;
  msg.addr = op.peer;
  msg.rma_iov = op.remote.data();
  msg.rma_iov_count = op.ranges;
  msg.context = &op.context;
  if (op.kind == OpKind::Read) return static_cast<int>(fi_readmsg(ep, &msg, FI_COMPLETION));
  return static_cast<int>(fi_writemsg(ep, &msg, FI_COMPLETION | (op.deliver ? FI_DELIVERY_COMPLETE : 0)));
}

bool Rail::reap() {
  std::array<fi_cq_entry, 32> entries;
  bool progressed = false;
  for (;;) {
    const auto start = Clock::now();
    const ssize_t n = fi_cq_read(endpoint_->cq(), entries.data(), entries.size());
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) complete(*static_cast<PostedOp*>(entries[i].op_context), nullptr);
      progressed = true;
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(endpoint_->cq(), &err, 0) <= 0) continue;
      auto* op = static_cast<PostedOp*>(err.op_context);
      char buf[256] = {};
      const char* detail = fi_cq_strerror(endpoint_->cq(), err.prov_errno, err.err_data, buf, sizeof(buf));
      if (op != nullptr) {
        const ErrorCode code = classify(err.err, err.prov_errno);
        std::string message = describe(*op) + " failed: " + fi_strerror(err.err) +
                              " (provider: " + (detail != nullptr ? detail : "") + ")";
        // tcp;ofi_rxm answers a revoked or unknown key, or a range outside the registration, by closing
        // the connection: from here that looks exactly like a dead target, so say both.
        if (code == ErrorCode::PeerUnreachable) {
          message += ": the target closed the connection (it died, or it refused the key or range)";
        }
        const Error error = make_error(code, std::move(message));
        complete(*op, &error);
      }
      progressed = true;
      continue;
    }
    // A read that found nothing but took long did real work for a peer (shm copies the peer's data
    // inside our fi_cq_read); treat it as activity so a busy passive target does not back off.
    if (Clock::now() - start > std::chrono::microseconds(20)) progressed = true;
    return progressed;
  }
}

void Rail::complete(PostedOp& op, const Error* error) {
  op.batch->complete(options_.index, op.length, error);
}

void Rail::idle_wait(bool busy) {
  if (options_.mode == ProgressMode::Spin) return;
  // Right after activity more is likely on its way (the next segment of a stream, the next completion):
  // stay hot for a moment, yielding the core to anyone who needs it.
  if (Clock::now() - last_active_ < std::chrono::microseconds(100)) {
    sched_yield();
    return;
  }
  ++idle_rounds_;
  std::array<pollfd, 2> fds{pollfd{batches_.wake().fd(), POLLIN, 0}, pollfd{-1, POLLIN, 0}};
  timespec timeout{};
  if (options_.mode == ProgressMode::Fd && !busy) {
    // Idle (no activity for 100 us) with nothing of ours in flight: only a peer can give us work, and its
    // bytes arrive on the CQ's fd, so sleep there at no cost and wake as they come. fi_trywait says whether
    // that is safe (nothing already queued inside the provider). A flowing stream stays in the yield above:
    // waking per TCP segment costs more than draining the socket every few microseconds (measured: 4.2 vs
    // 5.5 GB/s). Before, this waited for 10 ms of idleness and slept in 1 ms steps meanwhile, so a small
    // write to a target idle for 0.1-10 ms waited up to 1 ms for it (p99 of one-op latency: 1 ms).
    fid* cq = &endpoint_->cq()->fid;
    if (fi_trywait(endpoint_->fabric(), &cq, 1) != FI_SUCCESS) return;
    fds[1].fd = endpoint_->wait_fd();
    timeout.tv_nsec = 100'000'000;
  } else {
    // Sleep 1, 2, 4 ... us: a passive target then drains the socket in batches; with our own ops in
    // flight the cap stays low so completions are not left waiting, and the socket may need only to
    // become writable, which the CQ fd does not signal.
    const std::uint32_t shift = std::min<std::uint32_t>(idle_rounds_, 16);
    const long cap_us = busy ? 50 : 1000;
    timeout.tv_nsec = std::min<long>(1L << shift, cap_us) * 1000;
    fds[1].fd = endpoint_->doorbell_fd();  // shm: a peer that posts to us rings it (doorbell.h)
  }
  if (ppoll(fds.data(), fds[1].fd >= 0 ? 2 : 1, &timeout, nullptr) > 0) {
    if ((fds[0].revents & POLLIN) != 0) batches_.wake().drain();
    if ((fds[1].revents & POLLIN) != 0 && fds[1].fd == endpoint_->doorbell_fd()) endpoint_->drain_doorbell();
    // A peer's bytes woke us: more are likely on their way (its next small op), so stay hot as after
    // activity of our own. A passive target finds nothing in its completion queue for a write it serves,
    // so before this it went back to sleep after each one and every small write paid a wake-up: a 4 KiB
    // tcp write 27 against 22 us p50, shm 20-28 against 7-9 us (docs/kv-cache.md).
    if ((fds[1].revents & POLLIN) != 0) last_active_ = Clock::now();
  }
}

}  // namespace conduit::fabric
