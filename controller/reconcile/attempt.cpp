// Starting an attempt once the pre-flight let it (hold.cpp): make the source and target regions ready, take
// grants on the targets and start one agent transfer on the source. Each thing the job comes to hold is
// recorded in the run annotation as soon as it exists (regions before they are created), so a restart can
// find and release it.
#include <algorithm>
#include <optional>

#include "conduit/api/tensor_subset.h"
#include "conduit/common/log.h"
#include "in_parallel.h"
#include "job_status.h"
#include "pass.h"
#include "region_checks.h"

namespace conduit::controller {

using json = nlohmann::json;

std::optional<Reconciler::AttemptError> Reconciler::start_attempt(Pass& p) {
  // Every node has an agent and answers: the pre-flight said so (hold.cpp).
  const auto& spec = p.spec();
  if (spec.strategy == Strategy::Reshard) return start_reshard(p);
  if (spec.strategy == Strategy::Chain) {
    // Each hop forwards from its region what landed there: every target needs one, in host memory.
    for (std::size_t i = 0; i < spec.targets.size(); ++i) {
      const auto& t = spec.targets[i];
      if (t.region.empty() || (t.create && t.create->memory != "host")) {
        return AttemptError{reason::kUnsupported,
                            "target " + std::to_string(i) + on(t.node) +
                                ": a Chain hop forwards from its region, which must be host memory; give it "
                                "a region (create: {bytes: N}) or use Fanout",
                            /*permanent=*/true};
      }
    }
  }
  if (spec.targets.size() > 16) {
    return AttemptError{reason::kUnsupported, "an agent transfer reaches at most 16 targets; split the job"};
  }
  begin_attempt(p);

  // Each step records what it is about to hold first; when that record could not be written (p.store_error)
  // it returns no error but must not be followed: a transfer started on grants we could not record could
  // neither be found again after a restart nor be told apart from another replica's.
  const std::uint64_t earlier_length = p.run.length;
  if (auto e = prepare_source(p); e || p.store_error) return e;
  if (spec.strategy == Strategy::Chain && p.source_memory != "host") {
    return AttemptError{
        reason::kUnsupported,
        "a Chain's source must be host memory or a file (source memory " + p.source_memory + "); use Fanout",
        /*permanent=*/true};
  }
  if (earlier_length != 0 && p.run.length != earlier_length) {
    // Another source than the earlier attempts moved: nothing they left in place counts.
    p.run.landed.clear();
    p.run.resume.clear();
  }
  if (auto e = plan_tensors(p)) return e;
  if (auto e = prepare_targets(p); e || p.store_error) return e;
  if (!p.subset.empty()) {
    // What the job moves and reports is the subset: its bytes per target.
    p.run.length = 0;
    for (const auto& op : p.subset) p.run.length += op.length;
  }
  if (auto e = take_grants(p); e || p.store_error) return e;

  api::TransferRequest request;
  if (p.run.source) {
    request.source_region = p.run.source->name;
  } else {
    request.source_file = spec.source.file;  // read as it goes out
  }
  request.length = p.subset.empty() ? p.run.length : 0;  // an op list carries its own ranges
  request.ops = p.subset;
  request.ns = p.key.ns;  // the source agent checks the source region admits it
  if (spec.source.pod) request.source_pod = spec.source.pod->uid;  // ... and that it is that pod's
  request.chunk_bytes = spec.chunk_bytes;
  request.window = spec.window;
  request.verify = spec.verify ? api::Verify::Crc32c : api::Verify::None;
  request.max_bytes_per_second = spec.max_bytes_per_second;
  request.chain = spec.strategy == Strategy::Chain;  // hops in the spec's order
  const auto start_time = parse_rfc3339(p.status.value("startTime", ""));
  if (spec.active_deadline_seconds && start_time) {
    // The agent enforces what is left of the deadline itself, so it holds even while no controller runs.
    const auto left = *start_time + std::chrono::seconds(*spec.active_deadline_seconds) - p.now;
    request.deadline_seconds = static_cast<std::uint64_t>(
        std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(left).count()));
  }
  // Resuming is safe only because verify checks every byte of the range, claimed or sent; a run whose
  // length changed (another source) starts over.
  // A target that saves as bytes land writes a new file each attempt, so it starts at 0 (its resume is 0).
  // A subset's op list is sent whole each attempt (an op list is not resumed).
  const bool resume = spec.verify && p.subset.empty() && p.run.resume.size() == spec.targets.size() &&
                      std::all_of(p.run.resume.begin(), p.run.resume.end(),
                                  [&](std::uint64_t r) { return r <= p.run.length; });
  if (!resume) p.run.resume.clear();
  std::uint64_t resumed = 0;
  const std::vector<std::uint32_t> sending = targets_to_send(p);
  for (std::size_t j = 0; j < sending.size(); ++j) {
    const std::size_t i = sending[j];
    // The grant key is what the source writes with; the URL lets the source compare CRC32C slices.
    const api::Grant& g = p.grants_taken.at(j);
    const bool restarts = !g.save_file().empty();
    api::TransferTarget target{g.key, agents_.url(spec.targets[i].node).value_or(""), spec.targets[i].region,
                               resume && !restarts ? p.run.resume[i] : 0};
    // Landing reports wherever the grant takes them: verified and saved as the bytes land, a Chain's next hop
    // fed only what landed, and the final commit that gives the target region its new version (a process
    // waiting for new weights wakes then).
    // A scatter batch (spec.tensors) takes no landing reports: its grantId is only where the source asks
    // for the sum of the ops' ranges once they landed (verify crc32c).
    if (p.subset.empty() ? g.takes_reports() : spec.verify) target.grant_id = g.id;
    if (g.ring()) target.ring_bytes = g.length;
    target.save = restarts;
    request.targets.push_back(std::move(target));
    resumed += request.targets.back().resume_offset;
  }
  // Recorded with the transfer's id (below): the agent's targets are these, in this order.
  p.run.sent = sending.size() == spec.targets.size() ? std::vector<std::uint32_t>{} : sending;
  auto started = agents_.start_transfer(spec.source.node, request);
  if (!started) {
    const auto& e = started.error();
    const std::string r = e.code == ErrorCode::NotFound ? reason::kRegionNotFound : reason_for(e);
    return AttemptError{r, "starting the transfer" + on(spec.source.node) + " failed: " + e.message};
  }
  p.run.transfer = NodeRef{spec.source.node, started->id};
  if (!save_run(p)) {
    // The transfer's id could not be recorded: stop it now rather than let it run unaccounted for.
    (void)agents_.cancel_transfer(spec.source.node, started->id, p.key.ns);
    return std::nullopt;
  }
  const std::size_t done = spec.targets.size() - sending.size();
  const std::string message =
      "attempt " + std::to_string(p.run.attempt) + ": transfer " + started->id + on(spec.source.node) +
      " moving " + std::to_string(p.run.length) + " bytes to " + std::to_string(sending.size()) + " target" +
      (sending.size() == 1 ? "" : "s") +
      (done > 0 ? " (" + std::to_string(done) + " landed in an earlier attempt)" : "") +
      (resumed > 0 ? ", resuming after " + std::to_string(resumed) +
                         " bytes earlier attempts left in place (verified again)"
                   : "");
  // The transport that runs is in status.targets[].transport; a fallback says why in the condition too.
  const std::string condition_message = p.fallback.empty() ? message : message + "; " + p.fallback;
  set_condition(p.status, "Running", true, "TransferStarted", condition_message, p.now, p.generation);
  track(p, *started);
  store_.record_event(p.key, "Normal", "Started", message);
  if (!p.fallback.empty()) store_.record_event(p.key, "Warning", "TransportFallback", p.fallback);
  log::info("transfer started", {{"job", p.job_name()},
                                 {"node", spec.source.node},
                                 {"transfer", started->id},
                                 {"attempt", std::to_string(p.run.attempt)},
                                 {"bytes", std::to_string(p.run.length)}});
  return std::nullopt;
}

void Reconciler::begin_attempt(Pass& p) {
  const auto& spec = p.spec();
  p.run.attempt += 1;
  p.run.not_before.reset();
  p.run.subset_version.reset();  // read again once this attempt's subset landed
  // Keys an earlier attempt could not revoke (their node did not answer) go before new ones are handed out.
  if (!p.run.unrevoked.empty()) release(p, /*drop_source=*/false);
  if (!p.status.contains("startTime")) p.status["startTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["phase"] = phase::kRunning;
  set_condition(p.status, "Accepted", true, "Accepted", "the spec is valid and every node has an agent",
                p.now, p.generation);
  json targets = json::array();
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    const auto& t = spec.targets[i];
    json entry = target_entry(t);
    entry["state"] = "Preparing";
    if (p.run.target_landed(i)) {
      entry["state"] = "Succeeded";  // in an earlier attempt: not sent again
      entry["bytes"] = p.run.length;
    }
    targets.push_back(std::move(entry));
  }
  p.status["targets"] = std::move(targets);
}

std::vector<std::uint32_t> Reconciler::targets_to_send(const Pass& p) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < p.spec().targets.size(); ++i) {
    if (!p.run.target_landed(i)) out.push_back(i);
  }
  return out;
}

// A file source is read as it goes out (the pipeline of docs/pipelines.md) unless a target is CUDA memory,
// which is written through the staging path from a loaded host region.
bool Reconciler::streams_source(const Pass& p) {
  const auto& spec = p.spec();
  if (spec.source.file.empty()) return false;
  for (const auto& t : spec.targets) {
    if (t.region.empty()) continue;
    if (t.create) {
      if (t.create->memory != "host") return false;
      continue;
    }
    auto r = agents_.get_region(t.node, t.region);
    if (r && r->memory != "host") return false;
  }
  return true;
}

std::optional<Reconciler::AttemptError> Reconciler::prepare_source(Pass& p) {
  const auto& src = p.spec().source;
  // The agent could not read the source file: SourceFileNotFound when it is not there, else the agent's
  // error while `doing` ("looking up", "loading").
  auto source_file_error = [&](const conduit::Error& e, const std::string& doing) -> AttemptError {
    if (e.code == ErrorCode::NotFound) {
      return {reason::kSourceFileNotFound, "source file \"" + src.file +
                                               "\" was not found under the data directory of the agent" +
                                               on(src.node) + ": " + e.message};
    }
    // A refusal (another namespace's file under --namespace-files) is the same answer at every retry.
    return {reason_for(e), doing + " \"" + src.file + "\"" + on(src.node) + " failed: " + e.message,
            /*permanent=*/e.code == ErrorCode::Forbidden};
  };
  if (src.region.empty() && streams_source(p)) {
    if (p.run.source && p.run.source_temporary) {
      // Loaded by an attempt of an older controller: no longer needed.
      delete_region_when_free(p, *p.run.source);
      p.run.source.reset();
      p.run.source_temporary = false;
    }
    auto size = agents_.file_size(src.node, src.file, p.key.ns);
    if (!size) return source_file_error(size.error(), "looking up");
    p.run.length = *size;
    if (p.run.length == 0) return AttemptError{reason::kSizeMismatch, "the source is empty (0 bytes)"};
    return std::nullopt;
  }
  if (!src.region.empty()) {
    auto r = agents_.get_region(src.node, src.region);
    if (!r) {
      if (r.error().code == ErrorCode::NotFound) {
        return AttemptError{reason::kRegionNotFound,
                            missing("source region \"" + src.region + "\"" + on(src.node), src.pod)};
      }
      return AttemptError{reason_for(r.error()),
                          "looking up the source region" + on(src.node) + ": " + r.error().message};
    }
    if (auto e = pod_ownership(*r, "source region \"" + src.region + "\"" + on(src.node), p.key.ns, src.pod))
      return e;
    if (auto why = not_shared(*r, "source region \"" + src.region + "\"" + on(src.node), p.key.ns)) {
      return AttemptError{reason::kRegionNotShared, *why, /*permanent=*/true};
    }
    p.run.source = NodeRef{src.node, src.region};
    p.run.source_temporary = false;
    p.run.length = r->bytes;
    p.source_memory = r->memory;
    if (auto e = read_source_manifest(p, *r)) return e;
  } else {
    const std::string name = temporary_region_name(p.job);
    const bool ours = p.run.source && p.run.source_temporary && p.run.source->name == name;
    std::optional<api::Region> region;
    if (ours) {
      // Loaded by an earlier attempt (or an earlier controller): reuse it.
      auto r = agents_.get_region(src.node, name);
      if (r) {
        region = *r;
      } else if (r.error().code != ErrorCode::NotFound) {
        return AttemptError{reason_for(r.error()),
                            "looking up the loaded source" + on(src.node) + ": " + r.error().message};
      }
    } else {
      p.run.source = NodeRef{src.node, name};
      p.run.source_temporary = true;
      if (!save_run(p)) return std::nullopt;
    }
    if (!region) {
      auto r = agents_.load_file(src.node, name, src.file, p.key.ns);
      if (!r && r.error().code == ErrorCode::AlreadyExists) r = agents_.get_region(src.node, name);
      if (!r) return source_file_error(r.error(), "loading");
      region = *r;
      log::info("source file loaded", {{"job", p.job_name()},
                                       {"file", src.file},
                                       {"region", name},
                                       {"bytes", std::to_string(region->bytes)}});
    }
    p.run.length = region->bytes;
    if (auto e = read_source_manifest(p, *region)) return e;
  }
  if (p.run.length == 0) return AttemptError{reason::kSizeMismatch, "the source is empty (0 bytes)"};
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::read_source_manifest(Pass& p, const api::Region& source) {
  p.source_manifest.reset();
  if (!source.tensors) return std::nullopt;  // the region names no tensors
  auto m = agents_.manifest(p.run.source->node, p.run.source->name);
  if (!m) {
    return AttemptError{reason_for(m.error()),
                        "reading the source's manifest" + on(p.run.source->node) + ": " + m.error().message};
  }
  p.source_manifest = std::move(*m);
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::plan_tensors(Pass& p) {
  p.subset.clear();
  p.subset_reach = 0;
  const auto& spec = p.spec();
  if (spec.tensors.empty()) return std::nullopt;
  const std::string source = "source region \"" + spec.source.region + "\"" + on(spec.source.node);
  if (!p.source_manifest) {
    return AttemptError{reason::kTensorMismatch,
                        source +
                            " has no manifest: spec.tensors names tensors of a region that holds them "
                            "(made with a manifest, or loaded from a .safetensors file)",
                        /*permanent=*/true};
  }
  for (const auto& t : spec.targets) {
    const std::string what = "target region \"" + t.region + "\"" + on(t.node);
    std::optional<api::Manifest> target;
    if (t.create) {
      // Created with the source's manifest when it fits, so the tensors land where the source has them.
      if (p.source_manifest->data_bytes() > t.create->bytes) {
        return AttemptError{reason::kSizeMismatch,
                            what + ": create.bytes " + std::to_string(t.create->bytes) +
                                " is smaller than the source's tensors (" +
                                std::to_string(p.source_manifest->data_bytes()) + " bytes)",
                            /*permanent=*/true};
      }
      target = p.source_manifest;
    } else {
      auto r = agents_.get_region(t.node, t.region);
      if (!r && r.error().code == ErrorCode::NotFound) {
        return AttemptError{reason::kRegionNotFound,
                            t.pod ? missing(what, t.pod) : what + " does not exist; add create: {bytes: N}"};
      }
      if (!r) return AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message};
      if (!r->tensors) {
        return AttemptError{reason::kTensorMismatch,
                            what + " has no manifest: spec.tensors moves into the same tensors of the target",
                            /*permanent=*/true};
      }
      auto m = agents_.manifest(t.node, t.region);
      if (!m) {
        return AttemptError{reason_for(m.error()),
                            "reading the manifest of " + what + ": " + m.error().message};
      }
      target = std::move(*m);
    }
    auto ops = api::plan_subset(*p.source_manifest, *target, spec.tensors);
    if (!ops)
      return AttemptError{reason::kTensorMismatch, what + ": " + ops.error().message, /*permanent=*/true};
    // One target (a PointToPoint job, spec.tensors' rule): its ops are the batch.
    p.subset = std::move(*ops);
    for (const auto& op : p.subset) p.subset_reach = std::max(p.subset_reach, op.target_offset + op.length);
  }
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::prepare_targets(Pass& p) {
  // A subset needs room for the tensors it reaches, not for the whole source.
  const std::uint64_t length = p.subset.empty() ? p.run.length : p.subset_reach;
  const auto& targets = p.spec().targets;
  auto what = [&](const TargetSpec& t) { return "target region \"" + t.region + "\"" + on(t.node); };
  auto check_size = [&](const TargetSpec& t, const api::Region& r) -> std::optional<AttemptError> {
    if (r.bytes >= length) return std::nullopt;
    return AttemptError{reason::kSizeMismatch, what(t) + " has " + std::to_string(r.bytes) +
                                                   " bytes, fewer than the source's " +
                                                   std::to_string(length)};
  };
  // First what exists and what to create; the regions to create are recorded before any is created.
  struct ToCreate {
    std::size_t target;
    bool ours;  // recorded by an earlier pass: an AlreadyExists is ours
  };
  std::vector<ToCreate> to_create;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    if (t.region.empty()) continue;  // a file target: its grant brings a ring
    if (!t.create) {
      auto r = agents_.get_region(t.node, t.region);
      if (!r && r.error().code == ErrorCode::NotFound) {
        return AttemptError{reason::kRegionNotFound,
                            t.pod ? missing(what(t), t.pod)
                                  : what(t) + " does not exist; add create: {bytes: N} to allocate it"};
      }
      if (!r) return AttemptError{reason_for(r.error()), "looking up " + what(t) + ": " + r.error().message};
      if (auto e = pod_ownership(*r, what(t), p.key.ns, t.pod)) return e;
      if (auto why = not_shared(*r, what(t), p.key.ns)) {
        return AttemptError{reason::kRegionNotShared, *why, /*permanent=*/true};
      }
      if (auto e = check_size(t, *r)) return e;
      continue;
    }
    if (t.create->bytes < length) {
      return AttemptError{reason::kSizeMismatch,
                          what(t) + ": create.bytes " + std::to_string(t.create->bytes) +
                              " is smaller than the source's " + std::to_string(length) + " bytes"};
    }
    const bool ours = p.run.created_region(t.node, t.region);
    if (ours) {
      auto r = agents_.get_region(t.node, t.region);
      if (r) {
        if (auto e = check_size(t, *r)) return e;
        continue;
      }
      if (r.error().code != ErrorCode::NotFound) {
        return AttemptError{reason_for(r.error()), "looking up " + what(t) + ": " + r.error().message};
      }
    } else {
      p.run.created.push_back({t.node, t.region});
    }
    // A region created now holds none of the bytes an earlier attempt landed (its agent restarted).
    if (p.run.target_landed(i)) p.run.landed[i] = false;
    to_create.push_back({i, ours});
  }
  if (to_create.empty() || !save_run(p)) return std::nullopt;

  // Then every region at once: an agent answers as soon as the region exists (its pages fault in behind),
  // so N targets cost one round trip, not N.
  auto created = in_parallel<Result<api::Region>>(to_create.size(), [&](std::size_t j) {
    const auto& t = targets[to_create[j].target];
    api::CreateRegion region{
        .name = t.region, .bytes = t.create->bytes, .memory = t.create->memory, .ns = p.key.ns};
    if (p.source_manifest && p.source_manifest->data_bytes() <= t.create->bytes)
      region.manifest = p.source_manifest;
    return agents_.create_region(t.node, region);
  });
  std::optional<AttemptError> error;
  for (std::size_t j = 0; j < to_create.size(); ++j) {
    const auto& t = targets[to_create[j].target];
    auto& r = created[j];
    if (r || (r.error().code == ErrorCode::AlreadyExists && to_create[j].ours))
      continue;  // ours, by a racing pass
    if (r.error().code == ErrorCode::AlreadyExists) {
      // Someone else's: never ours to delete.
      std::erase(p.run.created, NodeRef{t.node, t.region});
      if (!error) {
        error = AttemptError{reason::kRegionAlreadyExists,
                             what(t) + " already exists; delete it, or leave out create to write into it"};
      }
      continue;
    }
    if (error) continue;
    if (r.error().code == ErrorCode::ResourceExhausted) {
      // Over what is free now may fit after a retry; over the agent's whole cap never will.
      const auto info = agents_.node_info(t.node);
      const json memory = info && info->is_object() ? info->value("memory", json::object()) : json::object();
      const std::uint64_t cap = memory.is_object() ? memory.value("cap", std::uint64_t{0}) : 0;
      if (cap > 0 && t.create->bytes > cap) {
        error =
            AttemptError{reason::kInsufficientMemory,
                         what(t) + ": create.bytes " + std::to_string(t.create->bytes) +
                             " is more than the agent's whole memory cap of " + std::to_string(cap) +
                             " bytes, so retrying cannot help; raise its --memory-cap or choose another node",
                         /*permanent=*/true};
        continue;
      }
    }
    error = AttemptError{reason_for(r.error()), "creating " + what(t) + " failed: " + r.error().message};
  }
  if (!save_run(p)) return std::nullopt;
  return error;
}

std::optional<Reconciler::AttemptError> Reconciler::take_grants(Pass& p) {
  const auto& spec = p.spec();
  // The spec's transport, or the one the pre-flight fell back to.
  const std::string& wanted = p.transport;
  // A target that landed in an earlier attempt keeps what that attempt recorded of it.
  p.run.transports.resize(spec.targets.size(), "");
  p.run.saved_as_landed.resize(spec.targets.size(), false);
  p.grants_taken.clear();

  // What to ask each target's agent for, decided here; the asks then go to every target at once (a
  // registration may take a while on a real NIC, and a Fanout should not wait for them one by one).
  const std::vector<std::uint32_t> sending = targets_to_send(p);
  std::vector<GrantAsk> asks;
  for (const std::uint32_t i : sending) {
    const auto& t = spec.targets[i];
    GrantAsk ask{.region = t.region,
                 .length = p.subset.empty() ? p.run.length : p.subset_reach,
                 .ttl_seconds = options_.grant_ttl_seconds,
                 .provider = "",
                 .save = "",
                 .writer = p.job_name(),
                 // The source's agent writes every target, except in a Chain, where the hop feeding each
                 // one changes as hops fail (docs/broadcast.md): those grants name no peer.
                 .peer = spec.strategy == Strategy::Chain ? std::string() : spec.source.node,
                 .ns = p.key.ns,
                 .pod = t.pod ? t.pod->uid : std::string()};
    // Saved as the bytes land where the target is host memory (a region of host memory, or none).
    if (!t.file.empty()) {
      auto memory = t.region.empty() ? std::string("host") : t.create ? t.create->memory : std::string();
      if (memory.empty()) {
        auto r = agents_.get_region(t.node, t.region);
        memory = r ? r->memory : "";
      }
      // The agent saves as bytes land only what a host-memory source or a file feeds.
      if (memory == "host" && p.source_memory == "host") ask.save = t.file;
      if (t.region.empty() && ask.save.empty()) {
        return AttemptError{reason::kUnsupported,
                            "target " + std::to_string(i) +
                                " is a file with no region, which is written as "
                                "bytes land and needs a source in host memory or a file; give the target a "
                                "region to save from",
                            /*permanent=*/true};
      }
    }
    asks.push_back(std::move(ask));
  }

  struct Taken {
    Result<api::Grant> grant;
    bool no_transport = false;  // the wanted transport is not there (and no fallback took its place)
  };
  auto take = [&](std::size_t j) {
    const auto& t = spec.targets[sending[j]];
    GrantAsk ask = asks[j];
    auto with = [&](const std::string& provider) {
      ask.provider = provider;
      return agents_.grant(t.node, ask);
    };
    Taken out{with(wanted)};
    out.no_transport = !out.grant && (out.grant.error().code == ErrorCode::Unavailable ||
                                      out.grant.error().code == ErrorCode::Unsupported ||
                                      out.grant.error().code == ErrorCode::InvalidArgument);
    if (out.no_transport && spec.allow_fallback && !wanted.empty()) {
      // allowFallback: the agent's primary transport, then tcp, which every agent has.
      log::warn("transport unavailable, falling back", {{"job", p.job_name()},
                                                        {"node", t.node},
                                                        {"wanted", wanted},
                                                        {"error", out.grant.error().message}});
      out.grant = with("");
      if (!out.grant) out.grant = with("tcp");
    }
    return out;
  };
  std::vector<Taken> taken = in_parallel<Taken>(sending.size(), take);

  // Every grant an agent handed out is recorded (and so revoked by the next release), whatever failed.
  std::optional<AttemptError> error;
  for (std::size_t j = 0; j < sending.size(); ++j) {
    const std::size_t i = sending[j];
    const auto& t = spec.targets[i];
    auto& g = taken[j].grant;
    if (g) {
      p.run.grants.push_back({t.node, g->id});
      p.run.transports[i] = transport_name(g->provider);
      p.run.saved_as_landed[i] = !g->save_file().empty();
      p.grants_taken.push_back(*g);
      continue;
    }
    if (error) continue;
    if (taken[j].no_transport && !wanted.empty()) {
      error =
          AttemptError{reason::kTransportUnavailable,
                       "node \"" + t.node + "\" cannot use transport " + wanted + ": " + g.error().message +
                           (spec.allow_fallback ? "" : "; set transport.allowFallback: true to fall back")};
      continue;
    }
    const std::string what =
        t.region.empty() ? "a ring for file \"" + t.file + "\"" : "target region \"" + t.region + "\"";
    error =
        AttemptError{g.error().code == ErrorCode::NotFound ? reason::kRegionNotFound : reason_for(g.error()),
                     "granting access to " + what + on(t.node) + " failed: " + g.error().message,
                     /*permanent=*/g.error().code == ErrorCode::Forbidden};
  }
  if (!save_run(p)) return std::nullopt;
  return error;
}

std::optional<Reconciler::AttemptError> Reconciler::commit_subset(Pass& p) {
  const auto& spec = p.spec();
  if (spec.tensors.empty() || spec.targets.size() != 1) return std::nullopt;
  const auto& t = spec.targets[0];
  const std::string what = "target region \"" + t.region + "\"" + on(t.node);
  const auto grant = std::find_if(p.run.grants.begin(), p.run.grants.end(),
                                  [&](const NodeRef& g) { return g.node == t.node; });
  if (grant == p.run.grants.end())
    return AttemptError{reason::kTransferLost, "the attempt's grant on " + what + " is not recorded"};
  if (!p.run.subset_version) {
    auto r = agents_.get_region(t.node, t.region);
    if (!r) return AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message};
    p.run.subset_version = r->version + 1;
    if (!save_run(p))
      return AttemptError{reason::kTransferLost, "the version to commit could not be recorded"};
  }
  const std::uint64_t k = *p.run.subset_version;
  const auto s = agents_.commit_grant(t.node, grant->name, p.run.length, k);
  if (s) return std::nullopt;
  if (s.error().code == ErrorCode::Conflict) {
    // At K or past it: this job's commit whose answer was lost, or another writer's after the subset landed;
    // either way the version readers see holds these bytes.
    auto again = agents_.get_region(t.node, t.region);
    if (again && again->version >= k) return std::nullopt;
  }
  return AttemptError{reason_for(s.error()), "committing " + what + " to version " + std::to_string(k) +
                                                 " failed: " + s.error().message};
}

std::optional<Reconciler::AttemptError> Reconciler::save_files(Pass& p) {
  const auto& targets = p.spec().targets;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    // Saved by its agent as the bytes landed, and committed before the transfer succeeded.
    if (t.file.empty() || (i < p.run.saved_as_landed.size() && p.run.saved_as_landed[i])) continue;
    const auto s = agents_.save_region(t.node, t.region, t.file, p.key.ns);
    if (!s) {
      const bool refused = s.error().code == ErrorCode::Forbidden;
      return AttemptError{refused ? reason::kRemoteAccessDenied : reason::kSaveFailed,
                          "saving target region \"" + t.region + "\"" + on(t.node) + " to \"" + t.file +
                              "\" failed: " + s.error().message,
                          refused};
    }
    log::info("target saved",
              {{"job", p.job_name()}, {"node", t.node}, {"region", t.region}, {"file", t.file}});
  }
  return std::nullopt;
}

}  // namespace conduit::controller
