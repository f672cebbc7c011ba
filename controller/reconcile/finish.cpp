// Ending an attempt (succeeded, failed, retried, suspended, deleted) and writing what the pass learnt.
#include <thread>

#include "conduit/common/log.h"
#include "in_parallel.h"
#include "job_status.h"
#include "pass.h"

namespace conduit::controller {

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string target_state(const api::TransferStatus::Target& t, std::uint64_t length, bool verify) {
  if (t.state == "Queued") return "Pending";
  if (t.state == "Running") return verify && length > 0 && t.bytes_done >= length ? "Verifying" : "Running";
  if (t.state == "Cancelled") return "Failed";
  return t.state;  // Succeeded, Failed
}

bool is_validation_reason(const std::string& r) {
  return r == reason::kInvalidSpec || r == reason::kUnsupported || r == reason::kNodeNotFound ||
         r == reason::kRegionNotFound || r == reason::kSourceFileNotFound || r == reason::kSizeMismatch ||
         r == reason::kRegionAlreadyExists;
}

std::string seconds_text(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

}  // namespace

void Reconciler::track(Pass& p, const api::TransferStatus& t) {
  const auto& spec = p.spec();
  const std::uint64_t total = t.bytes_total > 0 ? t.bytes_total : p.run.length * spec.targets.size();
  p.status["bytesTotal"] = total;
  p.status["bytesTransferred"] = t.bytes_done;
  p.status["progress"] = format_progress(t.bytes_done, total);
  p.status["throughputBytesPerSecond"] = t.finished() ? 0.0 : t.throughput;
  p.status["throughput"] = t.finished() ? "" : format_throughput(t.throughput);
  set_stages(p.status, t);
  // The source agent's proof of path for this attempt's transfer (docs/path.md), once it judged it.
  if (t.path) p.status["path"] = path_status(*t.path);
  json targets = json::array();
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    json entry = target_entry(spec.targets[i]);
    if (i < p.run.transports.size() && !p.run.transports[i].empty()) entry["transport"] = p.run.transports[i];
    if (i < t.targets.size()) {
      entry["state"] = target_state(t.targets[i], p.run.length, spec.verify);
      entry["bytes"] = t.targets[i].bytes_done;
      if (!t.targets[i].last_error.empty()) entry["lastError"] = t.targets[i].last_error.substr(0, 4096);
      set_gpu_path(entry, t, i);
    } else {
      entry["state"] = t.finished() ? t.state : "Running";
    }
    entry["verified"] = spec.verify && t.state == "Succeeded" && t.verified;
    targets.push_back(std::move(entry));
  }
  // A staged run succeeds but at host-copy speed: say so once, as a Warning Event (what `kubectl describe`
  // and `kubectl get events --field-selector type=Warning` show), when the status first records it.
  if (const std::string staged = staged_summary(t, spec);
      !staged.empty() && !status_shows_staged(p.stored_status) && !status_shows_staged(p.status)) {
    store_.record_event(p.key, "Warning", "StagedGpuPath", staged);
    log::warn("GPU memory staged through host memory", {{"job", p.job_name()}, {"detail", staged}});
  }
  // One event per target of a many-target job as it gets every byte, while the others are still moving:
  // `kubectl describe` / `get events` then say how far a Chain is, hop by hop. Status changes of targets are
  // written at once (is_transition), so the stored status tells whether it was said already.
  if (spec.targets.size() > 1 && !t.finished()) {
    const json& before = p.stored_status.value("targets", json::array());
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].value("state", "") != "Succeeded") continue;
      if (i < before.size() && before[i].is_object() && before[i].value("state", "") == "Succeeded") continue;
      const std::string what = spec.strategy == Strategy::Chain ? "hop" : "target";
      store_.record_event(p.key, "Normal", "TargetSucceeded",
                          spec.targets[i].node + "/" + spec.targets[i].region + " has every byte (" + what +
                              " " + std::to_string(i + 1) + " of " + std::to_string(spec.targets.size()) +
                              ")");
    }
  }
  p.status["targets"] = std::move(targets);
  // How far each target is, in spec order ("100%,64%,31%": for a Chain, hop by hop), for `kubectl get -o
  // wide`: the apiserver's printer columns show only the first value of a list.
  std::string each;
  for (std::size_t i = 0; i < t.targets.size(); ++i) {
    each += (i > 0 ? "," : "") + format_progress(t.targets[i].bytes_done, p.run.length);
  }
  p.status["targetProgress"] = each;
  p.memory.committed.clear();
  for (const auto& target : t.targets) {
    p.memory.committed.push_back(target.state == "Succeeded" ? p.run.length : target.committed_bytes);
  }

  if (!p.memory.last_progress_log || p.now - *p.memory.last_progress_log >= 1s) {
    p.memory.last_progress_log = p.now;
    log::info("progress", {{"job", p.job_name()},
                           {"state", t.state},
                           {"progress", format_progress(t.bytes_done, total)},
                           {"bytes", std::to_string(t.bytes_done)},
                           {"total", std::to_string(total)},
                           {"throughput", format_throughput(t.throughput)}});
  }
}

void Reconciler::complete(Pass& p, const api::TransferStatus& t) {
  // Before the grant goes: the commit is made through it.
  if (auto error = commit_subset(p)) {
    if (error->permanent) return fail(p, error->reason, error->message);
    // Every byte is in and verified; only the version waits for an agent that does not answer now (the
    // job's deadline bounds it).
    log::warn("committing the subset's target failed; trying again",
              {{"job", p.job_name()}, {"reason", error->reason}, {"message", error->message}});
    p.wait = options_.poll_interval;
    return;
  }
  // Revoke first: nothing may write into a target while it is saved or used.
  release(p, /*drop_source=*/false);
  if (auto error = save_files(p)) {
    const Step next = retry_or_fail(p.spec(), p.view.retries, error->reason, error->message);
    if (next.kind == StepKind::Retry) {
      retry(p, next);
    } else {
      fail(p, next.reason, next.message);
    }
    p.wait = next.wait;
    return;
  }
  release(p, /*drop_source=*/true);
  track(p, t);
  const auto& spec = p.spec();
  std::string each;
  for (auto& entry : p.status["targets"]) {
    entry["state"] = "Succeeded";
    each += each.empty() ? "100%" : ",100%";
  }
  p.status["targetProgress"] = each;
  p.status["phase"] = phase::kSucceeded;
  p.status["completionTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["bytesTransferred"] = p.status.value("bytesTotal", std::uint64_t{0});
  p.status["progress"] = "100%";
  // A finished job keeps the rate of the whole job, from startTime to now: "how long did I wait" is the
  // question afterwards, and the wire's rate alone would flatter a job that spent its time reading.
  const auto started = parse_rfc3339(p.status.value("startTime", ""));
  const double waited = started ? std::chrono::duration<double>(p.now - *started).count() : 0;
  const double total = static_cast<double>(p.run.length) * static_cast<double>(spec.targets.size());
  const double rate = waited > 0 ? total / waited : t.throughput;
  p.status["throughputBytesPerSecond"] = rate;
  p.status["throughput"] = format_throughput(rate);
  const std::string message = "moved " + std::to_string(p.run.length) + " bytes to " +
                              std::to_string(spec.targets.size()) + " target" +
                              (spec.targets.size() == 1 ? "" : "s") +
                              (spec.verify ? (t.verified ? ", verified crc32c" : ", NOT verified") : "") +
                              " at " + format_throughput(rate) + " end to end" +
                              (p.status.contains("slowestStage")
                                   ? " (slowest stage: " + p.status["slowestStage"].get<std::string>() + ")"
                                   : "");
  // The condition that reports the outcome says how it was reached too: a staged run is a success that
  // ran at host-copy speed, and `kubectl wait`/`describe` readers should not have to find an Event.
  const std::string staged = staged_summary(t, spec);
  const std::string condition_message = staged.empty() ? message : message + "; " + staged;
  set_condition(p.status, "Complete", true, "TransferSucceeded", condition_message, p.now, p.generation);
  set_condition(p.status, "Running", false, "Completed", "the transfer finished", p.now, p.generation);
  store_.record_event(p.key, "Normal", "Succeeded", condition_message);
  log::info("job succeeded", {{"job", p.job_name()}, {"detail", condition_message}});
}

void Reconciler::note_landed(Pass& p) {
  if (p.seen.kind != Observation::Kind::Answered) return;
  const auto& targets = p.seen.transfer.targets;  // widened: in spec order
  p.run.landed.resize(p.spec().targets.size(), false);
  for (std::size_t i = 0; i < targets.size() && i < p.run.landed.size(); ++i) {
    if (targets[i].state == "Succeeded") p.run.landed[i] = true;
  }
}

void Reconciler::fail(Pass& p, const std::string& r, const std::string& message_in) {
  std::string message = message_in;
  if (p.view.spec) {
    if (p.seen.kind == Observation::Kind::Answered) track(p, p.seen.transfer);
    note_landed(p);
    // A Fanout that reached some targets says which: their bytes (and the regions the job created for
    // them) stay.
    const auto& targets = p.spec().targets;
    std::string landed, failed;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      std::string& list = p.run.target_landed(i) ? landed : failed;
      list += (list.empty() ? "" : ", ") + targets[i].node + "/" +
              (targets[i].region.empty() ? targets[i].file : targets[i].region);
    }
    if (targets.size() > 1 && !landed.empty())
      message += "; targets with every byte: " + landed + "; failed: " + failed;
  }
  release(p, /*drop_source=*/true);
  drop_created_targets(p);
  p.status["phase"] = phase::kFailed;
  p.status["completionTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["throughputBytesPerSecond"] = 0;
  p.status["throughput"] = "";
  if (is_validation_reason(r)) set_condition(p.status, "Accepted", false, r, message, p.now, p.generation);
  set_condition(p.status, "Failed", true, r, message, p.now, p.generation);
  if (find_condition(p.status, "Running")) {
    set_condition(p.status, "Running", false, r, "the job failed", p.now, p.generation);
  }
  if (p.status.contains("targets") && p.status["targets"].is_array()) {
    for (std::size_t i = 0; i < p.status["targets"].size(); ++i) {
      auto& entry = p.status["targets"][i];
      if (entry.value("state", "") == "Succeeded" || p.run.target_landed(i)) {
        entry["state"] = "Succeeded";
        entry.erase("lastError");
        continue;
      }
      entry["state"] = "Failed";
      entry["lastError"] = (r + ": " + message).substr(0, 4096);
    }
  }
  store_.record_event(p.key, "Warning", r, message);
  log::warn("job failed", {{"job", p.job_name()}, {"reason", r}, {"message", message}});
}

void Reconciler::retry(Pass& p, const Step& step) {
  // What the failed attempt left in place, as the agent said this pass or at the last look (an agent that
  // died says nothing now); never less than an earlier attempt left.
  if (p.seen.kind == Observation::Kind::Answered) track(p, p.seen.transfer);
  if (p.spec().verify && p.memory.committed.size() == p.spec().targets.size()) {
    p.run.resume.resize(p.memory.committed.size(), 0);
    for (std::size_t i = 0; i < p.memory.committed.size(); ++i) {
      p.run.resume[i] = std::max(p.run.resume[i], std::min(p.memory.committed[i], p.run.length));
    }
  }
  note_landed(p);
  release(p, /*drop_source=*/false);
  const std::uint32_t retries = p.view.retries + 1;
  const auto delay = step.wait.value_or(backoff_delay(p.view.retries));
  p.status["retries"] = retries;
  p.status["throughputBytesPerSecond"] = 0;
  p.status["throughput"] = "";
  p.run.not_before = std::chrono::floor<std::chrono::milliseconds>(p.now + delay);
  const std::string message = "attempt " + std::to_string(p.run.attempt) + " failed (" + step.reason + ": " +
                              step.message + "); retry " + std::to_string(retries) + " of " +
                              std::to_string(p.spec().backoff_limit) + " in " + seconds_text(delay);
  set_condition(p.status, "Running", true, "Retrying", message, p.now, p.generation);
  if (p.status.contains("targets") && p.status["targets"].is_array()) {
    for (std::size_t i = 0; i < p.status["targets"].size(); ++i) {
      if (p.run.target_landed(i)) continue;  // has every byte: the failure was another target's
      p.status["targets"][i]["lastError"] = (step.reason + ": " + step.message).substr(0, 4096);
    }
  }
  store_.record_event(p.key, "Warning", "Retrying", message);
  log::warn("attempt failed, retrying", {{"job", p.job_name()},
                                         {"reason", step.reason},
                                         {"message", step.message},
                                         {"retry", std::to_string(retries)},
                                         {"in", seconds_text(delay)}});
}

void Reconciler::release(Pass& p, bool drop_source) {
  if (p.run.transfer) {
    const bool finished = p.seen.kind == Observation::Kind::Answered && p.seen.transfer.finished();
    if (!finished) {
      const auto s = agents_.cancel_transfer(p.run.transfer->node, p.run.transfer->name, p.key.ns);
      if (!s && s.error().code != ErrorCode::NotFound) {
        log::warn("cancelling the transfer failed", {{"job", p.job_name()}, {"error", s.error().message}});
      }
    }
    p.run.transfer.reset();
  }
  if (p.run.reshard) {
    // Every batch still running stops before its grant goes (the grant's revoke would fail it anyway).
    std::vector<NodeRef> running;
    for (const auto& b : p.run.reshard->batches) {
      if (b.state == ReshardBatch::State::Running && b.source < p.spec().sources.size())
        running.push_back({p.spec().sources[b.source].node, b.transfer});
    }
    in_parallel_bounded<bool>(running.size(), 16, [&](std::size_t i) {
      const auto s = agents_.cancel_transfer(running[i].node, running[i].name, p.key.ns);
      if (!s && s.error().code != ErrorCode::NotFound) {
        log::warn("cancelling a reshard batch failed",
                  {{"job", p.job_name()}, {"transfer", running[i].name}, {"error", s.error().message}});
      }
      return true;
    });
    p.run.reshard.reset();
    p.memory.reshard.reset();
  }
  // A grant whose node does not answer stays on the list and is revoked again at the next release (and
  // before the next attempt): left alone it would stay valid for its whole TTL after the transfer.
  std::vector<NodeRef> unrevoked;
  // Refused (Forbidden): not this job's namespace's to revoke (a record someone wrote by hand), never
  // tried again.
  const auto settled = [](const Status& s) {
    return s || s.error().code == ErrorCode::NotFound || s.error().code == ErrorCode::Forbidden;
  };
  for (const auto& g : p.run.unrevoked) {
    if (!settled(agents_.revoke_grant(g.node, g.name, p.key.ns))) unrevoked.push_back(g);
  }
  for (const auto& g : p.run.grants) {
    const auto s = agents_.revoke_grant(g.node, g.name, p.key.ns);
    if (!settled(s)) {
      log::warn("revoking a grant failed; trying again at the next step of the job",
                {{"job", p.job_name()}, {"node", g.node}, {"grant", g.name}, {"error", s.error().message}});
      unrevoked.push_back(g);
    }
  }
  p.run.grants.clear();
  p.run.unrevoked = std::move(unrevoked);
  if (drop_source && p.run.source_temporary && p.run.source) {
    delete_region_when_free(p, *p.run.source);
    p.run.source.reset();
    p.run.source_temporary = false;
  }
}

void Reconciler::drop_created_targets(Pass& p) {
  // Only what this job created: a region that existed before the job is the user's, whatever happened.
  // A target that got every byte keeps its region.
  auto landed = [&](const NodeRef& region) {
    if (!p.view.spec) return false;
    const auto& targets = p.spec().targets;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].node == region.node && targets[i].region == region.name) return p.run.target_landed(i);
    }
    return false;
  };
  std::size_t dropped = 0;
  for (const auto& region : p.run.created) {
    if (landed(region)) continue;
    delete_region_when_free(p, region);
    ++dropped;
  }
  if (dropped > 0) {
    log::info("deleted the target regions the job created",
              {{"job", p.job_name()}, {"regions", std::to_string(dropped)}});
  }
  p.run.created.clear();
}

void Reconciler::delete_region_when_free(Pass& p, const NodeRef& region) {
  // A cancelled transfer lets go of its regions a moment after the cancel returns: wait a little for it.
  for (int tries = 0;; ++tries) {
    const auto s = agents_.delete_region(region.node, region.name, p.key.ns);
    if (s || s.error().code == ErrorCode::NotFound) return;
    if (s.error().code != ErrorCode::Conflict || tries >= 20) {
      log::warn("deleting a region the job holds failed", {{"job", p.job_name()},
                                                           {"node", region.node},
                                                           {"region", region.name},
                                                           {"error", s.error().message}});
      return;
    }
    std::this_thread::sleep_for(100ms);
  }
}

bool Reconciler::save_run(Pass& p) {
  if (p.run == p.stored_run) return true;
  json patch = {{"annotations", {{kRunAnnotation, p.run.to_annotation()}}}};
  // The finalizer comes with the first record of something held, in the same write: a job deleted before
  // then holds nothing and goes at once, and one write per job fewer than a finalizer of its own (each
  // write is apiserver CPU, what 1,000 jobs at once wait for: docs/pipelines.md). The apiserver refuses a
  // new finalizer on a job already being deleted; the record then fails and the caller releases what it
  // was about to hold, as for any failed record.
  if (!has_finalizer(p.job)) {
    json finalizers = p.job.value("metadata", json::object()).value("finalizers", json::array());
    finalizers.push_back(kFinalizer);
    patch["finalizers"] = std::move(finalizers);
  }
  auto r = store_.patch_job_metadata(p.key, patch);
  if (!r) {
    log::warn("recording the run failed", {{"job", p.job_name()}, {"error", r.error().message}});
    p.store_error = true;
    return false;
  }
  p.stored_run = p.run;
  if (r->contains("metadata")) p.job["metadata"] = (*r)["metadata"];
  return true;
}

bool Reconciler::flush(Pass& p) {
  if (p.generation > 0) p.status["observedGeneration"] = p.generation;
  const bool terminal = is_terminal_phase(p.status.value("phase", ""));
  // Order matters for restarts: a finished job must be seen finished before its run record is cleared,
  // while a running job's run record (the transfer it holds) must be stored before status claims it.
  if (!terminal && !save_run(p)) return false;
  const json patch = merge_diff(p.stored_status, p.status);
  if (!patch.empty()) {
    const bool transition = is_transition(p.stored_status, p.status);
    const auto since =
        p.memory.last_status_write ? p.now - *p.memory.last_status_write : std::chrono::hours(1);
    if (!transition && since < options_.min_status_interval) {
      // Progress only, and written moments ago: the next poll writes it.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(options_.min_status_interval - since);
      p.wait = p.wait ? std::min(*p.wait, left) : left;
    } else {
      auto r = store_.patch_job_status(p.key, patch);
      if (!r) {
        log::warn("writing status failed", {{"job", p.job_name()}, {"error", r.error().message}});
        return false;
      }
      p.memory.last_status_write = p.now;
      p.stored_status = p.status;
    }
  }
  if (terminal && !save_run(p)) return false;
  return true;
}

}  // namespace conduit::controller
