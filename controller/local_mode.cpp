#include "local_mode.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include "conduit/common/log.h"
#include "conduit/common/unique_fd.h"
#include "discovery.h"
#include "metrics_server.h"
#include "reconcile/agent_api.h"
#include "reconcile/control_loop.h"
#include "reconcile/job_status.h"
#include "reconcile/reconciler.h"
#include "store/local_store.h"

namespace conduit::controller {
namespace {

using json = nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr int kUsageError = 2;
// With --once-job, the job is also looked at this often: a job file removed before the controller wrote
// anything into it ends with no write to hear.
constexpr std::chrono::milliseconds kOnceJobLook{1000};

// --once-job: 0 when the job Succeeded, 1 when it Failed (or vanished once seen), nullopt while it runs.
std::optional<int> job_outcome(ObjectStore& store, const ObjectKey& key, bool& seen) {
  auto job = store.get_job(key);
  if (!job) {
    if (!seen || job.error().code != ErrorCode::NotFound) return std::nullopt;
    std::cout << "transferjob " << key.ns << "/" << key.name << " was deleted before its outcome was seen"
              << std::endl;
    return 1;
  }
  seen = true;
  const json status = job->value("status", json::object());
  const std::string phase = status.value("phase", "");
  if (!is_terminal_phase(phase)) return std::nullopt;
  std::cout << "transferjob " << key.ns << "/" << key.name << " " << outcome_summary(status) << std::endl;
  return phase == phase::kSucceeded ? 0 : 1;
}

// What the main thread sleeps on: SIGTERM/SIGINT (a signalfd over the blocked set) and the store's writes
// of the --once-job job (an eventfd the write hook bumps), so either wakes it at once.
class MainWait {
 public:
  explicit MainWait(const sigset_t& signals)
      : signals_(::signalfd(-1, &signals, SFD_CLOEXEC)), written_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  bool ok() const { return signals_.valid() && written_.valid(); }

  // From any thread: the job was written.
  void written() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(written_.get(), &one, sizeof one);  // full only past 2^64 - 1
  }

  // Waits up to `timeout`; returns the signal that arrived, or 0.
  int wait(std::chrono::milliseconds timeout) const {
    pollfd fds[2] = {{signals_.get(), POLLIN, 0}, {written_.get(), POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(std::max<std::int64_t>(timeout.count(), 0))) <= 0) return 0;
    if (fds[1].revents != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto n = ::read(written_.get(), &count, sizeof count);
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(signals_.get(), &info, sizeof info) == sizeof info) return static_cast<int>(info.ssi_signo);
    }
    return 0;
  }

 private:
  UniqueFd signals_;
  UniqueFd written_;
};

}  // namespace

int run_local_mode(const ControllerConfig& config, const sigset_t& signals) {
  const LocalModeOptions& local = *config.local;
  const MainWait main_wait(signals);
  if (!main_wait.ok()) {
    std::cerr << "conduit-controller: signalfd/eventfd: " << std::strerror(errno) << "\n";
    return 1;
  }
  AgentDirectory directory(config.agents);
  HttpAgentApi agents(directory, config.agent_client);
  LocalStore store(local.dir);
  if (local.once_job) {
    store.on_write([&main_wait, once = *local.once_job](const ObjectKey& key) {
      if (key == once) main_wait.written();
    });
  }
  FabricFacts facts;  // discovery's, read before each attempt
  ReconcilerOptions reconciler_options;
  reconciler_options.facts = &facts;
  Reconciler reconciler(store, agents, system_clock(), reconciler_options);
  // Reconciles report into the metrics when they are served; the controller stops before they go away.
  std::unique_ptr<MetricsServer> metrics;
  ControlLoopOptions controller_options;
  controller_options.on_reconciled = [&metrics](double seconds, const char* error) {
    if (metrics) metrics->reconciled(seconds, error);
  };
  ControlLoop controller(store, reconciler, controller_options);
  // Local mode has no caches to sync and no leader election: ready, and reconciling, from the start.
  const std::atomic<bool> ready{true};
  if (!config.metrics_listen.empty()) {
    metrics = std::make_unique<MetricsServer>(
        ready, [] { return true; }, [&controller] { return controller.queue_depth(); }, store);
    if (std::string error; !metrics->listen(config.metrics_listen, error)) {
      std::cerr << "conduit-controller: " << error << "\n";
      return kUsageError;
    }
  }
  log::info(
      "conduit-controller started",
      {{"mode", "local"}, {"dir", local.dir.string()}, {"agents", std::to_string(directory.nodes().size())}});
  NodeDiscovery discovery(&facts);
  const auto discover = [&] {
    discovery.run(agents, directory, store);
    if (metrics) {
      const auto [reachable, unreachable] = discovery.reachable_counts();
      metrics->set_nodes(reachable, unreachable);
    }
  };
  discover();
  controller.start();

  int exit_code = 0;
  bool once_seen = false;
  auto next_discovery = Steady::now() + kDiscoveryPeriod;
  while (true) {
    if (local.once_job) {
      if (const auto outcome = job_outcome(store, *local.once_job, once_seen)) {
        exit_code = *outcome;
        break;
      }
    }
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(next_discovery - Steady::now());
    if (local.once_job) timeout = std::min(timeout, kOnceJobLook);
    if (const int sig = main_wait.wait(timeout); sig == SIGTERM || sig == SIGINT) {
      log::info("stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      exit_code = local.once_job ? 130 : 0;
      break;
    }
    if (Steady::now() >= next_discovery) {
      discover();
      next_discovery = Steady::now() + kDiscoveryPeriod;
    }
  }
  controller.stop();
  if (metrics) metrics->stop();
  log::info("conduit-controller stopped");
  return exit_code;
}

}  // namespace conduit::controller
