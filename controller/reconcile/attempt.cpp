// Starting an attempt: check the nodes, make the source and target regions ready, take grants on the targets
// and start one agent transfer on the source. Each thing the job comes to hold is recorded in the run
// annotation as soon as it exists (regions before they are created), so a restart can find and release it.
#include <algorithm>
#include <set>

#include "conduit/common/log.h"
#include "job_status.h"
#include "pass.h"

namespace conduit::controller {

using json = nlohmann::json;

namespace {

// The agent's errors as reasons. NotFound and AlreadyExists depend on what was asked, so callers say.
std::string reason_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::PeerUnreachable:
      return reason::kPeerUnreachable;
    case ErrorCode::ResourceExhausted:
      return reason::kInsufficientMemory;
    case ErrorCode::Unsupported:
      return reason::kUnsupported;
    case ErrorCode::InvalidArgument:
      return reason::kInvalidSpec;
    default:
      return reason::kAgentError;
  }
}

std::string on(const std::string& node) { return " on node \"" + node + "\""; }

}  // namespace

std::optional<Reconciler::AttemptError> Reconciler::start_attempt(Pass& p) {
  const auto& spec = p.spec();
  std::set<std::string> nodes{spec.source.node};
  for (const auto& t : spec.targets) nodes.insert(t.node);
  for (const auto& node : nodes) {
    if (agents_.url(node)) continue;
    return AttemptError{reason::kNodeNotFound,
                        "no conduit-agent is known on node \"" + node +
                            "\"; check the node name (FabricNodes list the known ones)"};
  }
  if (spec.strategy == Strategy::Chain) {
    return AttemptError{
        reason::kUnsupported,
        "strategy Chain is not implemented yet; use Fanout to write every target from the source"};
  }
  if (spec.targets.size() > 16) {
    return AttemptError{reason::kUnsupported, "an agent transfer reaches at most 16 targets; split the job"};
  }

  p.run.attempt += 1;
  p.run.not_before.reset();
  // Keys an earlier attempt could not revoke (their node did not answer) go before new ones are handed out.
  if (!p.run.unrevoked.empty()) release(p, /*drop_source=*/false);
  if (!p.status.contains("startTime")) p.status["startTime"] = format_rfc3339(p.now, TimePrecision::Millis);
  p.status["phase"] = phase::kRunning;
  set_condition(p.status, "Accepted", true, "Accepted", "the spec is valid and every node has an agent",
                p.now, p.generation);
  json targets = json::array();
  for (const auto& t : spec.targets) {
    json entry{{"node", t.node}, {"region", t.region}, {"state", "Preparing"}};
    if (!t.file.empty()) entry["file"] = t.file;
    targets.push_back(std::move(entry));
  }
  p.status["targets"] = std::move(targets);

  // Each step records what it is about to hold first; when that record could not be written (p.store_error)
  // it returns no error but must not be followed: a transfer started on grants we could not record could
  // neither be found again after a restart nor be told apart from another replica's.
  if (auto e = prepare_source(p); e || p.store_error) return e;
  if (auto e = prepare_targets(p); e || p.store_error) return e;
  if (auto e = take_grants(p); e || p.store_error) return e;

  TransferRequest request;
  if (p.run.source) {
    request.source_region = p.run.source->name;
  } else {
    request.source_file = spec.source.file;  // read as it goes out
  }
  request.length = p.run.length;
  request.chunk_bytes = spec.chunk_bytes;
  request.window = spec.window;
  request.verify = spec.verify;
  request.max_bytes_per_second = spec.max_bytes_per_second;
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
  const bool resume = spec.verify && p.run.resume.size() == spec.targets.size() &&
                      std::all_of(p.run.resume.begin(), p.run.resume.end(),
                                  [&](std::uint64_t r) { return r <= p.run.length; });
  if (!resume) p.run.resume.clear();
  std::uint64_t resumed = 0;
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    // The grant key is what the source writes with; the URL lets the source compare CRC32C slices.
    const GrantInfo& g = p.grants_taken.at(i);
    const bool restarts = !g.save_file().empty();
    TransferTarget target{g.key, agents_.url(spec.targets[i].node).value_or(""), spec.targets[i].region,
                          resume && !restarts ? p.run.resume[i] : 0};
    // Landing reports: verified where the bytes land, saved as they land.
    if (g.takes_reports() && (spec.verify || restarts)) target.grant_id = g.id;
    if (g.ring()) target.ring_bytes = g.length;
    target.save = restarts;
    request.targets.push_back(std::move(target));
    resumed += request.targets.back().resume_offset;
  }
  auto started = agents_.start_transfer(spec.source.node, request);
  if (!started) {
    const auto& e = started.error();
    const std::string r = e.code == ErrorCode::NotFound ? reason::kRegionNotFound : reason_for(e);
    return AttemptError{r, "starting the transfer" + on(spec.source.node) + " failed: " + e.message};
  }
  p.run.transfer = NodeRef{spec.source.node, started->id};
  if (!save_run(p)) {
    // The transfer's id could not be recorded: stop it now rather than let it run unaccounted for.
    (void)agents_.cancel_transfer(spec.source.node, started->id);
    return std::nullopt;
  }
  const std::string message = "attempt " + std::to_string(p.run.attempt) + ": transfer " + started->id +
                              on(spec.source.node) + " moving " + std::to_string(p.run.length) +
                              " bytes to " + std::to_string(spec.targets.size()) + " target" +
                              (spec.targets.size() == 1 ? "" : "s") +
                              (resumed > 0 ? ", resuming after " + std::to_string(resumed) +
                                                 " bytes earlier attempts left in place (verified again)"
                                           : "");
  set_condition(p.status, "Running", true, "TransferStarted", message, p.now, p.generation);
  track(p, *started);
  store_.record_event(p.key, "Normal", "Started", message);
  log::info("transfer started", {{"job", p.job_name()},
                                 {"node", spec.source.node},
                                 {"transfer", started->id},
                                 {"attempt", std::to_string(p.run.attempt)},
                                 {"bytes", std::to_string(p.run.length)}});
  return std::nullopt;
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
    return {reason_for(e), doing + " \"" + src.file + "\"" + on(src.node) + " failed: " + e.message};
  };
  if (src.region.empty() && streams_source(p)) {
    if (p.run.source && p.run.source_temporary) {
      // Loaded by an attempt of an older controller: no longer needed.
      delete_region_when_free(p, *p.run.source);
      p.run.source.reset();
      p.run.source_temporary = false;
    }
    auto size = agents_.file_size(src.node, src.file);
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
                            "source region \"" + src.region + "\" does not exist" + on(src.node)};
      }
      return AttemptError{reason_for(r.error()),
                          "looking up the source region" + on(src.node) + ": " + r.error().message};
    }
    p.run.source = NodeRef{src.node, src.region};
    p.run.source_temporary = false;
    p.run.length = r->bytes;
    p.source_memory = r->memory;
  } else {
    const std::string name = temporary_region_name(p.job);
    const bool ours = p.run.source && p.run.source_temporary && p.run.source->name == name;
    std::optional<RegionInfo> region;
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
      auto r = agents_.load_file(src.node, name, src.file);
      if (!r && r.error().code == ErrorCode::AlreadyExists) r = agents_.get_region(src.node, name);
      if (!r) return source_file_error(r.error(), "loading");
      region = *r;
      log::info("source file loaded", {{"job", p.job_name()},
                                       {"file", src.file},
                                       {"region", name},
                                       {"bytes", std::to_string(region->bytes)}});
    }
    p.run.length = region->bytes;
  }
  if (p.run.length == 0) return AttemptError{reason::kSizeMismatch, "the source is empty (0 bytes)"};
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::prepare_targets(Pass& p) {
  const std::uint64_t length = p.run.length;
  for (const auto& t : p.spec().targets) {
    if (t.region.empty()) continue;  // a file target: its grant brings a ring
    const std::string what = "target region \"" + t.region + "\"" + on(t.node);
    auto check_size = [&](const RegionInfo& r) -> std::optional<AttemptError> {
      if (r.bytes >= length) return std::nullopt;
      return AttemptError{reason::kSizeMismatch, what + " has " + std::to_string(r.bytes) +
                                                     " bytes, fewer than the source's " +
                                                     std::to_string(length)};
    };
    if (!t.create) {
      auto r = agents_.get_region(t.node, t.region);
      if (!r && r.error().code == ErrorCode::NotFound) {
        return AttemptError{reason::kRegionNotFound,
                            what + " does not exist; add create: {bytes: N} to allocate it"};
      }
      if (!r) return AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message};
      if (auto e = check_size(*r)) return e;
      continue;
    }
    if (t.create->bytes < length) {
      return AttemptError{reason::kSizeMismatch, what + ": create.bytes " + std::to_string(t.create->bytes) +
                                                     " is smaller than the source's " +
                                                     std::to_string(length) + " bytes"};
    }
    const bool ours = p.run.created_region(t.node, t.region);
    if (ours) {
      auto r = agents_.get_region(t.node, t.region);
      if (r) {
        if (auto e = check_size(*r)) return e;
        continue;
      }
      if (r.error().code != ErrorCode::NotFound) {
        return AttemptError{reason_for(r.error()), "looking up " + what + ": " + r.error().message};
      }
    } else {
      p.run.created.push_back({t.node, t.region});
      if (!save_run(p)) return std::nullopt;
    }
    auto r = agents_.create_region(t.node, t.region, t.create->bytes, t.create->memory);
    if (!r && r.error().code == ErrorCode::AlreadyExists) {
      if (ours) continue;  // created by us a moment ago, by a racing pass
      std::erase(p.run.created, NodeRef{t.node, t.region});
      if (!save_run(p)) return std::nullopt;
      return AttemptError{reason::kRegionAlreadyExists,
                          what + " already exists; delete it, or leave out create to write into it"};
    }
    if (!r && r.error().code == ErrorCode::ResourceExhausted) {
      // Over what is free now may fit after a retry; over the agent's whole cap never will.
      const auto info = agents_.node_info(t.node);
      const json memory = info && info->is_object() ? info->value("memory", json::object()) : json::object();
      const std::uint64_t cap = memory.is_object() ? memory.value("cap", std::uint64_t{0}) : 0;
      if (cap > 0 && t.create->bytes > cap) {
        return AttemptError{
            reason::kInsufficientMemory,
            what + ": create.bytes " + std::to_string(t.create->bytes) +
                " is more than the agent's whole memory cap of " + std::to_string(cap) +
                " bytes, so retrying cannot help; raise its --memory-cap or choose another node",
            /*permanent=*/true};
      }
    }
    if (!r) return AttemptError{reason_for(r.error()), "creating " + what + " failed: " + r.error().message};
  }
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::take_grants(Pass& p) {
  const auto& spec = p.spec();
  const std::string wanted =
      spec.transport == TransportType::Auto ? "" : std::string(to_string(spec.transport));
  p.run.transports.assign(spec.targets.size(), "");
  p.run.saved_as_landed.assign(spec.targets.size(), false);
  p.grants_taken.clear();
  for (std::size_t i = 0; i < spec.targets.size(); ++i) {
    const auto& t = spec.targets[i];
    GrantAsk ask{.region = t.region,
                 .length = p.run.length,
                 .ttl_seconds = options_.grant_ttl_seconds,
                 .provider = "",
                 .save = ""};
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
    auto take = [&](const std::string& provider) {
      ask.provider = provider;
      return agents_.grant(t.node, ask);
    };
    auto g = take(wanted);
    const bool no_transport =
        !g && (g.error().code == ErrorCode::Unavailable || g.error().code == ErrorCode::Unsupported ||
               g.error().code == ErrorCode::InvalidArgument);
    if (no_transport && spec.allow_fallback && !wanted.empty()) {
      // allowFallback: the agent's primary transport, then tcp, which every agent has.
      log::warn("transport unavailable, falling back",
                {{"job", p.job_name()}, {"node", t.node}, {"wanted", wanted}, {"error", g.error().message}});
      g = take("");
      if (!g) g = take("tcp");
    }
    if (!g) {
      if (no_transport && !wanted.empty()) {
        return AttemptError{
            reason::kTransportUnavailable,
            "node \"" + t.node + "\" cannot use transport " + wanted + ": " + g.error().message +
                (spec.allow_fallback ? "" : "; set transport.allowFallback: true to fall back")};
      }
      const std::string what =
          t.region.empty() ? "a ring for file \"" + t.file + "\"" : "target region \"" + t.region + "\"";
      return AttemptError{
          g.error().code == ErrorCode::NotFound ? reason::kRegionNotFound : reason_for(g.error()),
          "granting access to " + what + on(t.node) + " failed: " + g.error().message};
    }
    p.run.grants.push_back({t.node, g->id});
    p.run.transports[i] = transport_name(g->provider);
    p.run.saved_as_landed[i] = !g->save_file().empty();
    p.grants_taken.push_back(*g);
    if (!save_run(p)) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Reconciler::AttemptError> Reconciler::save_files(Pass& p) {
  const auto& targets = p.spec().targets;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    // Saved by its agent as the bytes landed, and committed before the transfer succeeded.
    if (t.file.empty() || (i < p.run.saved_as_landed.size() && p.run.saved_as_landed[i])) continue;
    const auto s = agents_.save_region(t.node, t.region, t.file);
    if (!s) {
      return AttemptError{reason::kSaveFailed, "saving target region \"" + t.region + "\"" + on(t.node) +
                                                   " to \"" + t.file + "\" failed: " + s.error().message};
    }
    log::info("target saved",
              {{"job", p.job_name()}, {"node", t.node}, {"region", t.region}, {"file", t.file}});
  }
  return std::nullopt;
}

}  // namespace conduit::controller
