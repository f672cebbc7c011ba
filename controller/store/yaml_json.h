// YAML <-> JSON for the local store: objects are written by people as YAML and handled as the JSON the
// Kubernetes API speaks. Plain scalars are typed as YAML 1.2's core schema types them (so `bytes: 268435456`
// is a number and `suspend: true` a bool), quoted ones stay strings; strings that would read back as
// something else are quoted on the way out, so a round trip never changes a type.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>

#include "conduit/result.h"

namespace conduit::controller {

nlohmann::json yaml_to_json(const YAML::Node& node);
Result<nlohmann::json> parse_yaml(
    const std::string& text);  // InvalidArgument with yaml-cpp's line and column
std::string to_yaml(const nlohmann::json& value);

}  // namespace conduit::controller
