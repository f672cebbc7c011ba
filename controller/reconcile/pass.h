// Internal to the reconciler (reconciler.cpp, attempt.cpp): one reconcile pass over one job, holding the
// object as read, the status and run state being built, and what has been stored so far.
#pragma once

#include <nlohmann/json.hpp>

#include "reconciler.h"

namespace conduit::controller {

struct Reconciler::Pass {
  Pass(ObjectKey k, nlohmann::json j, Memory& m, TimePoint t)
      : key(std::move(k)), job(std::move(j)), memory(m), now(t) {}

  ObjectKey key;
  nlohmann::json job;  // metadata refreshed after each metadata patch
  nlohmann::json stored_status;
  nlohmann::json status;  // what the store should hold at the end of the pass
  RunState stored_run;
  RunState run;
  JobView view;
  Observation seen;  // what the source agent said this pass
  Memory& memory;
  TimePoint now;
  std::int64_t generation = 0;
  bool store_error = false;  // the store refused a write: stop here, look again soon
  bool skip_flush = false;   // the object is going away
  bool forget = false;       // ... and so is what the reconciler remembers of it (after the pass)
  std::optional<std::chrono::milliseconds> wait;
  std::vector<api::Grant> grants_taken;  // run.grants as their agents answered, taken this pass
  std::string source_memory = "host";    // the source region's memory ("host", "cuda:0"); files: host
  // The named tensors the source holds (a region made with a manifest, a .safetensors file): the target
  // regions the job creates are made with it, so a receiver finds the tensors where the source had them.
  std::optional<api::Manifest> source_manifest;
  // spec.tensors: the one target's scatter batch (api/tensor_subset.h), and how far into the target region
  // its ops reach (the grant's length).
  std::vector<api::ScatterOp> subset;
  std::uint64_t subset_reach = 0;
  std::string transport;  // what the pre-flight said to ask the targets' agents for ("": their choice)
  std::string fallback;   // why that is not the spec's transport (allowFallback); "" when it is

  const TransferJobSpec& spec() const { return *view.spec; }
  std::string job_name() const { return key.ns.empty() ? key.name : key.ns + "/" + key.name; }
};

}  // namespace conduit::controller
