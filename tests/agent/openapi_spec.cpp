#include "openapi_spec.h"

#include <algorithm>
#include <cctype>

#include "build_paths.h"

namespace conduit::testing {

YAML::Node agent_openapi() { return YAML::LoadFile(source_dir() + "/agent/openapi.yaml"); }

std::vector<SpecOperation> spec_operations(const YAML::Node& spec) {
  const bool secured_by_default = spec["security"] && spec["security"].size() > 0;
  std::vector<SpecOperation> ops;
  for (const auto& path : spec["paths"]) {
    for (const auto& item : path.second) {
      std::string method = item.first.as<std::string>();
      if (method == "parameters" || method == "summary" || method == "description") continue;
      std::transform(method.begin(), method.end(), method.begin(),
                     [](unsigned char c) { return std::toupper(c); });
      const YAML::Node security = item.second["security"];
      const bool is_public = security ? security.size() == 0 : !secured_by_default;
      ops.push_back({method, path.first.as<std::string>(), is_public, item.second["responses"]});
    }
  }
  return ops;
}

}  // namespace conduit::testing
