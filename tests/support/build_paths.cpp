#include "build_paths.h"

#include <filesystem>

namespace conduit::testing {

// The only translation unit that names the clone: CONDUIT_SOURCE_DIR is set on it alone
// (tests/CMakeLists.txt).
std::string source_dir() { return CONDUIT_SOURCE_DIR; }

std::string built_binary(std::string_view name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

}  // namespace conduit::testing
