// conduit-controller: reconciles TransferJobs into agent transfers. Local mode (--local-dir) keeps the
// objects in a directory of YAML files; Kubernetes mode (without --local-dir) keeps them in the API server.
// Local mode finds agents from --agents; Kubernetes mode also from the agent Service's EndpointSlices, and
// with --agent-signer-cert its leader signs the agents' per-node client certificates (CSRs).
// SIGTERM/SIGINT stop it cleanly; running agent transfers carry on and the next controller reattaches.
#include <signal.h>

#include <iostream>

#include "conduit/common/log.h"
#include "config.h"
#include "kube_mode.h"
#include "local_mode.h"

namespace conduit::controller {
namespace {

constexpr int kUsageError = 2;

int run(int argc, char** argv) {
  auto parsed = parse_config(argc, argv);
  if (!parsed) {
    std::cerr << "conduit-controller: " << parsed.error().message << "\n";
    return kUsageError;
  }
  if (parsed->help) {
    std::cout << parsed->help_text;
    return 0;
  }
  const ControllerConfig& config = parsed->config;
  log::Level level{};
  log::parse_level(config.log_level, level);  // checked by parse_config
  log::configure(level, /*json=*/false);
  // Signals go to the main thread only, which waits for them: blocked before any thread starts, so the
  // workers and watchers never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return config.local ? run_local_mode(config, signals) : run_kube_mode(config, signals);
}

}  // namespace
}  // namespace conduit::controller

int main(int argc, char** argv) {
  try {
    return conduit::controller::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "conduit-controller: " << e.what() << "\n";
    return 1;
  }
}
