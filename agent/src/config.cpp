#include "config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <boost/program_options.hpp>
#include <functional>
#include <map>
#include <sstream>

#include "conduit/common/log.h"
#include "conduit/common/size.h"
#include "conduit/common/text.h"

namespace conduit::agent {

namespace po = boost::program_options;

namespace {

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

Result<bool> parse_bool(const std::string& text) {
  const std::string t = to_lower(std::string(trim(text)));
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return invalid("\"" + text + "\" is not a boolean (true or false)");
}

// HOST:PORT with an optional [IPv6] host; the port may be 0 (any).
Status check_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return invalid("\"" + text + "\" is not HOST:PORT");
  const std::string host = text.substr(0, colon);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) {
    return invalid("\"" + text + "\" is not HOST:PORT (write IPv6 hosts as [::1]:7070)");
  }
  if (!parse_integer<std::uint64_t>(std::string_view(text).substr(colon + 1), 0, 65535)) {
    return invalid("\"" + text + "\" is not HOST:PORT (port 0..65535)");
  }
  return {};
}

Result<std::vector<std::string>> parse_list(const std::string& text) {
  std::vector<std::string_view> pieces = split(text, ',');
  // One final comma ends the list ("tcp,shm," is tcp and shm), as it did when std::getline read it.
  if (pieces.back().empty()) pieces.pop_back();
  std::vector<std::string> items;
  for (const std::string_view piece : pieces) {
    const std::string_view item = trim(piece);
    if (item.empty()) return invalid("\"" + text + "\" has an empty entry");
    items.emplace_back(item);
  }
  if (items.empty()) return invalid("the list is empty");
  return items;
}

// The two kinds of setting most options are: text taken as it is (a path, a name), and a boolean.
template <auto Member>
Status set_text(AgentConfig& c, const std::string& v) {
  c.*Member = v;
  return {};
}

template <auto Member>
Status set_bool(AgentConfig& c, const std::string& v) {
  auto b = parse_bool(v);
  if (!b) return b.error();
  c.*Member = *b;
  return {};
}

using Apply = std::function<Status(AgentConfig&, const std::string&)>;

// One setting: its flag name (also its YAML key; the environment variable is CONDUIT_ + upper snake case).
struct Setting {
  const char* name;
  const char* value_name;  // "" = a switch that takes no value on the command line
  const char* help;
  const char* default_text;
  Apply apply;
};

// Sized by its entries: a fixed count went stale whenever two changes each added a setting.
const auto kSettings = std::to_array<Setting>({
    {"node-name", "NAME", "this node's name", "the hostname",
     [](AgentConfig& c, const std::string& v) -> Status {
       if (v.empty()) return invalid("must not be empty");
       c.node_name = v;
       return {};
     }},
    {"listen", "HOST:PORT", "REST listen address; port 0 picks a free port", "127.0.0.1:7070",
     [](AgentConfig& c, const std::string& v) -> Status {
       if (auto s = check_listen(v); !s) return s;
       c.listen = v;
       return {};
     }},
    {"providers", "LIST", "fabric providers to open, comma-separated: tcp, shm, efa, verbs, auto", "auto",
     [](AgentConfig& c, const std::string& v) -> Status {
       auto list = parse_list(v);
       if (!list) return list.error();
       c.providers = std::move(*list);
       return {};
     }},
    {"rails", "N", "endpoints per provider to stripe over (1..64)", "1",
     [](AgentConfig& c, const std::string& v) -> Status {
       const auto n = parse_integer<std::uint64_t>(trim(v), 1, 64);
       if (!n) return invalid("must be 1..64, got \"" + v + "\"");
       c.rails = static_cast<int>(*n);
       return {};
     }},
    {"stripe-all-rails", "",
     "register every region on every rail, not only the rails whose NIC is nearest its memory", "false",
     set_bool<&AgentConfig::stripe_all_rails>},
    {"bind-address", "IP", "local address the fabric endpoints bind to", "the provider's default interface",
     set_text<&AgentConfig::bind_address>},
    {"nic-counters-root", "DIR",
     "sysfs root the NICs' byte counters are read under, for each transfer's proof of path (docs/path.md); "
     "empty: no transfer is judged",
     "/sys", set_text<&AgentConfig::nic_counters_root>},
    {"token-file", "FILE", "file holding the bearer token every /v1 request must carry",
     "none: required unless --insecure-no-auth", set_text<&AgentConfig::token_file>},
    {"insecure-no-auth", "", "serve /v1 without a token (local testing only)", "false",
     set_bool<&AgentConfig::insecure_no_auth>},
    {"data-dir", "DIR", "directory regions may be loaded from and saved to", "/var/lib/conduit",
     [](AgentConfig& c, const std::string& v) -> Status {
       if (v.empty()) return invalid("must not be empty");
       c.data_dir = v;
       return {};
     }},
    {"memory-cap", "SIZE", "bytes all agent-owned regions may use together (e.g. 8GiB)", "8GiB",
     [](AgentConfig& c, const std::string& v) -> Status {
       auto n = parse_size(v);
       if (!n) return n.error();
       if (*n == 0) return invalid("must be more than 0");
       c.memory_cap = *n;
       return {};
     }},
    {"link-rate", "RATE",
     "the node's link rate in bits per second (e.g. 100Gbit, 800Mbit), as GET /v1/node reports it: the "
     "controller plans Reshard jobs' lower bound with it (none: unknown)",
     "",
     [](AgentConfig& c, const std::string& v) -> Status {
       if (v.empty()) return {};
       auto n = parse_bit_rate(v);
       if (!n) return n.error();
       c.link_bytes_per_second = static_cast<double>(*n) / 8;
       return {};
     }},
    {"region-pool", "SIZE",
     "memory of deleted host regions kept, zeroed in idle time, for new regions of the same size; it yields "
     "to regions under memory-cap and is unmapped after 60 s unused (0: none)",
     "2GiB",
     [](AgentConfig& c, const std::string& v) -> Status {
       auto n = parse_size(v);
       if (!n) return n.error();
       c.region_pool = *n;
       return {};
     }},
    {"pipeline-bytes", "SIZE",
     "memory one pipelined transfer holds for a file on this agent: read-ahead of a file source, the ring of "
     "a file target (counted against memory-cap)",
     "64MiB",
     [](AgentConfig& c, const std::string& v) -> Status {
       auto n = parse_size(v);
       if (!n) return n.error();
       if (*n < (1u << 20) || *n > (16ULL << 30)) return invalid("must be 1MiB to 16GiB");
       c.pipeline_bytes = *n;
       return {};
     }},
    {"save-page-cache", "",
     "write saved files through the page cache, where a reader right after finds them, instead of around it "
     "with O_DIRECT (no copy, no page cache filled with a checkpoint)",
     "false", set_bool<&AgentConfig::save_page_cache>},
    {"log-level", "LEVEL", "debug | info | warn | error", "info",
     [](AgentConfig& c, const std::string& v) -> Status {
       // The names the logger knows, which the controller's --log-level is checked against too.
       if (log::Level level{}; !log::parse_level(v, level)) {
         return invalid("\"" + v + "\" is not one of debug, info, warn, error");
       }
       c.log_level = v;
       return {};
     }},
    {"log-format", "FORMAT", "logfmt | json", "logfmt",
     [](AgentConfig& c, const std::string& v) -> Status {
       if (v != "logfmt" && v != "json") return invalid("\"" + v + "\" is not one of logfmt, json");
       c.log_format = v;
       return {};
     }},
    {"tls-cert", "FILE", "PEM certificate: serve HTTPS (needs --tls-key)", "none: plain HTTP",
     set_text<&AgentConfig::tls_cert>},
    {"tls-key", "FILE", "PEM private key of --tls-cert", "none", set_text<&AgentConfig::tls_key>},
    {"peer-ca-file", "FILE", "other agents serve HTTPS: trust this CA (PEM) for their certificates",
     "the system's CAs", set_text<&AgentConfig::peer_ca_file>},
    {"peer-tls-server-name", "NAME",
     "the name other agents' certificates carry, checked instead of their address (one certificate for all)",
     "the address called", set_text<&AgentConfig::peer_server_name>},
    {"client-ca-file", "FILE",
     "callers' certificates signed by this CA (PEM) name them: conduit:controller, conduit:operator, "
     "conduit:agent[:<node>] (needs --tls-cert)",
     "none: the token alone", set_text<&AgentConfig::client_ca_file>},
    {"peer-client-cert", "FILE",
     "the certificate (PEM) this agent presents to other agents instead of sending its token (needs "
     "--peer-client-key)",
     "none: the token", set_text<&AgentConfig::peer_client_cert>},
    {"peer-client-key", "FILE", "PEM private key of --peer-client-cert", "none",
     set_text<&AgentConfig::peer_client_key>},
    {"agent-client-ca-file", "FILE",
     "callers' certificates signed by this CA (PEM) may name agents alone (conduit:agent:<node>): the CA of "
     "the "
     "controller's node-certificate signer (needs --tls-cert)",
     "none", set_text<&AgentConfig::agent_client_ca_file>},
    {"node-certificate", "FILE",
     "ask the Kubernetes API (a CertificateSigningRequest to conduit.dev/agent) for a certificate naming "
     "conduit:agent:<node>, keep it with its key in FILE, renew it, and present it to other agents",
     "none", set_text<&AgentConfig::node_certificate>},
    {"kubeconfig", "FILE", "how --node-certificate reaches the Kubernetes API",
     "$KUBECONFIG, else in-cluster (the pod's service account)", set_text<&AgentConfig::kubeconfig>},
    {"namespace-files", "",
     "a TransferJob reads and writes only files under <data-dir>/<its namespace>/ (an operator: any)",
     "false", set_bool<&AgentConfig::namespace_files>},
    {"import-socket", "PATH", "unix socket local processes share memory over", "<data-dir>/conduit.sock",
     set_text<&AgentConfig::import_socket>},
    {"stall-timeout-ms", "MS", "fail a transfer that makes no progress for this long", "30000",
     [](AgentConfig& c, const std::string& v) -> Status {
       const auto n = parse_integer<std::uint64_t>(trim(v), 1, 24ULL * 3600 * 1000);
       if (!n) return invalid("must be 1..86400000, got \"" + v + "\"");
       c.stall_timeout = std::chrono::milliseconds(*n);
       return {};
     }},
    {"long-poll-max-seconds", "S", "longest a long-poll (timeoutSeconds, waitSeconds) waits before answering",
     "60",
     [](AgentConfig& c, const std::string& v) -> Status {
       const auto n = parse_integer<std::uint64_t>(trim(v), 0, 60);
       if (!n) return invalid("must be 0..60, got \"" + v + "\"");
       c.long_poll_max = std::chrono::seconds(*n);
       return {};
     }},
    {"max-body-bytes", "SIZE", "largest request body the REST API accepts", "1MiB",
     [](AgentConfig& c, const std::string& v) -> Status {
       auto n = parse_size(v);
       if (!n) return n.error();
       if (*n == 0) return invalid("must be more than 0");
       c.max_body_bytes = static_cast<std::size_t>(*n);
       return {};
     }},
});

// The data plane's settings (conduit/data_plane_settings.h), as options of the agent: conduit-bench parses
// the same table, so a setting has one name, range and error in both.
std::vector<Setting> data_plane_options() {
  std::vector<Setting> out;
  for (const DataPlaneSetting& d : data_plane_settings()) {
    out.push_back(
        {d.name, d.value_name, d.help, d.default_text,
         [apply = d.apply](AgentConfig& c, const std::string& v) { return apply(c.data_plane, v); }});
  }
  return out;
}

const std::vector<Setting>& all_settings() {
  static const std::vector<Setting> all = [] {
    std::vector<Setting> v(kSettings.begin(), kSettings.end());
    for (Setting& s : data_plane_options()) v.push_back(std::move(s));
    return v;
  }();
  return all;
}

std::string env_name(std::string_view flag) { return environment_name(flag); }

std::map<std::string, std::string> read_environment(char** envp) {
  std::map<std::string, std::string> env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    // An empty variable counts as unset, as an unset one in a pod spec often renders empty.
    if (eq == std::string_view::npos || eq + 1 == entry.size()) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

// The YAML file as flag name -> text. A list (providers: [tcp, shm]) becomes "tcp,shm".
Result<std::map<std::string, std::string>> read_yaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return invalid("config file " + path + ": cannot be read");
  } catch (const YAML::Exception& e) {
    return invalid("config file " + path + ": " + e.what());
  }
  std::map<std::string, std::string> values;
  if (root.IsNull()) return values;
  if (!root.IsMap()) return invalid("config file " + path + ": want a mapping of option names to values");
  for (const auto& entry : root) {
    const auto key = entry.first.as<std::string>();
    const auto& settings = all_settings();
    const bool known =
        std::any_of(settings.begin(), settings.end(), [&](const Setting& s) { return key == s.name; });
    if (!known) return invalid("config file " + path + ": unknown key \"" + key + "\"");
    const YAML::Node& value = entry.second;
    if (value.IsScalar()) {
      values[key] = value.Scalar();
    } else if (value.IsSequence()) {
      std::string joined;
      for (const auto& item : value) {
        if (!item.IsScalar()) return invalid("config file " + path + ": " + key + ": want a list of strings");
        joined += (joined.empty() ? "" : ",") + item.Scalar();
      }
      values[key] = joined;
    } else {
      return invalid("config file " + path + ": " + key + ": want a value");
    }
  }
  return values;
}

void add_option(po::options_description& group, const Setting& s) {
  std::string help = std::string(s.help) + " (env " + env_name(s.name);
  if (std::string_view(s.name) == "node-name") help += ", else NODE_NAME";
  help += std::string(", default ") + s.default_text + ")";
  if (*s.value_name == '\0') {
    group.add_options()(s.name, help.c_str());
  } else {
    group.add_options()(s.name, po::value<std::string>()->value_name(s.value_name), help.c_str());
  }
}

po::options_description describe() {
  po::options_description desc(
      "conduit-agent: the Conduit node agent (regions, grants, transfers, REST API).\n"
      "Each option is also read from its environment variable, then from the --config YAML file\n"
      "(keys are the option names, e.g. `memory-cap: 16GiB`); a flag wins over both.\n\nOptions",
      110, 60);
  desc.add_options()("help,h", "show this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "YAML file of options (env CONDUIT_CONFIG, default none)");
  for (const Setting& s : kSettings) add_option(desc, s);
  po::options_description data_plane(
      "Data-plane options (the transports'; conduit-bench takes them as flags too)", 110, 60);
  for (const Setting& s : data_plane_options()) add_option(data_plane, s);
  desc.add(data_plane);
  return desc;
}

std::string hostname() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

}  // namespace

Result<ParsedConfig> parse_config(int argc, const char* const* argv, char** envp) {
  const po::options_description desc = describe();
  po::variables_map flags;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    // An empty positional description makes a stray bare word an error instead of being ignored.
    const po::positional_options_description none;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(none).style(style).run(), flags);
    po::notify(flags);
  } catch (const po::error& e) {
    return invalid(e.what());
  }

  ParsedConfig parsed;
  if (flags.count("help") > 0) {
    std::ostringstream text;
    text << desc;
    parsed.help = true;
    parsed.help_text = text.str();
    return parsed;
  }

  const auto env = read_environment(envp);
  std::string config_file;
  if (flags.count("config") > 0) {
    config_file = flags["config"].as<std::string>();
  } else if (auto it = env.find("CONDUIT_CONFIG"); it != env.end()) {
    config_file = it->second;
  }
  std::map<std::string, std::string> yaml;
  if (!config_file.empty()) {
    auto values = read_yaml(config_file);
    if (!values) return values.error();
    yaml = std::move(*values);
  }

  AgentConfig& config = parsed.config;
  for (const Setting& s : all_settings()) {
    const std::string var = env_name(s.name);
    std::string value;
    std::string source;
    if (flags.count(s.name) > 0) {
      value = *s.value_name == '\0' ? "true" : flags[s.name].as<std::string>();
      source = std::string("--") + s.name;
    } else if (auto e = env.find(var); e != env.end()) {
      value = e->second;
      source = var;
    } else if (auto n = env.find("NODE_NAME"); std::string_view(s.name) == "node-name" && n != env.end()) {
      value = n->second;
      source = "NODE_NAME";
    } else if (auto y = yaml.find(s.name); y != yaml.end()) {
      value = y->second;
      source = "config file " + config_file + ": " + s.name;
    } else {
      continue;
    }
    if (auto status = s.apply(config, value); !status) return invalid(source + ": " + status.error().message);
  }

  if (config.node_name.empty()) config.node_name = hostname();
  if (!config.tls_cert.empty() && config.tls_key.empty()) return invalid("--tls-cert needs --tls-key");
  if (config.tls_cert.empty() && !config.tls_key.empty()) return invalid("--tls-key needs --tls-cert");
  if (!config.client_ca_file.empty() && config.tls_cert.empty()) {
    return invalid("--client-ca-file needs --tls-cert: client certificates come over TLS");
  }
  if (config.peer_client_cert.empty() != config.peer_client_key.empty()) {
    return invalid("--peer-client-cert and --peer-client-key go together");
  }
  if (!config.node_certificate.empty() && !config.peer_client_cert.empty()) {
    return invalid(
        "--node-certificate is the certificate presented to other agents: drop --peer-client-cert");
  }
  if (!config.agent_client_ca_file.empty() && config.tls_cert.empty()) {
    return invalid("--agent-client-ca-file needs --tls-cert: client certificates come over TLS");
  }
  // Without auth a caller with no certificate would get every route while a certificate holder gets less
  // (an agent's scope): the certificates would only ever narrow what an anonymous caller already has.
  if (config.insecure_no_auth && (!config.client_ca_file.empty() || !config.agent_client_ca_file.empty())) {
    return invalid(
        "--insecure-no-auth lets every caller in: it cannot go with --client-ca-file or "
        "--agent-client-ca-file, whose identities would then have less than a caller with none");
  }
  if (config.token_file.empty() && config.client_ca_file.empty() && !config.insecure_no_auth) {
    return invalid("--token-file is required (or --client-ca-file, or --insecure-no-auth for local testing)");
  }
  return parsed;
}

}  // namespace conduit::agent
