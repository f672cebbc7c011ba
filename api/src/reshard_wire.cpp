#include "conduit/api/reshard_wire.h"

#include <cmath>

#include "conduit/common/base64.h"
#include "conduit/common/json_fields.h"

namespace conduit::api {

namespace {

using json = nlohmann::json;

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }

// One side's list, each entry {manifest, rate?}, for `name` ("sources", "targets").
Result<std::vector<ReshardSide>> side_from_json(const json& list, const std::string& name) {
  if (list.empty() || list.size() > kMaxReshardRanks) {
    return bad(name + ": give 1 to " + std::to_string(kMaxReshardRanks) + " manifests, got " +
               std::to_string(list.size()));
  }
  std::vector<ReshardSide> out;
  out.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = name + "[" + std::to_string(i) + "]";
    JsonFields f(list[i], at);
    f.only({"manifest", "rate"});
    const json* manifest = f.object("manifest", Need::Required);
    if (!f.ok()) return f.status().error();
    ReshardSide side;
    if (const auto rate = list[i].find("rate"); rate != list[i].end()) {
      if (!rate->is_number() || !std::isfinite(rate->get<double>()) || rate->get<double>() < 0) {
        return bad(at + ".rate: must be a number of bytes per second >= 0 (0: unknown)");
      }
      side.rate_bytes_per_second = rate->get<double>();
    }
    // The region is as long as its tensors: every range fits one of 2^64 - 1 bytes, data_bytes() then.
    auto m = Manifest::from_json(*manifest, UINT64_MAX);
    if (!m) return bad(at + ".manifest." + m.error().message);
    side.manifest = std::move(*m);
    out.push_back(std::move(side));
  }
  return out;
}

json side_to_json(const std::vector<ReshardSide>& sides) {
  json out = json::array();
  for (const ReshardSide& s : sides) {
    json entry = {{"manifest", s.manifest.to_json()}};
    if (s.rate_bytes_per_second > 0) entry["rate"] = s.rate_bytes_per_second;
    out.push_back(std::move(entry));
  }
  return out;
}

json link_bytes(const std::vector<std::uint64_t>& bytes) {
  json out = json::array();
  for (const std::uint64_t b : bytes) out.push_back({{"bytes", b}});
  return out;
}

}  // namespace

Result<ReshardPlanRequest> ReshardPlanRequest::from_json(const json& body) {
  JsonFields f(body, "");
  f.only({"sources", "targets"});
  const json* sources = f.array("sources", Need::Required);
  const json* targets = f.array("targets", Need::Required);
  if (!f.ok()) return f.status().error();
  ReshardPlanRequest out;
  auto s = side_from_json(*sources, "sources");
  if (!s) return s.error();
  auto t = side_from_json(*targets, "targets");
  if (!t) return t.error();
  out.sources = std::move(*s);
  out.targets = std::move(*t);
  return out;
}

json ReshardPlanRequest::to_json() const {
  return {{"sources", side_to_json(sources)}, {"targets", side_to_json(targets)}};
}

json reshard_plan_to_json(const ReshardPlan& plan, bool cached) {
  json batches = json::array();
  for (const ReshardBatch& b : plan.batches) {
    batches.push_back({{"source", b.source},
                       {"target", b.target},
                       {"bytes", b.bytes},
                       {"ops", b.ops.size()},
                       {"runs", b.runs},
                       {"opsPacked", pack_scatter_ops(b.ops)}});
  }
  json out = {{"fingerprint", plan.fingerprint},
              {"cached", cached},
              {"batches", std::move(batches)},
              {"sources", link_bytes(plan.source_bytes)},
              {"targets", link_bytes(plan.target_bytes)},
              {"busiest",
               {{"side", plan.busiest.side == ReshardLinkSide::Source ? "source" : "target"},
                {"index", plan.busiest.index},
                {"bytes", plan.busiest.bytes}}}};
  if (plan.lower_bound_seconds) out["lowerBoundSeconds"] = *plan.lower_bound_seconds;
  return out;
}

}  // namespace conduit::api
