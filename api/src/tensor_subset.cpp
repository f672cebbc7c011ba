// The subset planner: patterns to the selected tensors, each checked against the target's, then to ops.
#include "conduit/api/tensor_subset.h"

#include <fnmatch.h>

#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

namespace conduit::api {

namespace {

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }

// A name as an error quotes it: whole unless it is long (names run to 1 KiB).
std::string quoted(const std::string& name) {
  return "\"" + (name.size() <= 128 ? name : name.substr(0, 128) + "...") + "\"";
}

std::string described(const Tensor& t) { return t.dtype + " " + nlohmann::json(t.shape).dump(); }

}  // namespace

bool tensor_name_matches(const std::string& pattern, const std::string& name) {
  // No FNM_PATHNAME or FNM_PERIOD: tensor names are dotted paths, and a glob is meant to cross the dots.
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

Result<std::vector<ScatterOp>> plan_subset(const Manifest& source, const Manifest& target,
                                           const std::vector<std::string>& patterns) {
  if (patterns.empty()) return bad("tensors: name at least one tensor (a name or a glob)");
  // By name: a model's manifest holds up to a million tensors, and Manifest::find is a scan.
  std::unordered_map<std::string_view, const Tensor*> by_name;
  by_name.reserve(target.tensors.size());
  for (const Tensor& t : target.tensors) by_name.emplace(t.name, &t);
  std::vector<bool> used(patterns.size(), false);
  std::vector<ScatterOp> ops;
  for (const Tensor& t : source.tensors) {
    bool selected = false;
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      if (tensor_name_matches(patterns[i], t.name)) selected = used[i] = true;
    }
    if (!selected) continue;
    const auto found = by_name.find(t.name);
    const Tensor* there = found == by_name.end() ? nullptr : found->second;
    if (!there) return bad("tensor " + quoted(t.name) + " is not in the target region's manifest");
    if (there->dtype != t.dtype || there->shape != t.shape) {
      return bad("tensor " + quoted(t.name) + " is " + described(t) + " in the source but " +
                 described(*there) + " in the target");
    }
    if (t.length == 0) continue;  // matched, and nothing to move
    // Back to back on both sides: one op, which the agent moves as one range.
    if (!ops.empty() && ops.back().source_offset + ops.back().length == t.offset &&
        ops.back().target_offset + ops.back().length == there->offset) {
      ops.back().length += t.length;
      continue;
    }
    if (ops.size() == kMaxScatterOps) {
      return bad("tensors: the subset takes more than " + std::to_string(kMaxScatterOps) +
                 " separate ranges (at tensor " + quoted(t.name) +
                 "): name fewer tensors or move the region");
    }
    ops.push_back({t.offset, there->offset, t.length});
  }
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    if (!used[i])
      return bad("tensors[" + std::to_string(i) + "]: " + quoted(patterns[i]) +
                 " matches no tensor in the source region's manifest");
  }
  if (ops.empty()) return bad("tensors: the selected tensors are all empty: there is nothing to move");
  return ops;
}

}  // namespace conduit::api
