#include "merge_patch.h"

namespace conduit::kube {

nlohmann::json merge_patch_diff(const nlohmann::json& from, const nlohmann::json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  nlohmann::json patch = nlohmann::json::object();
  for (const auto& [key, value] : from.items()) {
    if (!to.contains(key)) patch[key] = nullptr;
  }
  for (const auto& [key, value] : to.items()) {
    auto old = from.find(key);
    if (old == from.end()) {
      patch[key] = value;
    } else if (*old != value) {
      patch[key] = merge_patch_diff(*old, value);
    }
  }
  return patch;
}

}  // namespace conduit::kube
