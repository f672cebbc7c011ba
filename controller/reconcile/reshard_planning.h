// The planner (conduit/api/reshard_plan.h) as a Reshard job uses it: the pods' manifests and link rates in,
// the batches to run (reshard_run.h) and their ops out. Plans are cached by fingerprint across jobs, so a
// job that runs every training step plans once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/api/transfer.h"
#include "conduit/common/result.h"
#include "reshard_run.h"

namespace conduit::controller {

struct ReshardSideInput {
  api::Manifest manifest;
  std::optional<double> rate_bytes_per_second;  // the pod's node's link; nullopt: unknown
};

struct PlannedReshard {
  std::string fingerprint;
  ReshardFigures figures;
  std::vector<ReshardBatch> batches;             // Pending, in the plan's order
  std::vector<std::vector<api::ScatterOp>> ops;  // per batch
};

// InvalidArgument naming the tensor and range when the planner refuses (a dtype or global shape that
// differs, a target range no source holds).
Result<PlannedReshard> plan_reshard(const std::vector<ReshardSideInput>& sources,
                                    const std::vector<ReshardSideInput>& targets);

}  // namespace conduit::controller
