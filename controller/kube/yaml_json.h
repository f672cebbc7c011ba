// YAML documents as the JSON the API server speaks: kubeconfig files, CRDs and example objects are YAML,
// the wire is JSON. Plain scalars are typed as YAML 1.2's core schema types them (as kubectl does), quoted
// ones stay strings.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "conduit/result.h"

namespace conduit::controller::kube {

nlohmann::json yaml_to_json(const YAML::Node& node);

// Every non-empty document of a (possibly multi-document) YAML text; a parse error names the line.
Result<std::vector<nlohmann::json>> parse_yaml_documents(const std::string& text);
Result<std::vector<nlohmann::json>> load_yaml_file(const std::string& path);

}  // namespace conduit::controller::kube
