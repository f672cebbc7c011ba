// conduit-agent: the node agent. Parses its settings, opens the transports, serves the REST API until SIGTERM
// or SIGINT, then fails in-flight transfers, revokes every grant and exits 0.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "conduit/common/log.h"
#include "conduit/common/token_file.h"
#include "conduit/cuda_device.h"
#include "config.h"
#include "grants.h"
#include "http_server.h"
#include "import_socket.h"
#include "inventory.h"
#include "kube_client/kube_config.h"
#include "kube_client/log.h"
#include "metrics/agent_metrics.h"
#include "node_certificate.h"
#include "regions.h"
#include "rest/rest.h"
#include "transfer/manager.h"
#include "transport_set.h"

namespace conduit::agent {
namespace {

constexpr int kConfigError = 2;
constexpr int kStartError = 1;

// "[::1]:7070" -> {"::1", 7070}; config validation already checked the shape.
std::pair<std::string, int> split_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(listen.substr(colon + 1))};
}

Result<std::unique_ptr<httplib::Server>> make_server(const AgentConfig& config) {
  // HTTP and HTTPS alike get a deadline per request, 64 threads and a full listen backlog (http_server.h).
  if (config.tls_cert.empty()) return std::unique_ptr<httplib::Server>(std::make_unique<HttpServer>());
  auto tls =
      TlsContext::load(config.tls_cert, config.tls_key, config.client_ca_file, config.agent_client_ca_file);
  if (!tls) return tls.error();
  return std::unique_ptr<httplib::Server>(std::make_unique<HttpServer>(HttpLimits{}, std::move(*tls)));
}

// Every second, and the moment a grant expires: drops expired grants (so an expired grant's key stops working
// at its expiresAt, not up to a tick later) and refreshes the gauges nothing else updates.
class Housekeeper {
 public:
  Housekeeper(GrantTable& grants, const RegionStore& regions, const TransferManager& transfers,
              metrics::AgentMetrics& metrics)
      : grants_(grants), regions_(regions), transfers_(transfers), metrics_(metrics), thread_([this] {
          loop();
        }) {}
  ~Housekeeper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      // A grant made meanwhile expires no sooner than this wake-up (ttlSeconds >= 1), so none is missed.
      auto wake = GrantTable::Clock::now() + std::chrono::seconds(1);
      if (const auto next = grants_.next_expiry(); next && *next < wake) wake = *next;
      if (cv_.wait_until(lock, wake, [this] { return stop_; })) return;
      lock.unlock();
      tick();
      lock.lock();
    }
  }

  void tick() {
    if (const auto n = grants_.expire(); n > 0) log::info("grants expired", {{"count", std::to_string(n)}});
    // Every kind is set each time, so a kind whose last region went away drops to 0.
    std::map<std::string, double> bytes{{"host", 0}, {"cuda", 0}, {"file", 0}};
    for (const auto& region : regions_.list()) {
      bytes[std::string(to_string(region->memory().kind()))] += static_cast<double>(region->bytes());
    }
    for (const auto& [memory, n] : bytes) metrics_.set_region_bytes(memory, n);
    metrics_.set_region_pool_bytes(static_cast<double>(regions_.pool().held_bytes()));
    metrics_.set_active_transfers(static_cast<double>(transfers_.active()));
  }

  GrantTable& grants_;
  const RegionStore& regions_;
  const TransferManager& transfers_;
  metrics::AgentMetrics& metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

int serve(const AgentConfig& config, const sigset_t& signals) {
  std::unique_ptr<TokenFile> token;
  if (!config.insecure_no_auth && !config.token_file.empty()) {
    auto read = TokenFile::open(config.token_file);
    if (!read) {
      std::cerr << "conduit-agent: " << read.error().message << "\n";
      return kConfigError;
    }
    token = std::move(*read);
  } else if (!config.token_file.empty()) {
    log::warn("--insecure-no-auth: ignoring the token file", {{"file", config.token_file}});
  }

  // Before the transports open, so a bad certificate fails fast.
  auto made = make_server(config);
  if (!made) {
    std::cerr << "conduit-agent: " << made.error().message << "\n";
    return kConfigError;
  }

  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) {
    log::error("cannot create the data directory", {{"dir", config.data_dir}, {"error", ec.message()}});
    return kStartError;
  }

  // Before anything asks CUDA (opening a transport probes GPU registration): the driver loads once.
  if (auto driver = cuda::set_driver_library(config.data_plane.cuda_driver); !driver) {
    log::error("cannot use the CUDA driver asked for", {{"error", driver.error().message}});
    return kStartError;
  }
  auto opened = TransportSet::open(
      config.providers, config.data_plane.applied_to(TransportConfig{.rails = config.rails,
                                                                     .bind_address = config.bind_address,
                                                                     .stall_timeout = config.stall_timeout}));
  if (!opened) {
    log::error("cannot open the fabric", {{"error", opened.error().message}});
    return kStartError;
  }
  TransportSet transports = std::move(*opened);
  {
    // Scanned once: PCIe wiring does not change while we run. Without it every region uses every rail.
    auto topology = Topology::scan("/sys");
    if (!topology)
      log::warn("topology unknown: regions use every rail", {{"error", topology.error().message}});
    transports.set_rail_policy(topology ? std::optional<Topology>(std::move(*topology)) : std::nullopt,
                               config.stripe_all_rails ? RailPolicy::All : RailPolicy::Nearest);
  }
  for (const auto& transport : transports.transports()) {
    log::info("transport open",
              {{"transport", std::string(transport->name())}, {"rails", std::to_string(transport->rails())}});
  }

  RegionStore regions(config.data_dir, config.memory_cap, config.region_pool, !config.save_page_cache);
  GrantTable grants(transports);
  // Calls to other agents present our certificate when we have one (rest/identity.h), else carry our own
  // token as it is at the time, rotations included.
  std::unique_ptr<NodeCertificate> node_certificate;
  if (!config.node_certificate.empty()) {
    kube_client::set_log_sink([](kube_client::LogLevel level, std::string_view message) {
      if (level == kube_client::LogLevel::Error || level == kube_client::LogLevel::Warn) {
        log::warn(std::string(message));
      } else if (level == kube_client::LogLevel::Info) {
        log::info(std::string(message));
      }
    });
    auto kube = kube_client::load_default_config(config.kubeconfig);
    if (!kube) {
      log::error("--node-certificate: no way to the Kubernetes API", {{"error", kube.error().message}});
      return kConfigError;
    }
    auto started =
        NodeCertificate::start({.file = config.node_certificate, .node = config.node_name, .kube = *kube});
    if (!started) {
      log::error("--node-certificate", {{"error", started.error().message}});
      return kConfigError;
    }
    node_certificate = std::move(*started);
  }
  // The node certificate's one file holds its key too (node_certificate.h).
  const std::string peer_cert_file = node_certificate ? config.node_certificate : config.peer_client_cert;
  const std::string peer_key_file = node_certificate ? config.node_certificate : config.peer_client_key;
  const bool peer_cert = !peer_cert_file.empty();
  const api::ClientOptions peers{.token = std::function<std::string()>([&token, peer_cert] {
                                   return token && !peer_cert ? token->current() : std::string();
                                 }),
                                 .ca_cert = config.peer_ca_file,
                                 .server_name = config.peer_server_name,
                                 .client_cert = peer_cert_file,
                                 .client_key = peer_key_file};
  metrics::AgentMetrics metrics(kAgentVersion, config.node_name);
  for (const auto& transport : transports.transports())
    metrics.add_transport(transport->capabilities().provider);
  TransferOptions options;
  options.stall_timeout = config.stall_timeout;
  options.pipeline_bytes = config.pipeline_bytes;
  options.namespace_files = config.namespace_files;
  TransferManager transfers(transports, regions, peers, &metrics, options);
  if (!config.nic_counters_root.empty())
    transfers.prove_paths(path::Prover::for_node(config.nic_counters_root, &metrics));

  const std::string socket_path = config.import_socket.empty()
                                      ? (std::filesystem::path(config.data_dir) / "conduit.sock").string()
                                      : config.import_socket;
  ImportSocket import_socket(regions, socket_path, config.node_name);
  if (auto started = import_socket.start(); !started) {
    log::error("cannot open the import socket", {{"path", socket_path}, {"error", started.error().message}});
    return kStartError;
  }

  AgentState state{config, transports, regions, grants, transfers, metrics, token.get()};
  state.node_certificate = node_certificate.get();
  httplib::Server& server = **made;
  // Small JSON replies otherwise wait out Nagle against the client's delayed ACK: 40 ms per GET measured.
  server.set_tcp_nodelay(true);
  // cpp-httplib closes a kept-alive connection after 5 requests, so a caller that sends request after
  // request (the controller, the SDK) opened a new connection, through the gate, every fifth one. 1,000 as
  // nginx does; the 5 s idle timeout still closes connections nobody uses.
  server.set_keep_alive_max_count(1000);
  // cpp-httplib's default adds SO_REUSEPORT, which would let a second agent share the port unnoticed.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  install_routes(server, state);
  // An access log at debug level: with it, a slow control path shows which call it waited on.
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    log::debug("request",
               {{"method", req.method}, {"path", req.path}, {"status", std::to_string(res.status)}});
  });

  const auto [host, port] = split_listen(config.listen);
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (auto* plain = dynamic_cast<HttpServer*>(&server); plain != nullptr && bound > 0) plain->raise_backlog();
  if (bound <= 0) {
    log::error("cannot listen (address in use or not local)", {{"address", config.listen}});
    return kStartError;
  }
  const std::string shown_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const std::string address = shown_host + ":" + std::to_string(bound);

  Housekeeper housekeeper(grants, regions, transfers, metrics);
  std::atomic<bool> listen_returned{false};
  std::atomic<bool> signalled{false};
  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (!listen_returned.load()) {
      signalled = true;
      log::info("shutting down", {{"signal", signal == SIGINT ? "SIGINT" : "SIGTERM"}});
    }
    state.ready = false;
    const bool had_work = transfers.active() > 0;
    transfers.shutdown(std::chrono::seconds(5));
    // Serve a moment longer so pollers read AgentShuttingDown rather than losing the agent mid-transfer.
    if (had_work) std::this_thread::sleep_for(std::chrono::seconds(1));
    // stop() is a no-op until listen_after_bind() has started, so wait for that (or for its failure).
    while (!server.is_running() && !listen_returned.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server.stop();
  });

  state.ready = true;
  log::info("listening", {{"address", address},
                          {"node", config.node_name},
                          {"tls", config.tls_cert.empty() ? "false" : "true"}});
  if (config.tls_cert.empty()) {
    // Says so at start: the token and every region's bytes read over REST travel in clear text.
    const bool loopback = host.starts_with("127.") || host == "::1" || host == "localhost";
    if (loopback) {
      log::info(
          "plain HTTP on loopback: for one machine (local mode); give --tls-cert and --tls-key otherwise");
    } else {
      log::warn(
          "plain HTTP on a network address: the bearer token travels in clear text; serve HTTPS with "
          "--tls-cert and --tls-key (docs/security.md)",
          {{"address", address}});
    }
  }
  std::cout << "listening " << address << std::endl;
  const bool served = server.listen_after_bind();
  listen_returned = true;
  // When the server stopped by itself, the signal thread still waits: wake it with the signal it waits for.
  if (!signalled.load()) pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  grants.revoke_all();
  if (!signalled.load()) {
    log::error("the REST server stopped by itself",
               {{"address", address}, {"served", served ? "true" : "false"}});
    return kStartError;
  }
  log::info("stopped");
  return 0;
}

}  // namespace
}  // namespace conduit::agent

int main(int argc, char** argv, char** envp) {
  namespace agent = conduit::agent;
  namespace log = conduit::log;
  // Blocked before any thread exists, so every thread inherits the mask and only sigwait() sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer closing its socket mid-response must not kill the agent.
  signal(SIGPIPE, SIG_IGN);

  auto parsed = agent::parse_config(argc, argv, envp);
  if (!parsed) {
    std::cerr << "conduit-agent: " << parsed.error().message << "\n";
    return agent::kConfigError;
  }
  if (parsed->help) {
    std::cout << parsed->help_text;
    return 0;
  }
  const agent::AgentConfig& config = parsed->config;
  log::Level level = log::Level::Info;
  log::parse_level(config.log_level, level);
  log::configure(level, config.log_format == "json");
  log::info("starting",
            {{"version", agent::kAgentVersion}, {"node", config.node_name}, {"listen", config.listen}});
  return agent::serve(config, signals);
}
