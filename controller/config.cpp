#include "config.h"

#include <boost/program_options.hpp>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>

#include "conduit/common/log.h"
#include "conduit/common/text.h"
#include "conduit/common/token_file.h"
#include "reconcile/transfer_job.h"

namespace conduit::controller {

namespace po = boost::program_options;

namespace {

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

// The flags as given, before they are checked and sorted into the config.
struct Flags {
  std::string local_dir, token_file, agent_ca_file, agent_server_name, agent_client_cert, agent_client_key;
  std::string once_job, log_level, kubeconfig, agent_service, agent_service_ns, lease_ns, lease_name;
  std::string metrics_listen, agent_signer_cert, agent_signer_key, agent_service_account;
  std::vector<std::string> agents, namespaces;
  bool leader_elect = false;
  double lease_duration = 15, renew_deadline = 10, retry_period = 2;
  long long agent_certificate_max = 86400;
};

po::options_description describe(Flags& f) {
  po::options_description desc("conduit-controller: reconciles TransferJobs into conduit-agent transfers",
                               110);
  po::options_description common("Both modes", 110);
  common.add_options()("help,h", "show this help")(
      "agents", po::value(&f.agents)->value_name("NODE=URL,..."),
      "the agents, e.g. node-a=http://127.0.0.1:7070,node-b=http://127.0.0.1:7071")(
      "agent-token-file", po::value(&f.token_file)->value_name("FILE"),
      "bearer token for the agents (re-read when it changes)")(
      "agent-ca-file", po::value(&f.agent_ca_file)->value_name("FILE"),
      "agents serve HTTPS: trust this CA (PEM) for their certificates instead of the system's")(
      "agent-tls-server-name", po::value(&f.agent_server_name)->value_name("NAME"),
      "the name every agent's certificate carries (default: the address called)")(
      "agent-client-cert", po::value(&f.agent_client_cert)->value_name("FILE"),
      "the certificate (PEM, naming conduit:controller) presented to https agents")(
      "agent-client-key", po::value(&f.agent_client_key)->value_name("FILE"),
      "the key of --agent-client-cert")("log-level", po::value(&f.log_level)->default_value("info"),
                                        "debug, info, warn or error")(
      "metrics-listen", po::value(&f.metrics_listen)->value_name("HOST:PORT"),
      "serve /healthz, /readyz and /metrics");
  po::options_description local("Local mode", 110);
  local.add_options()(
      "local-dir", po::value(&f.local_dir)->value_name("DIR"),
      "local mode: TransferJobs are the *.yaml files in DIR; status is written back into them")(
      "once-job", po::value(&f.once_job)->value_name("[NS/]NAME"),
      "local mode: exit when this job finishes: 0 Succeeded, 1 Failed");
  po::options_description kube("Kubernetes mode (without --local-dir)", 110);
  kube.add_options()("kubeconfig", po::value(&f.kubeconfig)->value_name("FILE"),
                     "Kubernetes mode: kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")(
      "namespace", po::value(&f.namespaces)->value_name("NS"),
      "Kubernetes mode: namespace to watch, repeatable; none or \"\" means all")(
      "agent-service", po::value(&f.agent_service)->value_name("NAME"),
      "Kubernetes mode: the agents' Service; its EndpointSlices list the agents")(
      "agent-service-namespace", po::value(&f.agent_service_ns)->value_name("NS"),
      "the agents' Service namespace (default: the kubeconfig's)")(
      "leader-elect", po::bool_switch(&f.leader_elect),
      "Kubernetes mode: only the holder of a coordination.k8s.io Lease reconciles")(
      "leader-election-namespace", po::value(&f.lease_ns)->value_name("NS"),
      "the Lease's namespace (default: the kubeconfig's)")(
      "lease-name", po::value(&f.lease_name)->default_value("conduit-controller"), "the Lease's name")(
      "lease-duration", po::value(&f.lease_duration)->default_value(15)->value_name("SECONDS"),
      "how long a Lease not renewed stays taken")(
      "renew-deadline", po::value(&f.renew_deadline)->default_value(10)->value_name("SECONDS"),
      "a leader that could not renew this long steps down")(
      "retry-period", po::value(&f.retry_period)->default_value(2)->value_name("SECONDS"),
      "how often candidates try and leaders renew")(
      "agent-signer-cert", po::value(&f.agent_signer_cert)->value_name("FILE"),
      "Kubernetes mode: sign agents' client certificates (CSRs for signer conduit.dev/agent) with this CA "
      "certificate (PEM, re-read at every signing)")("agent-signer-key",
                                                     po::value(&f.agent_signer_key)->value_name("FILE"),
                                                     "the key of --agent-signer-cert")(
      "agent-service-account", po::value(&f.agent_service_account)->value_name("NAMESPACE/NAME"),
      "the agents' service account: only its pods' CSRs are signed")(
      "agent-certificate-max-seconds",
      po::value(&f.agent_certificate_max)->default_value(86400)->value_name("N"),
      "the longest an agent certificate lives (at least 600; a CSR's expirationSeconds may ask for less)");
  desc.add(common).add(local).add(kube);
  return desc;
}

// "node-a=http://127.0.0.1:7070,node-b=http://..." (the flag may also be repeated).
Result<std::map<std::string, std::string>> parse_agents(const std::vector<std::string>& values) {
  std::map<std::string, std::string> out;
  for (const auto& value : values) {
    for (const std::string_view item : split(value, ',')) {
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || item.find("://", eq) == std::string_view::npos) {
        return invalid("--agents: want NODE=http://HOST:PORT, got \"" + std::string(item) + "\"");
      }
      const std::string node(item.substr(0, eq));
      if (!is_dns1123_subdomain(node)) return invalid("--agents: \"" + node + "\" is not a valid node name");
      out[node] = item.substr(eq + 1);
    }
  }
  return out;
}

// The agent client's files: each must be readable now (they are read again at each call, so a rotated file
// is taken, but a typo should stop the start, not every call after it).
Status check_client_files(const Flags& f) {
  if (!f.token_file.empty() && !std::filesystem::is_regular_file(f.token_file)) {
    return invalid("--agent-token-file " + f.token_file + " cannot be read");
  }
  if (!f.agent_ca_file.empty() && !std::filesystem::is_regular_file(f.agent_ca_file)) {
    return invalid("--agent-ca-file " + f.agent_ca_file + " cannot be read");
  }
  if (f.agent_client_cert.empty() != f.agent_client_key.empty()) {
    return invalid("--agent-client-cert and --agent-client-key go together");
  }
  for (const std::string& file : {f.agent_client_cert, f.agent_client_key}) {
    if (!file.empty() && !std::filesystem::is_regular_file(file)) return invalid(file + " cannot be read");
  }
  return {};
}

api::ClientOptions client_options(const Flags& f) {
  using namespace std::chrono_literals;
  return {.token = token_file_source(f.token_file),
          .connect_timeout = 2s,
          .read_timeout = 10s,
          .write_timeout = 10s,
          // Loading, allocating and saving a region of many GiB takes minutes, not seconds.
          .slow_timeout = 10min,
          .ca_cert = f.agent_ca_file,
          .server_name = f.agent_server_name,
          .client_cert = f.agent_client_cert,
          .client_key = f.agent_client_key};
}

// The signer's three flags go together; the service account is NAMESPACE/NAME.
Status parse_signer(const Flags& f, bool certificate_max_given, KubeModeOptions& kube) {
  const bool signer =
      !f.agent_signer_cert.empty() || !f.agent_signer_key.empty() || !f.agent_service_account.empty();
  if (signer &&
      (f.agent_signer_cert.empty() || f.agent_signer_key.empty() || f.agent_service_account.empty())) {
    return invalid("--agent-signer-cert, --agent-signer-key and --agent-service-account go together");
  }
  if (!signer && certificate_max_given)
    return invalid("--agent-certificate-max-seconds needs --agent-signer-cert");
  if (f.agent_certificate_max < 600) return invalid("--agent-certificate-max-seconds: want at least 600");
  const auto slash = f.agent_service_account.find('/');
  const std::string ns = f.agent_service_account.substr(0, slash);
  const std::string name =
      slash == std::string::npos ? std::string() : f.agent_service_account.substr(slash + 1);
  if (signer && (!is_dns1123_subdomain(ns) || !is_dns1123_subdomain(name))) {
    return invalid("--agent-service-account: want NAMESPACE/NAME, got \"" + f.agent_service_account + "\"");
  }
  kube.agent_signer_cert = f.agent_signer_cert;
  kube.agent_signer_key = f.agent_signer_key;
  kube.agent_service_account_namespace = ns;
  kube.agent_service_account_name = name;
  kube.agent_certificate_max = std::chrono::seconds(f.agent_certificate_max);
  return {};
}

Status parse_kube(const Flags& f, KubeModeOptions& kube) {
  if (f.agents.empty() && f.agent_service.empty()) {
    return invalid("Kubernetes mode needs --agent-service NAME or --agents NODE=URL,...");
  }
  if (!f.once_job.empty()) return invalid("--once-job is for local mode (use kubectl wait)");
  if (f.lease_duration <= 0 || f.renew_deadline <= 0 || f.retry_period <= 0 ||
      f.renew_deadline >= f.lease_duration || f.retry_period >= f.renew_deadline) {
    return invalid("want 0 < --retry-period < --renew-deadline < --lease-duration");
  }
  const auto ms = [](double seconds) { return std::chrono::milliseconds(std::llround(seconds * 1000)); };
  kube.kubeconfig = f.kubeconfig;
  kube.namespaces = f.namespaces;
  kube.agent_service = f.agent_service;
  kube.agent_service_namespace = f.agent_service_ns;
  kube.leader_elect = f.leader_elect;
  kube.lease_namespace = f.lease_ns;
  kube.lease_name = f.lease_name;
  kube.lease_duration = ms(f.lease_duration);
  kube.renew_deadline = ms(f.renew_deadline);
  kube.retry_period = ms(f.retry_period);
  return {};
}

Result<LocalModeOptions> parse_local(const Flags& f, const KubeModeOptions& kube) {
  if (!f.kubeconfig.empty() || !f.namespaces.empty() || !f.agent_service.empty() || f.leader_elect ||
      !kube.agent_signer_cert.empty()) {
    return invalid(
        "--kubeconfig, --namespace, --agent-service, --leader-elect and the agent signer's flags are for "
        "Kubernetes mode, not with --local-dir");
  }
  if (!std::filesystem::is_directory(f.local_dir)) {
    return invalid("--local-dir " + f.local_dir + " is not a directory");
  }
  LocalModeOptions local{.dir = f.local_dir, .once_job = std::nullopt};
  if (!f.once_job.empty()) {
    const auto slash = f.once_job.find('/');
    local.once_job = slash == std::string::npos
                         ? ObjectKey{"default", f.once_job}
                         : ObjectKey{f.once_job.substr(0, slash), f.once_job.substr(slash + 1)};
  }
  return local;
}

}  // namespace

api::TokenSource token_file_source(const std::filesystem::path& path) {
  if (path.empty()) return {};
  struct Lazy {
    std::mutex mu;
    std::unique_ptr<TokenFile> file;
  };
  auto lazy = std::make_shared<Lazy>();
  return api::TokenSource(std::function<std::string()>([lazy, path = path.string()]() -> std::string {
    std::lock_guard lock(lazy->mu);
    if (!lazy->file) {
      auto opened = TokenFile::open(path);
      if (!opened) return {};
      lazy->file = std::move(*opened);
    }
    return lazy->file->current();
  }));
}

Result<ParsedConfig> parse_config(int argc, const char* const* argv) {
  Flags f;
  const po::options_description desc = describe(f);
  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(argc, argv).options(desc).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return invalid(e.what());
  }
  ParsedConfig parsed;
  if (vm.count("help") > 0) {
    std::ostringstream text;
    text << desc;
    parsed.help = true;
    parsed.help_text = text.str();
    return parsed;
  }
  ControllerConfig& config = parsed.config;
  if (log::Level level{}; !log::parse_level(f.log_level, level)) {
    return invalid("--log-level: want debug, info, warn or error");
  }
  config.log_level = f.log_level;
  if (auto s = check_client_files(f); !s) return s.error();
  if (auto s = parse_signer(f, !vm["agent-certificate-max-seconds"].defaulted(), config.kube); !s) {
    return s.error();
  }
  if (f.local_dir.empty()) {
    if (auto s = parse_kube(f, config.kube); !s) return s.error();
  } else {
    auto local = parse_local(f, config.kube);
    if (!local) return local.error();
    config.local = std::move(*local);
  }
  auto agents = parse_agents(f.agents);
  if (!agents) return agents.error();
  config.agents = std::move(*agents);
  config.metrics_listen = f.metrics_listen;
  config.agent_client = client_options(f);
  return parsed;
}

}  // namespace conduit::controller
