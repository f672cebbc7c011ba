#include "transfer/manager.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <system_error>

#include "conduit/common/log.h"
#include "conduit/common/random.h"
#include "metrics/agent_metrics.h"
#include "path/rail_nics.h"
#include "tenancy.h"
#include "transfer/run.h"
#include "transfer/scatter.h"
#include "transfer/scatter_executor.h"
#include "transfer/scatter_verify.h"

namespace conduit::agent {

namespace {

std::string run_id_prefix() { return "t-" + random_hex(8) + "-"; }

// The targets' grants marked releaseGrant, revoked at their agents. Best effort: a target that does not
// answer keeps the grant until its TTL, which the log says. Short timeouts, as this holds up the end.
void release_grants(const ResolvedRequest& request, const std::string& id, api::ClientOptions peers) {
  peers.connect_timeout = peers.read_timeout = peers.write_timeout = std::chrono::seconds(2);
  for (const api::TransferTarget& t : request.wire.targets) {
    if (!t.release_grant) continue;
    const Status revoked = api::AgentClient(t.url, peers).revoke_grant(t.grant_id, request.wire.ns);
    if (!revoked && revoked.error().code != ErrorCode::NotFound) {
      log::warn(
          "transfer grant not released; it lasts until its ttl",
          {{"transfer", id}, {"grant", t.grant_id}, {"url", t.url}, {"error", revoked.error().message}});
    }
  }
}

}  // namespace

TransferManager::TransferManager(const TransportSet& transports, RegionStore& regions,
                                 const api::ClientOptions& peers, metrics::AgentMetrics* metrics,
                                 TransferOptions options)
    : transports_(transports),
      regions_(regions),
      peers_(peers),
      metrics_(metrics),
      options_(options),
      id_prefix_(run_id_prefix()),
      scatter_(std::make_unique<ScatterExecutor>(
          [this](const std::shared_ptr<TransferRun>& t, std::optional<run::Failure> failure) {
            if (!failure && t->request.wire.verify == Verify::Crc32c) {
              failure = check_scatter(t);
              if (!failure) return;  // its check's thread ends it
            }
            t->scatter_local.reset();
            t->release();
            finish(t, std::move(failure), /*threaded=*/false);
          })) {}

TransferManager::~TransferManager() { shutdown(); }

Result<std::string> TransferManager::start(ResolvedRequest request) {
  reap_threads();
  if (shutting_down_.load()) return make_error(ErrorCode::Unavailable, "agent is shutting down");
  if (!request.wire.ops.empty()) return start_scatter(std::move(request));
  RegionPtr region;
  std::optional<SourceFile> file;
  std::uint64_t size = 0;
  if (!request.wire.source_file.empty()) {
    auto opened = regions_.open_file(request.wire.source_file,
                                     file_namespace(request.wire.ns, options_.namespace_files));
    if (!opened) return opened.error();
    size = opened->bytes();
    file = std::move(*opened);
  } else {
    auto found = regions_.get(request.wire.source_region);
    if (!found) return found.error();
    region = std::move(*found);
    size = region->bytes();
    if (region->memory().kind() != MemoryKind::Host) {
      for (const api::TransferTarget& target : request.wire.targets) {
        if (target.save || target.ring_bytes > 0) {
          return make_error(ErrorCode::Unsupported,
                            "region " + request.wire.source_region + " is " + region->memory_label() +
                                " memory: a target that saves as bytes land is fed from host memory or a "
                                "file; save the target region after the transfer instead");
        }
      }
    }
  }
  const std::string source_name =
      file ? "file \"" + request.wire.source_file + "\"" : "region " + request.wire.source_region;
  const std::uint64_t length = request.wire.length != 0
                                   ? request.wire.length
                                   : (request.wire.offset < size ? size - request.wire.offset : 0);
  if (request.wire.offset > size || length == 0 || length > size - request.wire.offset) {
    return make_error(ErrorCode::InvalidArgument, "source range [" + std::to_string(request.wire.offset) +
                                                      ", +" + std::to_string(length) + ") is outside the " +
                                                      std::to_string(size) + "-byte " + source_name);
  }

  // A whole region with named tensors: its targets take its manifest with the write (a hop forwarding
  // what lands in its own region has the body's, or none: its region's may be the one being replaced).
  if (region && !request.wire.manifest && request.wire.follow_grant.empty() &&
      request.wire.op == OpKind::Write && request.wire.offset == 0 && length == size) {
    if (const auto manifest = region->manifest()) request.wire.manifest = *manifest;
  }

  auto t = std::make_shared<TransferRun>();
  for (std::size_t i = 0; i < request.wire.targets.size(); ++i) {
    const api::TransferTarget& target = request.wire.targets[i];
    const RemoteKey& grant = request.grants[i];
    const std::string path = "targets[" + std::to_string(i) + "]: ";
    Transport* transport = transports_.find(grant.provider);
    if (transport == nullptr) {
      return make_error(ErrorCode::InvalidArgument,
                        path + "no transport for provider " + grant.provider + " on this agent");
    }
    // A ring passes the stream through, a ring's worth at a time.
    const bool fits =
        target.ring_bytes > 0 || (target.offset <= grant.length && length <= grant.length - target.offset);
    if (!fits) {
      return make_error(ErrorCode::InvalidArgument, path + "range [" + std::to_string(target.offset) + ", +" +
                                                        std::to_string(length) + ") is outside the " +
                                                        std::to_string(grant.length) + "-byte grant");
    }
    if (grant.staged && (target.url.empty() || target.region.empty())) {
      return make_error(ErrorCode::InvalidArgument,
                        path +
                            "the grant is a staged CUDA range: url and region are needed so its agent can "
                            "copy each piece between its staging buffer and the device");
    }
    if (target.ring_bytes > 0 && target.ring_bytes < 2 * run::kMinRingSegment) {
      return make_error(ErrorCode::InvalidArgument, path + "ringBytes " + std::to_string(target.ring_bytes) +
                                                        " is below " +
                                                        std::to_string(2 * run::kMinRingSegment) +
                                                        ": a ring holds at least two segments");
    }
    if (file && grant.staged) {
      return make_error(ErrorCode::Unsupported,
                        path +
                            "the grant is a staged CUDA range, which a file source cannot feed; load the "
                            "file into a region first");
    }
    if (file && request.wire.verify == Verify::Crc32c && target.grant_id.empty()) {
      return make_error(ErrorCode::InvalidArgument,
                        path +
                            "grantId is required to verify a file source: its bytes are verified as they "
                            "land");
    }
    if (target.resume_offset > length) {
      return make_error(ErrorCode::InvalidArgument,
                        path + "resumeOffset " + std::to_string(target.resume_offset) + " is past the " +
                            std::to_string(length) + " bytes to move");
    }
    t->transports.push_back(transport);
  }
  for (Transport* transport : t->transports) t->wire[transport];
  t->length = length;
  t->created = run::SteadyClock::now();
  t->source = RegionUse(std::move(region));
  t->file = std::move(file);
  t->status.bytes_total = length * request.wire.targets.size();
  t->status.targets.resize(request.wire.targets.size());
  for (std::size_t i = 0; i < request.wire.targets.size(); ++i) {
    t->status.targets[i].staged = request.grants[i].staged;
    t->status.targets[i].bytes_done = request.wire.targets[i].resume_offset;
    t->status.targets[i].committed_bytes = request.wire.targets[i].resume_offset;
    t->status.bytes_done += request.wire.targets[i].resume_offset;
    t->resumed_bytes += request.wire.targets[i].resume_offset;
  }
  t->status.created_at = std::chrono::system_clock::now();
  t->request = std::move(request);
  return admit(t, source_name, /*threaded=*/true);
}

Result<std::string> TransferManager::start_scatter(ResolvedRequest request) {
  auto found = regions_.get(request.wire.source_region);
  if (!found) return found.error();
  RegionPtr region = std::move(*found);
  if (region->memory().kind() != MemoryKind::Host) {
    return make_error(ErrorCode::Unsupported, "ops: region " + request.wire.source_region + " is " +
                                                  region->memory_label() +
                                                  " memory; scatter-gather transfers use host memory");
  }
  const RemoteKey& grant = request.grants[0];
  Transport* transport = transports_.find(grant.provider);
  if (transport == nullptr) {
    return make_error(ErrorCode::InvalidArgument,
                      "targets[0]: no transport for provider " + grant.provider + " on this agent");
  }
  if (grant.staged) {
    return make_error(ErrorCode::Unsupported,
                      "targets[0]: the grant is a staged CUDA range; scatter-gather writes host memory");
  }
  if (auto ok = check_scatter_ops(request.wire.ops, request.wire.op, region->bytes(), grant.length); !ok) {
    return ok.error();
  }
  // Registered once per region and transport, then shared by every scatter transfer that uses it.
  bool registered = false;
  const auto t0 = run::SteadyClock::now();
  auto local = region->shared_registration(*transport, &registered);
  if (!local) return local.error();
  if (registered && metrics_ != nullptr)
    metrics_->observe_registration(run::seconds(run::SteadyClock::now() - t0));

  auto t = std::make_shared<TransferRun>();
  std::uint64_t total = 0;
  for (const ScatterOp& op : request.wire.ops) total += op.bytes();
  t->transports.push_back(transport);
  t->length = total;
  t->created = run::SteadyClock::now();
  t->source = RegionUse(std::move(region));
  t->scatter_local = std::move(*local);
  t->status.bytes_total = total;
  t->status.targets.resize(1);
  t->status.created_at = std::chrono::system_clock::now();
  const std::string source_name =
      "region " + request.wire.source_region + " (" + std::to_string(request.wire.ops.size()) + " ops)";
  t->request = std::move(request);
  return admit(t, source_name, /*threaded=*/false);
}

// On a thread of its own: the executor and the callers that settle batches never wait for a peer's answer,
// and the transfer shows its end only once its sums were compared.
std::optional<run::Failure> TransferManager::check_scatter(const std::shared_ptr<TransferRun>& t) {
  std::lock_guard lock(mu_);
  // Past the start of shutdown() no thread is added: it may have taken threads_ to join already.
  if (shutting_down_.load()) {
    return run::Failure{TransferState::Failed, reason::kAgentShuttingDown,
                        "the agent shut down before the ops' crc32c was compared"};
  }
  try {
    threads_.emplace_back([this, t] {
      const auto began = run::SteadyClock::now();
      std::optional<run::Failure> failure = t->stopped();
      if (!failure) failure = verify_scatter(*t, peers_);
      {
        std::lock_guard transfer_lock(t->mu);
        t->status.stages.land += run::seconds(run::SteadyClock::now() - began);
        t->status.verified = !failure;
        t->status.targets[0].state = failure ? failure->state : TransferState::Succeeded;
        if (failure) t->status.targets[0].last_error = failure->message;
      }
      t->scatter_local.reset();
      t->release();
      finish(t, std::move(failure), /*threaded=*/true);
    });
  } catch (const std::system_error& e) {
    return run::Failure{TransferState::Failed, reason::kTransportError,
                        std::string("cannot start the thread that compares the ops' crc32c: ") + e.what()};
  }
  return std::nullopt;
}

Result<std::string> TransferManager::admit(const std::shared_ptr<TransferRun>& t,
                                           const std::string& source_name, bool threaded) {
  std::string id;
  std::size_t running = 0;
  {
    std::lock_guard lock(mu_);
    if (shutting_down_.load()) return make_error(ErrorCode::Unavailable, "agent is shutting down");
    t->seq = next_id_++;
    id = id_prefix_ + std::to_string(t->seq);
    t->status.id = id;
    t->status.requested_by = t->request.requested_by;
    t->status.job_namespace = t->request.wire.ns;
    if (threaded) {
      try {
        threads_.emplace_back([this, t] { run(t); });
      } catch (const std::system_error& e) {
        return make_error(ErrorCode::ResourceExhausted,
                          std::string("cannot start a transfer thread: ") + e.what());
      }
    }
    transfers_.emplace(id, t);
    running = ++running_;
  }
  // Before the submit: a scatter transfer refused at once finishes inside it and sets the gauge again.
  if (metrics_ != nullptr) metrics_->set_active_transfers(static_cast<double>(running));
  if (!threaded) scatter_->submit(t);
  // A scatter-gather transfer may be one of thousands a second: debug, not info.
  const log::Fields fields{{"transfer", id},
                           {"source", source_name},
                           {"bytes", std::to_string(t->status.bytes_total)},
                           {"targets", std::to_string(t->request.wire.targets.size())}};
  if (threaded) {
    log::info("transfer started", fields);
  } else {
    log::debug("transfer started", fields);
  }
  return id;
}

void TransferManager::run(const std::shared_ptr<TransferRun>& t) {
  const run::Context context{transports_, peers_, metrics_, options_, regions_, shutdown_deadline_};
  // The NICs of every rail its transports have, sampled before its first byte (path/prover.h).
  std::vector<std::pair<const Transport*, path::RailNics>> rails;
  path::Prover::Window window;
  if (prover_) {
    std::vector<NicRef> nics;
    std::string why_none;
    for (const auto& [transport, _] : t->wire) {
      path::RailNics r = path::rail_nics(*transport);
      for (const auto& nic : r.per_rail) {
        if (nic && std::find(nics.begin(), nics.end(), *nic) == nics.end()) nics.push_back(*nic);
      }
      if (why_none.empty()) why_none = r.why_none;
      rails.emplace_back(transport, std::move(r));
    }
    window = prover_->begin(nics, why_none);
  }
  std::optional<run::Failure> failure = t->execute(context);
  // Every error and stop path funnels through here, so releasing happens once, before the end state is
  // visible: whoever sees a finished transfer may delete its region at once. execute() cancelled and
  // waited out any batch still in flight, so nothing uses the registrations any more.
  t->release();
  if (prover_) {
    std::vector<path::Planned> planned;
    {
      std::lock_guard lock(t->mu);
      for (const auto& [transport, r] : rails) {
        const TransferRun::Wire& w = t->wire.at(transport);
        path::add_planned(planned, r, w.rails, w.bytes.load(std::memory_order_relaxed));
      }
    }
    api::TransferPath proof = prover_->end(std::move(window), t->request.wire.op, planned);
    if (proof.verdict != api::path_verdict::kMatched && proof.verdict != api::path_verdict::kNotApplicable) {
      log::warn("transfer path mismatch",
                {{"transfer", t->status.id}, {"verdict", proof.verdict}, {"detail", proof.message}});
    }
    std::lock_guard lock(t->mu);
    t->status.path = std::move(proof);
  }
  finish(t, std::move(failure), /*threaded=*/true);
}

void TransferManager::finish(const std::shared_ptr<TransferRun>& t, std::optional<run::Failure> failure,
                             bool threaded) {
  // Before the end shows: whoever sees it may delete the target regions at once.
  release_grants(t->request, t->status.id, peers_);
  TransferStatus final_status;
  double duration = 0;
  std::size_t running = 0;
  {
    // Both locks: a caller never sees the end state while active() still counts the transfer.
    std::lock_guard lock(mu_);
    {
      std::lock_guard transfer_lock(t->mu);
      t->finished = run::SteadyClock::now();
      if (t->status.started_at) duration = run::seconds(t->finished - t->started);
      t->status.finished_at = std::chrono::system_clock::now();
      if (failure) {
        t->status.state = failure->state;
        t->status.reason = failure->reason;
        t->status.message = failure->message;
      } else {
        t->status.state = TransferState::Succeeded;
      }
      final_status = t->status;
    }
    running = --running_;
    if (threaded) exited_.push_back(std::this_thread::get_id());
    // Drop the oldest finished transfers beyond the history (see TransferOptions); running ones always stay.
    // finished_ keeps them in start order, so this is a few map steps, not a sort of every transfer kept
    // (with thousands kept, that sort under mu_ held up every other request).
    finished_.emplace(t->seq, final_status.id);
    const auto old_before = std::chrono::system_clock::now() - options_.history_min_age;
    while (finished_.size() > options_.history) {
      const auto oldest = finished_.begin();
      const auto it = transfers_.find(oldest->second);
      const auto& finished = it->second->status.finished_at;
      const bool young = finished && *finished > old_before;
      if (young && finished_.size() <= options_.history_max) break;  // the rest are younger still
      transfers_.erase(it);
      finished_.erase(oldest);
    }
  }
  exited_cv_.notify_all();
  ended_cv_.notify_all();
  t->batch_end->waiter.wake();  // a scatter transfer's waiters (wait()) sleep there

  if (metrics_ != nullptr) {
    const char* result = final_status.state == TransferState::Succeeded   ? "succeeded"
                         : final_status.state == TransferState::Cancelled ? "cancelled"
                                                                          : "failed";
    metrics_->transfer_finished(result, duration);
    if (final_status.state == TransferState::Failed) metrics_->error(final_status.reason);
    metrics_->set_active_transfers(static_cast<double>(running));
  }
  log::Fields fields{{"transfer", final_status.id},
                     {"state", std::string(to_string(final_status.state))},
                     {"bytes", std::to_string(final_status.bytes_done)},
                     {"seconds", std::to_string(duration)}};
  if (failure) {
    fields.emplace_back("reason", final_status.reason);
    fields.emplace_back("error", final_status.message);
  }
  if (final_status.state == TransferState::Succeeded) {
    if (threaded) {
      log::info("transfer finished", fields);
    } else {
      log::debug("transfer finished", fields);
    }
  } else {
    log::warn("transfer finished", fields);
  }
}

void TransferManager::reap_threads() {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (std::find(exited_.begin(), exited_.end(), it->get_id()) != exited_.end()) {
        std::erase(exited_, it->get_id());
        done.push_back(std::move(*it));
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // The worker has only its last few instructions left; joining is immediate.
  for (std::thread& th : done) th.join();
}

Result<TransferStatus> TransferManager::get(const std::string& id) const {
  std::shared_ptr<TransferRun> t;
  {
    std::lock_guard lock(mu_);
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return make_error(ErrorCode::NotFound, "no transfer " + id);
    t = it->second;
  }
  return t->snapshot();
}

Result<TransferStatus> TransferManager::wait(const std::string& id, std::chrono::milliseconds wait) const {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mu_);
  if (auto it = transfers_.find(id); it != transfers_.end() && !it->second->request.wire.ops.empty()) {
    // A scatter-gather transfer: its batch's end wakes this thread, which settles it here. Settled by
    // another thread, it may not show its end yet: finish() wakes this thread once it does.
    const std::shared_ptr<TransferRun> t = it->second;
    lock.unlock();
    auto ended = [&t] {
      std::lock_guard transfer_lock(t->mu);
      return agent::ended(t->status.state);
    };
    TransferRun::BatchEnd& end = *t->batch_end;
    ++end.waiters;
    for (;;) {
      if (!scatter_->settle(t) && ended()) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) break;
      end.waiter.wait_for(until - now);
    }
    --end.waiters;
    (void)scatter_->settle(t);  // an end that came after the last look, and woke only this thread
    // The end wakes one waiter: each passes it on to the next (several callers may wait on one transfer).
    if (ended()) end.waiter.wake();
    return t->snapshot();
  }
  for (bool last = false;; last = ended_cv_.wait_until(lock, until) == std::cv_status::timeout) {
    // Found again after every wake: the history may have dropped it meanwhile.
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return make_error(ErrorCode::NotFound, "no transfer " + id);
    TransferStatus s = it->second->snapshot();
    if (last || ended(s.state)) return s;
  }
}

std::vector<TransferStatus> TransferManager::list() const {
  std::vector<std::shared_ptr<TransferRun>> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& [_, t] : transfers_) all.push_back(t);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a->seq > b->seq; });
  std::vector<TransferStatus> out;
  out.reserve(all.size());
  for (const auto& t : all) out.push_back(t->snapshot());
  return out;
}

Status TransferManager::cancel(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return make_error(ErrorCode::NotFound, "no transfer " + id);
  int expected = run::kRun;
  it->second->stop.compare_exchange_strong(expected, run::kCancel);
  return {};
}

std::size_t TransferManager::active() const {
  std::lock_guard lock(mu_);
  return running_;
}

void TransferManager::shutdown(std::chrono::milliseconds grace) {
  const auto deadline = run::SteadyClock::now() + grace;
  {
    std::lock_guard lock(mu_);
    shutting_down_.store(true);
    shutdown_deadline_.store(deadline.time_since_epoch().count());
    for (const auto& [_, t] : transfers_) {
      int expected = run::kRun;
      t->stop.compare_exchange_strong(expected, run::kShutdown);
    }
  }
  {
    std::unique_lock lock(mu_);
    exited_cv_.wait_until(lock, deadline, [this] { return running_ == 0; });
  }
  // Past the grace workers stop waiting for their cancelled batches (shutdown_deadline_), so these joins
  // are short even then.
  std::vector<std::thread> all;
  {
    std::lock_guard lock(mu_);
    all.swap(threads_);
    exited_.clear();
  }
  for (std::thread& th : all) th.join();
  scatter_->stop();
}

}  // namespace conduit::agent
