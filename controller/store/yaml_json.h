// JSON -> YAML for the local store's job files; controller/store/yaml_json_reader.h reads them back. Strings
// that would read back as something else are quoted on the way out, so a round trip never changes a type:
// parse_yaml(to_yaml(x)) == x for every x that parse_yaml made.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "yaml_json_reader.h"

namespace conduit::controller {

std::string to_yaml(const nlohmann::json& value);

}  // namespace conduit::controller
