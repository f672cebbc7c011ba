// The JSON merge patch (RFC 7386) that turns one document into another: what to send so that the stored
// object's field ends up exactly `to` ("replace the status"), rather than `to` merged into what was there.
#pragma once

#include <nlohmann/json.hpp>

namespace conduit::kube {

// Keys of `from` missing in `to` become null (delete); nested objects recurse; anything else is taken whole
// (merge patch replaces arrays). An empty object means no change. Nulls inside `to` cannot be expressed.
nlohmann::json merge_patch_diff(const nlohmann::json& from, const nlohmann::json& to);

}  // namespace conduit::kube
