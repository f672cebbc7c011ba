// conduit-controller: reconciles TransferJobs into agent transfers. Local mode (--local-dir) keeps the
// objects in a directory of YAML files; Kubernetes mode (without --local-dir) keeps them in the API server.
// Local mode finds agents from --agents; Kubernetes mode also from the agent Service's EndpointSlices, and
// with --agent-signer-cert its leader signs the agents' per-node client certificates (CSRs).
// SIGTERM/SIGINT stop it cleanly; running agent transfers carry on and the next controller reattaches.
#include <signal.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "conduit/common/log.h"
#include "discovery.h"
#include "kube_mode.h"
#include "metrics_server.h"
#include "reconcile/agent_api.h"
#include "reconcile/control_loop.h"
#include "reconcile/job_status.h"
#include "reconcile/reconciler.h"
#include "store/local_store.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace conduit::controller {
namespace {

constexpr int kUsageError = 2;

// "node-a=http://127.0.0.1:7070,node-b=http://..." (the flag may also be repeated).
bool parse_agents(const std::vector<std::string>& values, AgentDirectory& out, std::string& error) {
  for (const auto& value : values) {
    std::size_t start = 0;
    while (start <= value.size()) {
      const auto comma = value.find(',', start);
      const std::string item =
          value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? value.size() + 1 : comma + 1;
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || item.find("://", eq) == std::string::npos) {
        error = "--agents: want NODE=http://HOST:PORT, got \"" + item + "\"";
        return false;
      }
      const std::string node = item.substr(0, eq);
      if (!is_dns1123_subdomain(node)) {
        error = "--agents: \"" + node + "\" is not a valid node name";
        return false;
      }
      out.set(node, item.substr(eq + 1));
    }
  }
  return true;
}

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

int run(int argc, char** argv) {
  std::string agent_ca_file, agent_server_name, agent_client_cert, agent_client_key;
  std::string agent_signer_cert, agent_signer_key, agent_service_account;
  long long agent_certificate_max = 86400;
  std::string local_dir, token_file, once_job, log_level, kubeconfig, agent_service, agent_service_ns,
      lease_ns, lease_name, metrics_listen;
  std::vector<std::string> agents_flags, namespaces;
  bool leader_elect = false;
  double lease_duration = 15, renew_deadline = 10, retry_period = 2;
  po::options_description desc("conduit-controller: reconciles TransferJobs into conduit-agent transfers",
                               110);
  desc.add_options()("help,h", "show this help")(
      "local-dir", po::value(&local_dir)->value_name("DIR"),
      "local mode: TransferJobs are the *.yaml files in DIR; status is written back into them")(
      "agents", po::value(&agents_flags)->value_name("NODE=URL,..."),
      "the agents, e.g. node-a=http://127.0.0.1:7070,node-b=http://127.0.0.1:7071")(
      "agent-token-file", po::value(&token_file)->value_name("FILE"),
      "bearer token for the agents (re-read when it changes)")(
      "agent-ca-file", po::value(&agent_ca_file)->value_name("FILE"),
      "agents serve HTTPS: trust this CA (PEM) for their certificates instead of the system's")(
      "agent-tls-server-name", po::value(&agent_server_name)->value_name("NAME"),
      "the name every agent's certificate carries (default: the address called)")(
      "agent-client-cert", po::value(&agent_client_cert)->value_name("FILE"),
      "the certificate (PEM, naming conduit:controller) presented to https agents")(
      "agent-client-key", po::value(&agent_client_key)->value_name("FILE"), "the key of --agent-client-cert")(
      "once-job", po::value(&once_job)->value_name("[NS/]NAME"),
      "local mode: exit when this job finishes: 0 Succeeded, 1 Failed")(
      "log-level", po::value(&log_level)->default_value("info"), "debug, info, warn or error")(
      "kubeconfig", po::value(&kubeconfig)->value_name("FILE"),
      "Kubernetes mode: kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")(
      "namespace", po::value(&namespaces)->value_name("NS"),
      "Kubernetes mode: namespace to watch, repeatable; none or \"\" means all")(
      "agent-service", po::value(&agent_service)->value_name("NAME"),
      "Kubernetes mode: the agents' Service; its EndpointSlices list the agents")(
      "agent-service-namespace", po::value(&agent_service_ns)->value_name("NS"),
      "the agents' Service namespace (default: the kubeconfig's)")(
      "leader-elect", po::bool_switch(&leader_elect),
      "Kubernetes mode: only the holder of a coordination.k8s.io Lease reconciles")(
      "leader-election-namespace", po::value(&lease_ns)->value_name("NS"),
      "the Lease's namespace (default: the kubeconfig's)")(
      "lease-name", po::value(&lease_name)->default_value("conduit-controller"), "the Lease's name")(
      "lease-duration", po::value(&lease_duration)->default_value(15)->value_name("SECONDS"),
      "how long a Lease not renewed stays taken")(
      "renew-deadline", po::value(&renew_deadline)->default_value(10)->value_name("SECONDS"),
      "a leader that could not renew this long steps down")(
      "retry-period", po::value(&retry_period)->default_value(2)->value_name("SECONDS"),
      "how often candidates try and leaders renew")("metrics-listen",
                                                    po::value(&metrics_listen)->value_name("HOST:PORT"),
                                                    "serve /healthz, /readyz and /metrics (both modes)")(
      "agent-signer-cert", po::value(&agent_signer_cert)->value_name("FILE"),
      "Kubernetes mode: sign agents' client certificates (CSRs for signer conduit.dev/agent) with this CA "
      "certificate (PEM, re-read at every signing)")(
      "agent-signer-key", po::value(&agent_signer_key)->value_name("FILE"), "the key of --agent-signer-cert")(
      "agent-service-account", po::value(&agent_service_account)->value_name("NAMESPACE/NAME"),
      "the agents' service account: only its pods' CSRs are signed")(
      "agent-certificate-max-seconds",
      po::value(&agent_certificate_max)->default_value(86400)->value_name("N"),
      "the longest an agent certificate lives (at least 600; a CSR's expirationSeconds may ask for less)");
  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(argc, argv).options(desc).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "conduit-controller: " << e.what() << "\n";
    return kUsageError;
  }
  if (vm.count("help") > 0) {
    std::cout << desc;
    return 0;
  }
  log::Level level{};
  if (!log::parse_level(log_level, level)) {
    std::cerr << "conduit-controller: --log-level: want debug, info, warn or error\n";
    return kUsageError;
  }
  log::configure(level, /*json=*/false);
  if (!token_file.empty() && !std::filesystem::is_regular_file(token_file)) {
    std::cerr << "conduit-controller: --agent-token-file " << token_file << " cannot be read\n";
    return kUsageError;
  }
  if (!agent_ca_file.empty() && !std::filesystem::is_regular_file(agent_ca_file)) {
    std::cerr << "conduit-controller: --agent-ca-file " << agent_ca_file << " cannot be read\n";
    return kUsageError;
  }
  if (agent_client_cert.empty() != agent_client_key.empty()) {
    std::cerr << "conduit-controller: --agent-client-cert and --agent-client-key go together\n";
    return kUsageError;
  }
  for (const std::string& file : {agent_client_cert, agent_client_key}) {
    if (!file.empty() && !std::filesystem::is_regular_file(file)) {
      std::cerr << "conduit-controller: " << file << " cannot be read\n";
      return kUsageError;
    }
  }
  const bool signer =
      !agent_signer_cert.empty() || !agent_signer_key.empty() || !agent_service_account.empty();
  if (signer && (agent_signer_cert.empty() || agent_signer_key.empty() || agent_service_account.empty())) {
    std::cerr << "conduit-controller: --agent-signer-cert, --agent-signer-key and --agent-service-account go "
                 "together\n";
    return kUsageError;
  }
  if (!signer && !vm["agent-certificate-max-seconds"].defaulted()) {
    std::cerr << "conduit-controller: --agent-certificate-max-seconds needs --agent-signer-cert\n";
    return kUsageError;
  }
  if (agent_certificate_max < 600) {
    std::cerr << "conduit-controller: --agent-certificate-max-seconds: want at least 600\n";
    return kUsageError;
  }
  const auto sa_slash = agent_service_account.find('/');
  const std::string agent_sa_ns = agent_service_account.substr(0, sa_slash);
  const std::string agent_sa_name =
      sa_slash == std::string::npos ? std::string() : agent_service_account.substr(sa_slash + 1);
  if (signer && (!is_dns1123_subdomain(agent_sa_ns) || !is_dns1123_subdomain(agent_sa_name))) {
    std::cerr << "conduit-controller: --agent-service-account: want NAMESPACE/NAME, got \""
              << agent_service_account << "\"\n";
    return kUsageError;
  }
  std::string error;
  // Signals go to the main thread only, which waits for them: the worker and watcher never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (local_dir.empty()) {
    if (agents_flags.empty() && agent_service.empty()) {
      std::cerr
          << "conduit-controller: Kubernetes mode needs --agent-service NAME or --agents NODE=URL,...\n";
      return kUsageError;
    }
    if (!once_job.empty()) {
      std::cerr << "conduit-controller: --once-job is for local mode (use kubectl wait)\n";
      return kUsageError;
    }
    if (lease_duration <= 0 || renew_deadline <= 0 || retry_period <= 0 || renew_deadline >= lease_duration ||
        retry_period >= renew_deadline) {
      std::cerr << "conduit-controller: want 0 < --retry-period < --renew-deadline < --lease-duration\n";
      return kUsageError;
    }
    KubeModeOptions options;
    if (!parse_agents(agents_flags, options.agents, error)) {
      std::cerr << "conduit-controller: " << error << "\n";
      return kUsageError;
    }
    const auto ms = [](double seconds) { return std::chrono::milliseconds(std::llround(seconds * 1000)); };
    options.kubeconfig = kubeconfig;
    options.namespaces = namespaces;
    options.agent_token_file = token_file;
    options.agent_ca_file = agent_ca_file;
    options.agent_server_name = agent_server_name;
    options.agent_client_cert = agent_client_cert;
    options.agent_client_key = agent_client_key;
    options.agent_service = agent_service;
    options.agent_service_namespace = agent_service_ns;
    options.leader_elect = leader_elect;
    options.lease_namespace = lease_ns;
    options.lease_name = lease_name;
    options.lease_duration = ms(lease_duration);
    options.renew_deadline = ms(renew_deadline);
    options.retry_period = ms(retry_period);
    options.metrics_listen = metrics_listen;
    options.agent_signer_cert = agent_signer_cert;
    options.agent_signer_key = agent_signer_key;
    options.agent_service_account_namespace = agent_sa_ns;
    options.agent_service_account_name = agent_sa_name;
    options.agent_certificate_max = std::chrono::seconds(agent_certificate_max);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    return run_kube_mode(options, signals);
  }
  if (!kubeconfig.empty() || !namespaces.empty() || !agent_service.empty() || leader_elect || signer) {
    std::cerr
        << "conduit-controller: --kubeconfig, --namespace, --agent-service, --leader-elect and the agent "
           "signer's flags are for Kubernetes mode, not with --local-dir\n";
    return kUsageError;
  }
  if (!std::filesystem::is_directory(local_dir)) {
    std::cerr << "conduit-controller: --local-dir " << local_dir << " is not a directory\n";
    return kUsageError;
  }
  AgentDirectory directory;
  if (!parse_agents(agents_flags, directory, error)) {
    std::cerr << "conduit-controller: " << error << "\n";
    return kUsageError;
  }
  std::optional<ObjectKey> once;
  if (!once_job.empty()) {
    const auto slash = once_job.find('/');
    once = slash == std::string::npos ? ObjectKey{"default", once_job}
                                      : ObjectKey{once_job.substr(0, slash), once_job.substr(slash + 1)};
  }

  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  HttpAgentOptions agent_options;
  agent_options.token_file = token_file;
  agent_options.ca_cert = agent_ca_file;
  agent_options.server_name = agent_server_name;
  agent_options.client_cert = agent_client_cert;
  agent_options.client_key = agent_client_key;
  HttpAgentApi agents(directory, agent_options);
  LocalStore store(local_dir);
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
  if (!metrics_listen.empty()) {
    metrics = std::make_unique<MetricsServer>(
        ready, [] { return true; }, [&controller] { return controller.queue_depth(); }, store);
    if (!metrics->listen(metrics_listen, error)) {
      std::cerr << "conduit-controller: " << error << "\n";
      return kUsageError;
    }
  }
  log::info("conduit-controller started",
            {{"mode", "local"}, {"dir", local_dir}, {"agents", std::to_string(directory.nodes().size())}});
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
  auto next_discovery = std::chrono::steady_clock::now() + kDiscoveryPeriod;
  while (true) {
    const timespec tick{0, 200'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      log::info("stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      exit_code = once ? 130 : 0;
      break;
    }
    if (once) {
      if (const auto outcome = job_outcome(store, *once, once_seen)) {
        exit_code = *outcome;
        break;
      }
    }
    if (std::chrono::steady_clock::now() >= next_discovery) {
      discover();
      next_discovery = std::chrono::steady_clock::now() + kDiscoveryPeriod;
    }
  }
  controller.stop();
  if (metrics) metrics->stop();
  log::info("conduit-controller stopped");
  return exit_code;
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
