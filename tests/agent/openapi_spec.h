// agent/openapi.yaml as the suites that walk every route read it (api_test: each answers as the spec says;
// access_test: each protected one refuses a missing token). Read from the file, so a route added there is
// covered by both without a test naming it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace conduit::testing {

struct SpecOperation {
  std::string method;  // GET, POST, DELETE
  std::string path;    // template
  bool is_public;      // security: [] in the spec (or no security at all by default)
  YAML::Node responses;
};

// The spec as it stands in this checkout.
YAML::Node agent_openapi();

// Every operation in `spec`, in the file's order.
std::vector<SpecOperation> spec_operations(const YAML::Node& spec);

}  // namespace conduit::testing
