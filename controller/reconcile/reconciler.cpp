#include "reconciler.h"

#include <thread>

#include "conduit/common/log.h"
#include "job_status.h"
#include "pass.h"
#include "pods.h"

namespace conduit::controller {

using json = nlohmann::json;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

// The longest a look at a transfer near its end waits at the agent for it.
constexpr std::chrono::seconds kEndWait{1};
// A transfer of at most this many bytes (all targets) is waited for as it starts: at 1 Gbit/s it takes
// 0.13 s, well within kEndWait.
constexpr std::uint64_t kWaitedAtStart = 16u << 20;

Reconciler::Reconciler(ObjectStore& store, AgentApi& agents, Clock clock, ReconcilerOptions options)
    : store_(store),
      agents_(agents),
      clock_(std::move(clock)),
      options_(std::move(options)),
      watcher_(agents_, options_.watcher) {}

std::string temporary_region_name(const json& job) {
  const json& meta = job.value("metadata", json::object());
  const std::string name = meta.value("name", "");
  const std::string identity = meta.value("namespace", "") + "/" + name + "/" + meta.value("uid", "");
  std::uint32_t hash = 2166136261u;  // FNV-1a: stable across processes, unlike std::hash
  for (const char c : identity) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  std::string base;
  for (const char c : name.substr(0, 40)) base += (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? c : '-';
  while (!base.empty() && base.back() == '-') base.pop_back();
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "-%08x", hash);
  return "tj-" + base + suffix;
}

namespace {

// The agent's transfer names only the targets this attempt sent to (run.sent, in its order); the job speaks
// of every target, and one that landed in an earlier attempt has every byte.
void widen(api::TransferStatus& t, const RunState& run, std::size_t targets) {
  if (run.sent.empty() && run.landed.empty()) return;
  std::vector<api::TransferStatus::Target> all(targets);
  for (std::size_t j = 0; j < t.targets.size(); ++j) {
    const std::size_t i = run.sent.empty() ? j : j < run.sent.size() ? run.sent[j] : targets;
    if (i < targets) all[i] = std::move(t.targets[j]);
  }
  for (std::size_t i = 0; i < targets; ++i) {
    if (!run.target_landed(i)) continue;
    all[i] = api::TransferStatus::Target{.state = "Succeeded",
                                         .bytes_done = run.length,
                                         .last_error = "",
                                         .committed_bytes = run.length,
                                         .staged = false};
    t.bytes_done += run.length;
    t.bytes_total += run.length;
  }
  t.targets = std::move(all);
}

std::optional<TimePoint> time_field(const json& status, const char* key) {
  if (!status.contains(key) || !status[key].is_string()) return std::nullopt;
  return parse_rfc3339(status[key].get<std::string>());
}

// The status-derived part of the view; refreshed after every step of a pass.
void refresh_view(JobView& view, const json& job, const json& status) {
  const json& meta = job.value("metadata", json::object());
  view.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  view.has_finalizer = has_finalizer(job);
  view.phase = status.value("phase", "");
  view.start_time = time_field(status, "startTime");
  view.completion_time = time_field(status, "completionTime");
  view.retries = status.value("retries", 0U);
  view.waiting = waiting_of(status);
}

}  // namespace

std::optional<milliseconds> Reconciler::reconcile(const ObjectKey& key, Error* error) {
  if (error != nullptr) *error = Error::None;
  auto got = store_.get_job(key);
  if (!got) {
    if (got.error().code == ErrorCode::NotFound) {
      forget(key);
      return std::nullopt;
    }
    log::warn("reading job failed", {{"job", key.ns + "/" + key.name}, {"error", got.error().message}});
    if (error != nullptr) *error = Error::StoreRead;
    return 1s;
  }
  Pass p(key, std::move(*got), memory_for(key), clock_());
  p.stored_status =
      p.job.contains("status") && p.job["status"].is_object() ? p.job["status"] : json::object();
  p.status = p.stored_status;
  p.stored_run = RunState::from_job(p.job);
  p.run = p.stored_run;
  p.generation = p.job.value("metadata", json::object()).value("generation", std::int64_t{0});
  auto spec = TransferJobSpec::parse(p.job.value("spec", json()));
  if (spec && spec->selects_pods() && options_.pods == nullptr) {
    spec =
        make_error(ErrorCode::Unsupported,
                   "podSelector needs conduit-controller in Kubernetes mode (local mode has no pods); name "
                   "the node instead");
  } else if (spec && spec->selects_pods() && !p.run.pods.empty()) {
    spec = with_pods(*spec, p.run.pods);  // the pods its first attempt picked
  }
  if (spec) {
    p.view.spec = std::move(*spec);
  } else {
    p.view.spec_reason =
        spec.error().code == ErrorCode::Unsupported ? reason::kUnsupported : reason::kInvalidSpec;
    p.view.spec_error = spec.error().message;
  }
  refresh_view(p.view, p.job, p.status);

  // A few steps may follow one another at once (resume, then start); bounded so a bug cannot spin.
  for (int i = 0; i < 4; ++i) {
    const bool look = p.run.transfer && !p.view.deleting && !is_terminal_phase(p.view.phase) && p.view.spec &&
                      !p.spec().suspend;
    p.seen = look ? observe(p) : Observation{};
    if (options_.may_act && !options_.may_act()) {
      if (error != nullptr) *error = Error::StoreRead;
      return 1s;
    }
    const Step step =
        decide(p.view, p.run, p.seen, p.now, {options_.poll_interval, options_.unreachable_grace});
    log::debug("step",
               {{"job", p.job_name()}, {"step", std::string(to_string(step.kind))}, {"phase", p.view.phase}});
    p.wait = step.wait;
    const bool again = run_step(p, step);
    if (p.store_error) {
      if (error != nullptr) *error = Error::StoreWrite;
      return 1s;
    }
    if (!again) break;
    refresh_view(p.view, p.job, p.status);
  }
  // No transfer of the job's left to hear the end of (finished, released, or the job is going).
  if (!p.run.transfer || p.forget || p.view.deleting || is_terminal_phase(p.status.value("phase", ""))) {
    watcher_.unwatch(key);
  }
  if (p.forget) {
    forget(key);
    return std::nullopt;
  }
  if (!p.skip_flush && !flush(p)) {
    if (error != nullptr) *error = Error::StoreWrite;
    return 1s;
  }
  return p.wait;
}

bool Reconciler::watch_end(const Pass& p) {
  if (!p.run.transfer) return false;
  return watcher_.watch(p.key, {p.run.transfer->node, p.run.transfer->name, p.key.ns});
}

Observation Reconciler::observe(Pass& p) {
  Observation o;
  const NodeRef& t = *p.run.transfer;
  // Near its end the look waits for it at the agent (a long-poll), so Succeeded reaches status when the
  // agent is done, not up to a poll later. It holds this worker for at most kEndWait.
  auto r = p.memory.ending ? agents_.wait_transfer(t.node, t.name, kEndWait, p.key.ns)
                           : agents_.get_transfer(t.node, t.name, p.key.ns);
  if (p.memory.ending) p.now = clock_();  // completionTime is when the end was seen
  if (r) {
    p.memory.unreachable_since.reset();
    o.kind = Observation::Kind::Answered;
    o.transfer = std::move(*r);
    widen(o.transfer, p.run, p.spec().targets.size());
    return o;
  }
  if (r.error().code == ErrorCode::NotFound && agents_.url(t.node)) {
    o.kind = Observation::Kind::Lost;
    o.error = "the agent on node \"" + t.node + "\" no longer knows transfer " + t.name +
              " (did it restart?): " + r.error().message;
    return o;
  }
  if (!p.memory.unreachable_since) p.memory.unreachable_since = p.now;
  o.kind = Observation::Kind::Unreachable;
  o.error = r.error().message;
  o.unreachable_for = std::chrono::duration_cast<milliseconds>(p.now - *p.memory.unreachable_since);
  return o;
}

bool Reconciler::run_step(Pass& p, const Step& step) {
  switch (step.kind) {
    case StepKind::Idle:
    case StepKind::WaitBackoff:
    case StepKind::WaitForAgent:
      return false;
    case StepKind::Finalize: {
      release(p, /*drop_source=*/true);
      if (p.view.phase != phase::kSucceeded) drop_created_targets(p);
      json rest = json::array();
      for (const auto& f : p.job["metadata"].value("finalizers", json::array())) {
        if (f != kFinalizer) rest.push_back(f);
      }
      auto r = store_.patch_job_metadata(p.key, {{"finalizers", rest.empty() ? json() : rest}});
      if (!r && r.error().code != ErrorCode::NotFound) {
        p.store_error = true;
        return false;
      }
      log::info("job deleted: transfer cancelled, grants revoked", {{"job", p.job_name()}});
      p.skip_flush = true;
      p.forget = true;
      return false;
    }
    case StepKind::DeleteExpired: {
      if (!flush(p)) return false;
      log::info("ttlSecondsAfterFinished passed: deleting the job", {{"job", p.job_name()}});
      if (const auto s = store_.delete_job(p.key); !s && s.error().code != ErrorCode::NotFound) {
        p.store_error = true;
      }
      p.skip_flush = true;
      return false;
    }
    case StepKind::Fail:
      fail(p, step.reason, step.message);
      return true;  // the TTL may be due at once
    case StepKind::Suspend: {
      release(p, /*drop_source=*/false);
      p.status["phase"] = phase::kSuspended;
      p.status["throughputBytesPerSecond"] = 0;
      p.status["throughput"] = "";
      set_condition(p.status, "Suspended", true, "JobSuspended",
                    "spec.suspend is true; the transfer is stopped", p.now, p.generation);
      if (find_condition(p.status, "Running")) {
        set_condition(p.status, "Running", false, "Suspended", "the job is suspended", p.now, p.generation);
      }
      store_.record_event(p.key, "Normal", "Suspended", "job suspended");
      log::info("job suspended", {{"job", p.job_name()}});
      return false;
    }
    case StepKind::Resume:
      p.status["phase"] = phase::kPending;
      // As batch/v1 Job: activeDeadlineSeconds counts from the resume, not from the first start.
      p.status.erase("startTime");
      set_condition(p.status, "Suspended", false, "JobResumed", "spec.suspend is false again", p.now,
                    p.generation);
      store_.record_event(p.key, "Normal", "Resumed", "job resumed");
      log::info("job resumed", {{"job", p.job_name()}});
      return true;
    case StepKind::Fence:
      log::warn("an earlier start left grants without a transfer: revoking them before starting again",
                {{"job", p.job_name()}});
      release(p, /*drop_source=*/false);
      if (!save_run(p)) return false;
      return true;
    case StepKind::StartAttempt: {
      if (p.spec().selects_pods()) {
        if (const auto stop = pick_pods(p)) return *stop;
      }
      const Preflight check = check_nodes(p, /*ask_all=*/false);
      if (check.verdict == Preflight::Verdict::Fail) {
        fail(p, check.reason, check.message);
        return true;
      }
      if (check.verdict == Preflight::Verdict::Wait) {
        hold(p, {check.reason, check.message});
        return false;
      }
      p.transport = check.transport;
      p.fallback = check.fallback;
      p.memory.ending = false;
      p.memory.attempt_started = p.now;
      const auto error = start_attempt(p);
      if (p.store_error) {
        release(p, /*drop_source=*/false);
        save_run(p);
        p.store_error = true;
        return false;
      }
      if (error && error->reason == reason::kPeerUnreachable) {
        // A node stopped answering since its facts were learnt: wait for it, as the pre-flight would have.
        if (const Preflight again = check_nodes(p, /*ask_all=*/true);
            again.verdict == Preflight::Verdict::Wait) {
          release(p, /*drop_source=*/false);
          hold(p, {again.reason, again.message});
          return false;
        }
      }
      if (error) {
        const Step next = error->permanent
                              ? Step{StepKind::Fail, error->reason, error->message, std::nullopt}
                              : retry_or_fail(p.spec(), p.view.retries, error->reason, error->message);
        p.wait = next.wait;
        if (next.kind == StepKind::Retry) {
          retry(p, next);
          return false;
        }
        fail(p, next.reason, next.message);
        return true;
      }
      // No rate to go by yet: a short first look, so a small job's end is seen soon (next_look).
      p.wait = std::min(options_.poll_interval, 100ms);
      // A small transfer is waited for at its agent in this same pass (a long-poll of at most kEndWait): it
      // usually ends within milliseconds, and its job then writes status once (Succeeded) instead of twice
      // (Running, then Succeeded a look later). With many small jobs at once the apiserver's writes are
      // what bounds the rate (bench/controller_bench.py).
      const std::uint64_t bytes = p.run.length * p.spec().targets.size();
      const std::uint64_t rate = p.spec().max_bytes_per_second;  // a paced job's own pace says how long
      if (bytes <= kWaitedAtStart && (rate == 0 || bytes < rate)) {
        p.memory.ending = true;
        return true;
      }
      // A longer one's end is heard by the watcher's long-poll, off the workers, when it happens.
      watch_end(p);
      return false;
    }
    case StepKind::Track: {
      if (p.run.reshard) {
        track_reshard(p);
        return is_terminal_phase(p.status.value("phase", ""));  // the TTL may be due at once
      }
      // Watched, the end reaches the queue when it happens; otherwise a look near the end waits for it here.
      const bool answered = p.seen.kind == Observation::Kind::Answered;
      const bool watched = answered && watch_end(p);
      p.memory.ending = !watched && answered && ends_within(p.seen.transfer, kEndWait);
      if (p.seen.kind == Observation::Kind::Answered) {
        track(p, p.seen.transfer);
        // Queued moments after we started it: the agent starts it any moment now (a look that our own
        // status write triggered often finds it so); a poll interval would add up to that much to the job.
        if (p.seen.transfer.state == "Queued" && p.memory.attempt_started &&
            p.now - *p.memory.attempt_started < 1s)
          p.wait = std::min(p.wait.value_or(options_.poll_interval), milliseconds(100));
      }
      // Due to end within the long-poll's reach: the next look is that long-poll, so it goes out now. At
      // the rate's estimate instead (up to a poll interval), an early, low rate (1.6 GB/s after the first
      // 3 MiB of a 4 GB/s gigabyte) put the look 0.5 s out and the job's end was seen 0.25 s late.
      if (p.memory.ending) p.wait = std::min(p.wait.value_or(options_.poll_interval), milliseconds(10));
      return false;
    }
    case StepKind::Complete:
      complete(p, p.seen.transfer);
      return is_terminal_phase(p.status.value("phase", ""));
    case StepKind::Retry:
      retry(p, step);
      return false;
  }
  return false;
}

}  // namespace conduit::controller
