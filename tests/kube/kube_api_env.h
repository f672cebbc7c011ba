// A real etcd + kube-apiserver for the tests that need one, started by scripts/kube-env.sh on 127.0.0.1 the
// first time a test asks for it and stopped by a GoogleTest environment when the process ends, so unit tests
// in the same binary never pay for it. Without the binaries (scripts/kube-tools.sh not run) those tests skip.
// CONDUIT_KUBE_ENV_DIR naming a kube-env directory (the ctest fixture's) reuses it and leaves it running.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "eventually.h"
#include "kube_client/client.h"
#include "kube_client/kube_config.h"

namespace conduit::kube::testing {

// The TransferJob resource, the one most API tests create and watch.
inline const kube_client::Resource& jobs() { return kube_client::resources::transfer_jobs(); }

inline constexpr const char* kNoApiServer = "no kube-apiserver built (run scripts/kube-tools.sh)";

class KubeApi {
 public:
  // Starts the API server and applies the CRDs on first use.
  static KubeApi& get();
  static void shutdown();  // from the environment's TearDown

  bool tools_missing() const { return tools_missing_; }
  const std::string& start_error() const { return start_error_; }  // binaries there, but it did not come up
  const std::string& dir() const { return dir_; }
  std::string kubeconfig() const { return dir_ + "/kubeconfig"; }
  kube_client::KubeConfig config() const;  // parsed from kubeconfig()
  std::string token() const;

 private:
  void start();
  void stop();
  Status apply_crds();

  bool tools_missing_ = false;
  std::string start_error_;
  std::string dir_;
  bool owned_ = false;  // we started it (and remove dir_ at the end)
};

// A test against the real API server: skips without binaries, fails when it will not start, and gets a client
// and a namespace of its own.
class KubeApiTest : public ::testing::Test {
 protected:
  void SetUp() override;

  KubeApi* api_ = nullptr;
  std::unique_ptr<kube_client::KubeClient> client_;
  std::string ns_;
};

// The test's objects from crds/examples (the file's first document), named `name` in `ns`.
nlohmann::json example(const std::string& file, const std::string& ns, const std::string& name = {});
// The text after "# expect: " in an example file.
std::string expected_message(const std::string& file);

// Polls `pred` every 20 ms until it holds or `timeout` passes.
using conduit::testing::eventually;

}  // namespace conduit::kube::testing
