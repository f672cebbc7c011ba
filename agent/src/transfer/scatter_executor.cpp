#include "transfer/scatter_executor.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace conduit::agent {

using run::Failure;
using namespace std::chrono_literals;

namespace {

// Between looks at the batches in flight when none ended: how soon a stop is seen and progress reaches the
// transfer's status. A batch's end wakes the loop at once (BatchOptions::on_finished); looking every 20 us
// instead took the cores from the rails (1,000 scattered blocks: 1.0 against 1.7-2.1 GB/s).
constexpr auto kLook = 1ms;

}  // namespace

ScatterExecutor::ScatterExecutor(Done done) : done_(std::move(done)), thread_([this] { loop(); }) {}

ScatterExecutor::~ScatterExecutor() { stop(); }

// The batch goes on the wire from the caller's thread; the executor only watches it. Handing the launch to
// the executor's thread first cost a small request a thread wake-up before its first byte.
void ScatterExecutor::submit(std::shared_ptr<TransferRun> transfer) {
  {
    std::lock_guard lock(mu_);
    ++launching_;  // the loop does not end while a launch may still hand it a flight
  }
  const bool flying = launch(transfer);
  {
    std::lock_guard lock(mu_);
    --launching_;
    if (flying) queue_.push_back(std::move(transfer));
  }
  wakeup_->wake();
}

void ScatterExecutor::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wakeup_->wake();
  if (thread_.joinable()) thread_.join();
}

bool ScatterExecutor::launch(const std::shared_ptr<TransferRun>& transfer) const {
  TransferRun& t = *transfer;
  {
    std::lock_guard lock(t.mu);
    t.status.state = TransferState::Running;
    t.status.started_at = std::chrono::system_clock::now();
    t.started = run::SteadyClock::now();
  }
  if (auto why = t.stopped()) {
    {
      std::lock_guard lock(t.scatter.mu);
      t.scatter.settled = true;
    }
    done_(transfer, std::move(why));
    return false;
  }
  const RemoteKey& grant = t.request.grants[0];
  // Blocks that follow one another on both sides (a run of KV blocks) go as one write: each op is an RMA
  // operation of its own on the wire, and a small one costs about as much as a large one.
  // A strided op is its runs, each an RMA operation (the transport joins small neighbours into one message).
  std::vector<ScatterOp> runs;
  runs.reserve(t.request.wire.ops.size());
  for (const ScatterOp& op : t.request.wire.ops)
    op.for_each_run([&runs](std::uint64_t s, std::uint64_t d, std::uint64_t n) {
      runs.push_back({s, d, n});
    });
  std::sort(runs.begin(), runs.end(),
            [](const ScatterOp& a, const ScatterOp& b) { return a.target_offset < b.target_offset; });
  std::vector<Op> ops;
  ops.reserve(runs.size());
  for (const ScatterOp& op : runs) {
    Op* last = ops.empty() ? nullptr : &ops.back();
    if (last != nullptr && last->local_offset + last->length == op.source_offset &&
        last->remote_offset + last->length == op.target_offset) {
      last->length += op.length;
      continue;
    }
    ops.push_back(
        Op{t.request.wire.op, t.scatter_local.get(), op.source_offset, grant, op.target_offset, op.length});
  }
  // The batch's end wakes whoever waits on the transfer, who settles it (one wake-up fewer than through this
  // thread), or else this thread. A waiter that leaves settles once more after it stopped counting itself,
  // so an end it was woken for but missed is settled then; an end after that wakes this thread.
  std::unique_lock lock(t.scatter.mu);  // from before the batch can end: settle() finds it
  auto id = t.transports[0]->submit(ops, BatchOptions{t.request.wire.chunk_bytes, t.request.wire.window,
                                                      [end = t.batch_end, executor = wakeup_] {
                                                        if (end->waiters.load() > 0) {
                                                          end->waiter.wake();
                                                        } else {
                                                          executor->wake();
                                                        }
                                                      }});
  if (!id) {
    const char* why =
        id.error().code == ErrorCode::InvalidArgument ? reason::kRemoteAccessDenied : reason::kTransportError;
    t.scatter.settled = true;
    lock.unlock();
    done_(transfer, Failure{TransferState::Failed, why, "submitting the ops: " + id.error().message});
    return false;
  }
  t.scatter.batch = *id;
  return true;
}

bool ScatterExecutor::settle(const std::shared_ptr<TransferRun>& transfer) {
  TransferRun& t = *transfer;
  TransferRun::Scatter& f = t.scatter;
  std::unique_lock settling(f.mu);
  if (f.settled) return false;
  if (!f.batch) return true;  // not launched yet: its launch holds the lock, or settles it
  Transport& transport = *t.transports[0];
  if (!f.cancelling) {
    if (auto why = t.stopped()) {
      f.cancelling = true;
      f.why = std::move(why);
      (void)transport.cancel(*f.batch);  // NotFound: it finished meanwhile, and poll says how
    }
  }
  const BatchStatus s = transport.poll(*f.batch);
  {
    std::lock_guard lock(t.mu);
    t.status.bytes_done = s.bytes_done;
    t.status.targets[0].bytes_done = s.bytes_done;
    if (s.finished && !s.error) t.status.targets[0].committed_bytes = s.bytes_done;
  }
  if (!s.finished) return true;
  std::optional<Failure> failure;
  if (f.why) {
    failure = std::move(f.why);
  } else if (s.error) {
    // As a plain transfer says it: a key the target refuses is a grant gone (revoked or expired), not a
    // transport fault.
    std::string message = s.error->message;
    if (s.error->code == ErrorCode::RemoteAccess) {
      message = "the target refused the grant's key (revoked, expired or out of its range): " + message;
    }
    failure = Failure{TransferState::Failed, run::reason_for(s.error->code), std::move(message)};
  }
  {
    std::lock_guard lock(t.mu);
    // A verified one's target is Running until its sums were compared (TransferManager::check_scatter).
    if (failure || t.request.wire.verify == Verify::None)
      t.status.targets[0].state = failure ? failure->state : TransferState::Succeeded;
    if (failure) t.status.targets[0].last_error = failure->message;
  }
  f.settled = true;
  settling.unlock();  // done takes the transfer manager's lock; nothing here needs ours any more
  done_(transfer, std::move(failure));
  return false;
}

void ScatterExecutor::loop() {
  std::vector<std::shared_ptr<TransferRun>> flights;
  for (;;) {
    // With nothing in flight only submit() and stop() can matter, and they wake the loop.
    wakeup_->wait_for(flights.empty() ? std::chrono::microseconds(1h) : std::chrono::microseconds(kLook));
    {
      std::lock_guard lock(mu_);
      if (stopping_ && queue_.empty() && launching_ == 0 && flights.empty()) return;
      for (auto& f : queue_) flights.push_back(std::move(f));
      queue_.clear();
    }
    std::erase_if(flights, [this](const std::shared_ptr<TransferRun>& t) { return !settle(t); });
  }
}

}  // namespace conduit::agent
