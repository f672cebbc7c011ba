// Strategy Reshard as the reconciler carries it out (docs/reshard.md, "TransferJob strategy: Reshard"):
//   start:  every source and target pod's region and manifest (pod ownership and tenancy as any job), the
//           targets' common version K-1 (refused when they differ), the plan (refused before any grant),
//           the run record, one long-lived write grant per target region, then every batch at once;
//   track:  each running batch's transfer looked at, step_reshard (reshard_run.h) picks what follows: a
//           failed batch sent again alone, and once every batch landed every target committed to K;
//   end:    the grants revoked; a failed job never commits, so every target stays at K-1.
#include <algorithm>
#include <map>
#include <set>

#include "conduit/common/log.h"
#include "in_parallel.h"
#include "job_status.h"
#include "pass.h"
#include "region_checks.h"
#include "reshard_planning.h"

namespace conduit::controller {

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Calls to agents at once; a job's batches may be many more (sources x targets).
constexpr std::size_t kWidth = 16;

std::string pod_name(const std::optional<PodRef>& pod) { return pod ? pod->name : std::string("?"); }

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", s);
  return text;
}

int rank(ReshardBatch::State s) {  // the least advanced of a pair's batches is the pair's state
  switch (s) {
    case ReshardBatch::State::Failed:
      return 0;
    case ReshardBatch::State::Pending:
      return 1;
    case ReshardBatch::State::Running:
      return 2;
    case ReshardBatch::State::Succeeded:
      return 3;
  }
  return 1;
}

}  // namespace

std::optional<Reconciler::AttemptError> Reconciler::start_reshard(Pass& p) {
  const auto& spec = p.spec();
  begin_attempt(p);

  // Every pod's region and manifest, all at once.
  struct Side {
    const std::string* node;
    const std::string* region;
    const std::optional<PodRef>* pod;
    bool source;
  };
  std::vector<Side> sides;
  for (const auto& s : spec.sources) sides.push_back({&s.node, &s.region, &s.pod, true});
  for (const auto& t : spec.targets) sides.push_back({&t.node, &t.region, &t.pod, false});
  struct Read {
    Result<api::Region> region;
    Result<api::Manifest> manifest;
  };
  auto read = in_parallel_bounded<Read>(sides.size(), kWidth, [&](std::size_t i) {
    auto r = agents_.get_region(*sides[i].node, *sides[i].region);
    if (!r || !r->tensors) return Read{std::move(r), make_error(ErrorCode::NotFound, "no manifest")};
    return Read{std::move(r), agents_.manifest(*sides[i].node, *sides[i].region)};
  });
  std::vector<ReshardSideInput> sources, targets;
  std::vector<std::uint64_t> versions, sizes;
  for (std::size_t i = 0; i < sides.size(); ++i) {
    const Side& side = sides[i];
    const std::string what = std::string(side.source ? "source" : "target") + " region \"" + *side.region +
                             "\" of pod " + pod_name(*side.pod) + on(*side.node);
    auto& r = read[i].region;
    if (!r && r.error().code == ErrorCode::NotFound)
      return AttemptError{reason::kRegionNotFound, missing(what, *side.pod)};
    if (!r) return AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message};
    if (auto e = pod_ownership(*r, what, p.key.ns, *side.pod)) return e;
    if (auto why = not_shared(*r, what, p.key.ns))
      return AttemptError{reason::kRegionNotShared, *why, /*permanent=*/true};
    if (!r->tensors) {
      return AttemptError{reason::kReshardRefused,
                          what +
                              " has no manifest: a Reshard moves named tensors by their placements (the "
                              "pod shares its region with one: docs/reshard.md)",
                          /*permanent=*/true};
    }
    auto& m = read[i].manifest;
    if (!m) {
      return AttemptError{reason_for(m.error()),
                          "reading the manifest of " + what + ": " + m.error().message};
    }
    std::optional<double> rate;
    if (options_.facts != nullptr) {
      if (const auto facts = options_.facts->get(*side.node)) rate = facts->link_bytes_per_second;
    }
    (side.source ? sources : targets).push_back({std::move(*m), rate});
    if (!side.source) {
      versions.push_back(r->version);
      sizes.push_back(r->bytes);
    }
  }

  // One version for the whole target group: they must start from one.
  if (std::adjacent_find(versions.begin(), versions.end(), std::not_equal_to<>()) != versions.end()) {
    std::string each;
    for (std::size_t i = 0; i < versions.size(); ++i) {
      each += (each.empty() ? "" : ", ") + pod_name(spec.targets[i].pod) + " (\"" + spec.targets[i].region +
              "\"" + on(spec.targets[i].node) + ") at " + std::to_string(versions[i]);
    }
    return AttemptError{reason::kTargetVersionsDiffer,
                        "the target regions are not at one version: " + each +
                            "; a Reshard moves them together from one version to the next, so readers never "
                            "see two steps mixed (bring them to one version, or reshard into fresh regions)",
                        /*permanent=*/true};
  }

  auto planned = plan_reshard(sources, targets);
  if (!planned) {
    const bool refused = planned.error().code == ErrorCode::InvalidArgument;
    // The planner numbers the ranks: say which pod each is.
    std::string ranks = "sources[i] and targets[i] are the pods in name order: sources";
    for (const auto& s : spec.sources) ranks += " " + pod_name(s.pod) + ",";
    ranks.back() = ';';
    ranks += " targets";
    for (const auto& t : spec.targets) ranks += " " + pod_name(t.pod) + ",";
    ranks.pop_back();
    return AttemptError{
        refused ? reason::kReshardRefused : reason::kUnsupported,
        "the plan from the pods' manifests was refused: " + planned.error().message + " (" + ranks + ")",
        /*permanent=*/true};
  }

  // Recorded before any grant: a restart finds the attempt by it.
  ReshardRun run;
  run.fingerprint = planned->fingerprint;
  run.from_version = versions.empty() ? 0 : versions.front();
  run.figures = planned->figures;
  run.batches = std::move(planned->batches);
  run.committed.assign(spec.targets.size(), false);
  p.run.reshard = std::move(run);
  p.memory.reshard = Memory::Reshard{planned->fingerprint, std::move(planned->ops), {}};
  reshard_status(p, 0);
  if (!save_run(p)) return std::nullopt;

  // One write grant per target region for the whole attempt: every batch into that pod writes through it.
  const std::string& wanted = p.transport;
  auto take = [&](std::size_t i) {
    const auto& t = spec.targets[i];
    GrantAsk ask{.region = t.region,
                 .length = sizes[i],
                 .ttl_seconds = options_.grant_ttl_seconds,
                 .provider = wanted,
                 .save = "",
                 .writer = p.job_name(),
                 .peer = "",  // several source pods' agents write through it
                 .ns = p.key.ns,
                 .pod = t.pod ? t.pod->uid : std::string()};
    auto g = agents_.grant(t.node, ask);
    const bool no_transport =
        !g && (g.error().code == ErrorCode::Unavailable || g.error().code == ErrorCode::Unsupported ||
               g.error().code == ErrorCode::InvalidArgument);
    if (no_transport && spec.allow_fallback && !wanted.empty()) {
      ask.provider = "";
      g = agents_.grant(t.node, ask);
      if (!g) {
        ask.provider = "tcp";
        g = agents_.grant(t.node, ask);
      }
    }
    return g;
  };
  auto grants = in_parallel_bounded<Result<api::Grant>>(spec.targets.size(), kWidth, take);
  std::optional<AttemptError> error;
  p.run.transports.assign(spec.targets.size(), "");
  for (std::size_t i = 0; i < grants.size(); ++i) {
    const auto& t = spec.targets[i];
    auto& g = grants[i];
    if (g) {
      // Every grant handed out is recorded, so the next release revokes it whatever failed.
      p.run.grants.push_back({t.node, g->id});
      p.run.transports[i] = transport_name(g->provider);
      p.memory.reshard->grants.push_back(*g);
      continue;
    }
    if (error) continue;
    error =
        AttemptError{g.error().code == ErrorCode::NotFound ? reason::kRegionNotFound : reason_for(g.error()),
                     "granting access to target region \"" + t.region + "\" of pod " + pod_name(t.pod) +
                         on(t.node) + " failed: " + g.error().message,
                     /*permanent=*/g.error().code == ErrorCode::Forbidden};
  }
  if (!save_run(p)) return std::nullopt;
  if (error) return error;

  std::vector<std::size_t> all(p.run.reshard->batches.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  start_batches(p, all);
  if (p.store_error) return std::nullopt;
  const auto& r = *p.run.reshard;
  std::set<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (const auto& b : r.batches) pairs.insert({b.source, b.target});
  const std::string message =
      "attempt " + std::to_string(p.run.attempt) + ": resharding " + std::to_string(r.figures.bytes) +
      " bytes from " + std::to_string(spec.sources.size()) + " source pods into " +
      std::to_string(spec.targets.size()) + " target pods: " + std::to_string(r.batches.size()) +
      " batches over " + std::to_string(pairs.size()) + " pairs, every target region from version " +
      std::to_string(r.from_version) + " to " + std::to_string(r.version()) + " once all landed";
  set_condition(p.status, "Running", true, "TransferStarted",
                p.fallback.empty() ? message : message + "; " + p.fallback, p.now, p.generation);
  reshard_status(p, 0);
  store_.record_event(p.key, "Normal", "Started", message);
  if (!p.fallback.empty()) store_.record_event(p.key, "Warning", "TransportFallback", p.fallback);
  log::info("reshard started", {{"job", p.job_name()},
                                {"attempt", std::to_string(p.run.attempt)},
                                {"batches", std::to_string(r.batches.size())},
                                {"bytes", std::to_string(r.figures.bytes)},
                                {"fingerprint", r.fingerprint}});
  return std::nullopt;
}

bool Reconciler::start_batches(Pass& p, const std::vector<std::size_t>& indices) {
  const auto& spec = p.spec();
  auto& run = *p.run.reshard;
  const auto& memory = p.memory.reshard;
  if (!memory || memory->fingerprint != run.fingerprint || memory->ops.size() != run.batches.size() ||
      memory->grants.size() != spec.targets.size())
    return false;
  std::uint64_t deadline = 0;
  const auto start_time = parse_rfc3339(p.status.value("startTime", ""));
  if (spec.active_deadline_seconds && start_time) {
    const auto left = *start_time + std::chrono::seconds(*spec.active_deadline_seconds) - p.now;
    deadline = static_cast<std::uint64_t>(
        std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(left).count()));
  }
  auto started = in_parallel_bounded<Result<api::TransferStatus>>(indices.size(), kWidth, [&](std::size_t j) {
    const ReshardBatch& b = run.batches[indices[j]];
    const SourceSpec& source = spec.sources.at(b.source);
    const TargetSpec& target = spec.targets.at(b.target);
    const api::Grant& g = memory->grants[b.target];
    api::TransferRequest request;
    request.source_region = source.region;
    request.ops = memory->ops[indices[j]];
    request.ns = p.key.ns;
    if (source.pod) request.source_pod = source.pod->uid;
    request.chunk_bytes = spec.chunk_bytes;
    request.window = spec.window;
    request.verify = spec.verify ? api::Verify::Crc32c : api::Verify::None;
    request.deadline_seconds = deadline;
    api::TransferTarget t{g.key, agents_.url(target.node).value_or(""), target.region};
    // With crc32c the source asks this grant's agent for the sum over the ops' ranges once all landed.
    if (spec.verify) t.grant_id = g.id;
    request.targets.push_back(std::move(t));
    return agents_.start_transfer(source.node, request);
  });
  for (std::size_t j = 0; j < indices.size(); ++j) {
    ReshardBatch& b = run.batches[indices[j]];
    b.attempts += 1;
    b.not_before.reset();
    b.done = 0;
    if (started[j]) {
      b.state = ReshardBatch::State::Running;
      b.transfer = started[j]->id;
      continue;
    }
    const auto& e = started[j].error();
    b.state = ReshardBatch::State::Failed;
    b.transfer.clear();
    b.reason = e.code == ErrorCode::NotFound && agents_.url(spec.sources[b.source].node)
                   ? reason::kRegionNotFound
                   : reason_for(e);
    b.message = "starting it" + on(spec.sources[b.source].node) + " failed: " + e.message;
  }
  if (!save_run(p)) {
    // Transfers whose ids could not be recorded stop now rather than run unaccounted for.
    for (std::size_t j = 0; j < indices.size(); ++j) {
      if (!started[j]) continue;
      (void)agents_.cancel_transfer(spec.sources[run.batches[indices[j]].source].node, started[j]->id,
                                    p.key.ns);
    }
  }
  return true;
}

void Reconciler::track_reshard(Pass& p) {
  const auto& spec = p.spec();
  auto& run = *p.run.reshard;
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < run.batches.size(); ++i) {
    if (run.batches[i].state == ReshardBatch::State::Running) running.push_back(i);
  }
  auto answers = in_parallel_bounded<Result<api::TransferStatus>>(running.size(), kWidth, [&](std::size_t j) {
    const ReshardBatch& b = run.batches[running[j]];
    return agents_.get_transfer(spec.sources.at(b.source).node, b.transfer, p.key.ns);
  });
  std::vector<BatchSeen> seen(run.batches.size());
  double throughput = 0;
  for (std::size_t j = 0; j < running.size(); ++j) {
    const ReshardBatch& b = run.batches[running[j]];
    const std::string& node = spec.sources[b.source].node;
    BatchSeen& s = seen[running[j]];
    auto& r = answers[j];
    if (r) {
      p.memory.batch_unreachable_since.erase(b.transfer);
      s.kind = BatchSeen::Kind::Answered;
      throughput += r->finished() ? 0.0 : r->throughput;
      s.transfer = std::move(*r);
    } else if (r.error().code == ErrorCode::NotFound && agents_.url(node)) {
      s.kind = BatchSeen::Kind::Lost;
      s.error = "the agent" + on(node) + " no longer knows transfer " + b.transfer +
                " (did it restart?): " + r.error().message;
    } else {
      auto since = p.memory.batch_unreachable_since.emplace(b.transfer, p.now).first->second;
      s.kind = BatchSeen::Kind::Unreachable;
      s.error = r.error().message;
      s.unreachable_for = std::chrono::duration_cast<std::chrono::milliseconds>(p.now - since);
    }
  }
  auto names = [&](const ReshardBatch& b) {
    return pod_name(spec.sources.at(b.source).pod) + " -> " + pod_name(spec.targets.at(b.target).pod);
  };
  const std::vector<ReshardBatch> before = run.batches;
  ReshardStep step =
      step_reshard(run, seen, spec, p.now, names, {options_.poll_interval, options_.unreachable_grace});
  // Every batch that failed this pass says so once, with what comes of it.
  for (std::size_t i = 0; i < run.batches.size(); ++i) {
    const auto& b = run.batches[i];
    if (b.reason.empty() || before[i].state != ReshardBatch::State::Running ||
        b.state == ReshardBatch::State::Running || b.state == ReshardBatch::State::Succeeded)
      continue;
    const std::string message = "batch " + names(b) + " (attempt " + std::to_string(b.attempts) +
                                ") failed: " + b.reason + ": " + b.message;
    store_.record_event(p.key, "Warning", "BatchFailed", message);
    log::warn("reshard batch failed", {{"job", p.job_name()}, {"message", message}});
  }
  p.wait = step.wait;
  switch (step.kind) {
    case ReshardStep::Kind::Fail:
      reshard_status(p, 0);
      fail(p, step.reason, step.message);
      return;
    case ReshardStep::Kind::Start:
      if (!start_batches(p, step.start)) {
        // A restarted controller has neither the plan's ops nor the grants' keys: the attempt starts again.
        const std::string message =
            "batch " + names(run.batches[step.start.front()]) +
            " must be sent again, and this controller does not hold the attempt's plan and grant keys (it "
            "restarted): starting the attempt again";
        reshard_status(p, 0);
        const Step next = retry_or_fail(spec, p.view.retries, reason::kTransferLost, message);
        p.wait = next.wait;
        if (next.kind == StepKind::Retry) {
          retry(p, next);
        } else {
          fail(p, next.reason, next.message);
        }
        return;
      }
      break;
    case ReshardStep::Kind::Commit:
    case ReshardStep::Kind::Complete:
      if (auto e = commit_targets(p)) {
        if (e->permanent) {
          reshard_status(p, 0);
          fail(p, e->reason, e->message);
          return;
        }
        // An agent that does not answer now may later: every byte is in, only the version waits (the
        // deadline bounds it).
        log::warn("committing a target failed; trying again",
                  {{"job", p.job_name()}, {"reason", e->reason}, {"message", e->message}});
        p.wait = options_.poll_interval;
        break;
      }
      complete_reshard(p);
      return;
    case ReshardStep::Kind::Wait:
      break;
  }
  reshard_status(p, throughput);
}

std::optional<Reconciler::AttemptError> Reconciler::commit_targets(Pass& p) {
  const auto& spec = p.spec();
  auto& run = *p.run.reshard;
  const std::uint64_t k = run.version();
  std::vector<std::size_t> left;
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    if (!run.committed.at(i)) left.push_back(i);
  }
  if (p.run.grants.size() != spec.targets.size()) {
    return AttemptError{reason::kTransferLost, "the attempt's grants are not all recorded", false};
  }
  auto done = in_parallel_bounded<std::optional<AttemptError>>(left.size(), kWidth, [&](std::size_t j) {
    const std::size_t i = left[j];
    const auto& t = spec.targets[i];
    const std::string what = "target region \"" + t.region + "\" of pod " + pod_name(t.pod) + on(t.node);
    auto moved_on = [&](std::uint64_t version) {
      return AttemptError{reason::kVersionConflict,
                          what + " is at version " + std::to_string(version) + ", not " +
                              std::to_string(k - 1) +
                              ": something else wrote it while the job ran, so it "
                              "cannot move to version " +
                              std::to_string(k) + " with the others",
                          /*permanent=*/true};
    };
    auto r = agents_.get_region(t.node, t.region);
    if (!r)
      return std::optional<AttemptError>(
          AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message});
    if (r->version == k) return std::optional<AttemptError>();  // an earlier pass's commit, its answer lost
    if (r->version != k - 1) return std::optional<AttemptError>(moved_on(r->version));
    const auto s = agents_.commit_grant(t.node, p.run.grants[i].name, r->bytes, k);
    if (s) return std::optional<AttemptError>();
    if (s.error().code == ErrorCode::Conflict) {
      auto again = agents_.get_region(t.node, t.region);
      if (again && again->version == k) return std::optional<AttemptError>();
      if (again) return std::optional<AttemptError>(moved_on(again->version));
    }
    return std::optional<AttemptError>(AttemptError{
        reason_for(s.error()),
        "committing " + what + " to version " + std::to_string(k) + " failed: " + s.error().message});
  });
  std::optional<AttemptError> error;
  for (std::size_t j = 0; j < left.size(); ++j) {
    if (!done[j]) {
      run.committed[left[j]] = true;
    } else if (!error || done[j]->permanent) {
      error = done[j];
    }
  }
  save_run(p);
  return error;
}

void Reconciler::complete_reshard(Pass& p) {
  const auto& spec = p.spec();
  const ReshardRun run = *p.run.reshard;
  reshard_status(p, 0);
  release(p, /*drop_source=*/true);  // the grants go: nothing writes the targets once they are at K
  const auto started = parse_rfc3339(p.status.value("startTime", ""));
  const double seconds = started ? std::chrono::duration<double>(p.now - *started).count() : 0;
  json& reshard = p.status["reshard"];
  reshard["seconds"] = seconds;
  std::string against;
  if (run.figures.lower_bound_seconds && *run.figures.lower_bound_seconds > 0) {
    const double ratio = seconds / *run.figures.lower_bound_seconds;
    reshard["againstLowerBound"] = ratio;
    char text[64];
    std::snprintf(text, sizeof text, " (%.2fx its lower bound of ", ratio);
    against = text + seconds_text(*run.figures.lower_bound_seconds) + ")";
  }
  for (auto& entry : p.status["targets"]) {
    entry["state"] = "Succeeded";
    entry["version"] = run.version();
  }
  p.status["phase"] = phase::kSucceeded;
  p.status["completionTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["bytesTransferred"] = run.figures.bytes;
  p.status["progress"] = "100%";
  const double rate = seconds > 0 ? static_cast<double>(run.figures.bytes) / seconds : 0;
  p.status["throughputBytesPerSecond"] = rate;
  p.status["throughput"] = format_throughput(rate);
  const std::string message = "resharded " + std::to_string(run.figures.bytes) + " bytes from " +
                              std::to_string(spec.sources.size()) + " source pods into " +
                              std::to_string(spec.targets.size()) + " target pods in " +
                              std::to_string(run.batches.size()) + " batches" +
                              (spec.verify ? ", verified crc32c" : "") + "; every target region at version " +
                              std::to_string(run.version()) + "; " + seconds_text(seconds) + against;
  set_condition(p.status, "Complete", true, "TransferSucceeded", message, p.now, p.generation);
  set_condition(p.status, "Running", false, "Completed", "the reshard finished", p.now, p.generation);
  store_.record_event(p.key, "Normal", "Succeeded", message);
  log::info("job succeeded", {{"job", p.job_name()}, {"detail", message}});
}

void Reconciler::reshard_status(Pass& p, double throughput) {
  const auto& spec = p.spec();
  const ReshardRun& run = *p.run.reshard;
  struct Pair {
    std::uint64_t bytes = 0;
    std::uint32_t attempts = 0;
    int state = 3;
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, Pair> pairs;
  std::vector<std::uint64_t> into(spec.targets.size(), 0), planned(spec.targets.size(), 0);
  std::vector<int> target_state(spec.targets.size(), 3);
  std::uint64_t done = 0;
  for (const auto& b : run.batches) {
    auto& pair = pairs[{b.source, b.target}];
    pair.bytes += b.bytes;
    pair.attempts += b.attempts;
    pair.state = std::min(pair.state, rank(b.state));
    const std::uint64_t moved =
        b.state == ReshardBatch::State::Succeeded ? b.bytes : std::min(b.done, b.bytes);
    done += moved;
    if (b.target < into.size()) {
      into[b.target] += moved;
      planned[b.target] += b.bytes;
      target_state[b.target] = std::min(target_state[b.target], rank(b.state));
    }
  }
  static constexpr const char* kStates[] = {"Failed", "Pending", "Running", "Succeeded"};
  json list = json::array();
  for (const auto& [key, pair] : pairs) {
    list.push_back({{"sourcePod", pod_name(spec.sources.at(key.first).pod)},
                    {"targetPod", pod_name(spec.targets.at(key.second).pod)},
                    {"bytes", pair.bytes},
                    {"state", kStates[pair.state]},
                    {"attempts", pair.attempts}});
  }
  json reshard = p.status.value("reshard", json::object());
  if (!reshard.is_object()) reshard = json::object();
  const auto& busiest_pod = run.figures.busiest_target ? spec.targets.at(run.figures.busiest).pod
                                                       : spec.sources.at(run.figures.busiest).pod;
  reshard["fingerprint"] = run.fingerprint;
  reshard["pairs"] = pairs.size();
  reshard["batches"] = run.batches.size();
  reshard["bytes"] = run.figures.bytes;
  reshard["version"] = run.version();
  reshard["busiest"] = {{"side", run.figures.busiest_target ? "target" : "source"},
                        {"pod", pod_name(busiest_pod)},
                        {"bytes", run.figures.busiest_bytes}};
  if (run.figures.lower_bound_seconds) {
    reshard["lowerBoundSeconds"] = *run.figures.lower_bound_seconds;
  } else {
    reshard.erase("lowerBoundSeconds");
  }
  reshard["pairList"] = std::move(list);
  p.status["reshard"] = std::move(reshard);

  p.status["bytesTotal"] = run.figures.bytes;
  p.status["bytesTransferred"] = done;
  p.status["progress"] = format_progress(done, run.figures.bytes);
  p.status["throughputBytesPerSecond"] = throughput;
  p.status["throughput"] = format_throughput(throughput);
  json targets = json::array();
  std::string each;
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    json entry = target_entry(spec.targets[i]);
    if (i < p.run.transports.size() && !p.run.transports[i].empty()) entry["transport"] = p.run.transports[i];
    const bool committed = i < run.committed.size() && run.committed[i];
    entry["state"] = committed ? "Succeeded" : target_state[i] == 3 ? "Committing" : kStates[target_state[i]];
    entry["bytes"] = into[i];
    entry["verified"] = spec.verify && target_state[i] == 3;
    entry["version"] = committed ? run.version() : run.from_version;
    targets.push_back(std::move(entry));
    each += (i > 0 ? "," : "") + format_progress(into[i], planned[i]);
  }
  p.status["targets"] = std::move(targets);
  p.status["targetProgress"] = each;
}

}  // namespace conduit::controller
