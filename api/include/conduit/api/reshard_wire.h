// POST /v1/reshard/plans (agent/openapi.yaml, docs/reshard.md): the body a caller sends, manifests and link
// rates of both sides, and the plan the agent answers, each batch's ops packed as POST /v1/transfers takes
// them (opsPacked). One type per body, shared by the agent and its callers.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "conduit/api/reshard_plan.h"
#include "conduit/api/transfer.h"
#include "conduit/common/result.h"

namespace conduit::api {

// {"sources": [{"manifest": {...}, "rate"?: bytes/s}], "targets": [...]}: 1 to kMaxReshardRanks of each,
// each manifest read as Manifest::from_json reads one against a region of its data_bytes(), rate a number
// >= 0 (absent or 0: unknown). InvalidArgument naming the field ("sources[2].manifest.tensors[3] (w): ...").
struct ReshardPlanRequest {
  std::vector<ReshardSide> sources;
  std::vector<ReshardSide> targets;

  static Result<ReshardPlanRequest> from_json(const nlohmann::json& body);
  nlohmann::json to_json() const;
};

// {"fingerprint", "cached", "batches": [{"source", "target", "bytes", "ops", "runs", "opsPacked"}],
// "sources":
// [{"bytes"}], "targets": [{"bytes"}], "busiest": {"side": "source"|"target", "index", "bytes"},
// "lowerBoundSeconds"?}.
nlohmann::json reshard_plan_to_json(const ReshardPlan& plan, bool cached);

}  // namespace conduit::api
