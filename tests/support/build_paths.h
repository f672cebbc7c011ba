// Where a test finds the repository and this build's executables, asked at run time. The paths are not
// compiled into the test files: a compile option naming the clone's directory would make every test file
// differ between clones, and ccache could answer none of them (cmake/build_speed.cmake).
#pragma once

#include <string>
#include <string_view>

namespace conduit::testing {

// The repository this tree was configured from (agent/openapi.yaml, crds/, scripts/).
std::string source_dir();

// One of this build's executables (conduit-agent, conduit, conduit-controller, conduit-test-peer, ...): every
// executable lands in <build>/bin (CMAKE_RUNTIME_OUTPUT_DIRECTORY), beside the test binary asking.
std::string built_binary(std::string_view name);

}  // namespace conduit::testing
