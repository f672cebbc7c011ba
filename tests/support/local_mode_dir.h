// A local-mode conduit-controller's working directory, set up as every suite that runs the binary sets it up:
// jobs/ for the TransferJob files it watches, a token file for the agents it calls once one is written, and
// its command line over them. Removed with everything in it at the end, as a TempDir.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace conduit::testing {

class LocalModeDir : public TempDir {
 public:
  explicit LocalModeDir(const std::string& prefix);

  std::filesystem::path jobs() const { return path() / "jobs"; }
  std::filesystem::path token_file() const { return path() / "token"; }

  // The token the controller presents to the agents (--agent-token-file) from now on.
  void write_token(const std::string& token);

  // Writes jobs/NAME.yaml as an editor saves: aside, then renamed in, so a running controller never reads
  // half a file.
  void apply(const std::string& name, const std::string& yaml) const;

  // conduit-controller's command line: the job files in jobs/, node-a's and node-b's agents at these URLs,
  // the token file once written (none before: a controller with a client certificate in `extra`), logging
  // at `log_level`; `extra` flags follow (--once-job NAME, --agent-ca-file, ...).
  std::vector<std::string> controller(const std::string& node_a, const std::string& node_b,
                                      const std::vector<std::string>& extra = {},
                                      const std::string& log_level = "warn") const;

 private:
  bool token_written_ = false;
};

}  // namespace conduit::testing
