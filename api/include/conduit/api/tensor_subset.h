// A subset of a region's named tensors moved into the same tensors of another region (docs/tensors.md,
// "Subsets"): the pure plan a TransferJob's `tensors:` and the SDK's `tensors=` turn into one scatter batch.
// A plan is a function of two manifests and the patterns alone, so the controller can make it, and fail
// closed naming the tensor, before a byte moves.
#pragma once

#include <string>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/api/transfer.h"
#include "conduit/common/result.h"

namespace conduit::api {

// Bounds on a subset's patterns: a TransferJob's spec.tensors holds at most this many, each at most
// Manifest::kMaxNameBytes long (the CRD says the same).
inline constexpr std::size_t kMaxTensorPatterns = 128;

// True when `name` matches `pattern` as fnmatch(3) without flags: `*` and `?` cross dots and slashes
// ("model.layers.0.*" takes every tensor of layer 0), `[...]` is a set, `\` quotes the next character.
bool tensor_name_matches(const std::string& pattern, const std::string& name);

// The ops that move the source's tensors selected by `patterns` (names or globs) into the same tensors of
// `target`: one per selected tensor, in source order, with runs that are back to back on both sides merged
// into one op. Zero-length tensors move nothing but must still match. InvalidArgument naming the pattern or
// the tensor: no patterns, a pattern matching no source tensor, a selected tensor missing in the target or
// with another dtype or shape there (both said), nothing to move at all, more than kMaxScatterOps ops.
Result<std::vector<ScatterOp>> plan_subset(const Manifest& source, const Manifest& target,
                                           const std::vector<std::string>& patterns);

}  // namespace conduit::api
