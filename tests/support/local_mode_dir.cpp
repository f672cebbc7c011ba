#include "local_mode_dir.h"

#include <fstream>

#include "build_paths.h"

namespace conduit::testing {

LocalModeDir::LocalModeDir(const std::string& prefix) : TempDir(prefix) {
  std::filesystem::create_directories(jobs());
}

void LocalModeDir::write_token(const std::string& token) {
  std::ofstream(token_file()) << token << "\n";
  token_written_ = true;
}

void LocalModeDir::apply(const std::string& name, const std::string& yaml) const {
  const auto tmp = path() / (name + ".tmp");
  std::ofstream(tmp) << yaml;
  std::filesystem::rename(tmp, jobs() / (name + ".yaml"));
}

std::vector<std::string> LocalModeDir::controller(const std::string& node_a, const std::string& node_b,
                                                  const std::vector<std::string>& extra,
                                                  const std::string& log_level) const {
  std::vector<std::string> argv{built_binary("conduit-controller"), "--local-dir", jobs().string(),
                                "--agents", "node-a=" + node_a + ",node-b=" + node_b};
  if (token_written_) argv.insert(argv.end(), {"--agent-token-file", token_file().string()});
  argv.insert(argv.end(), {"--log-level", log_level});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

}  // namespace conduit::testing
