#include "reshard_planning.h"

#include "conduit/api/reshard_plan.h"

namespace conduit::controller {

namespace {

// One cache for every job of this controller: a job run each training step, or its next attempt, finds
// its plan by fingerprint instead of planning again.
api::ReshardPlanner& planner() {
  static api::ReshardPlanner cached;
  return cached;
}

std::vector<api::ReshardSide> sides(const std::vector<ReshardSideInput>& in) {
  std::vector<api::ReshardSide> out;
  out.reserve(in.size());
  for (const auto& s : in) out.push_back({s.manifest, s.rate_bytes_per_second.value_or(0)});
  return out;
}

}  // namespace

Result<PlannedReshard> plan_reshard(const std::vector<ReshardSideInput>& sources,
                                    const std::vector<ReshardSideInput>& targets) {
  auto planned = planner().plan(sides(sources), sides(targets));
  if (!planned) return planned.error();
  const api::ReshardPlan& plan = *planned->plan;
  PlannedReshard out;
  out.fingerprint = plan.fingerprint;
  out.figures.busiest_target = plan.busiest.side == api::ReshardLinkSide::Target;
  out.figures.busiest = static_cast<std::uint32_t>(plan.busiest.index);
  out.figures.busiest_bytes = plan.busiest.bytes;
  out.figures.lower_bound_seconds = plan.lower_bound_seconds;
  out.batches.reserve(plan.batches.size());
  out.ops.reserve(plan.batches.size());
  for (const auto& b : plan.batches) {
    out.batches.push_back({.source = static_cast<std::uint32_t>(b.source),
                           .target = static_cast<std::uint32_t>(b.target),
                           .bytes = b.bytes,
                           .ops = static_cast<std::uint32_t>(b.ops.size())});
    out.ops.push_back(b.ops);
    out.figures.bytes += b.bytes;
  }
  return out;
}

}  // namespace conduit::controller
