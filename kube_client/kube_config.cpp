#include "kube_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>

#include "conduit/common/base64.h"
#include "conduit/common/text.h"

namespace conduit::kube_client {
namespace {

Error config_error(const std::string& message) { return make_error(ErrorCode::InvalidArgument, message); }

std::string resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

// The entry of a named list (clusters, users, contexts) whose `name` is `name`; its `key` map.
YAML::Node find_named(const YAML::Node& root, const char* list, const char* key, const std::string& name) {
  const YAML::Node items = root[list];
  if (items && items.IsSequence()) {
    for (const auto& item : items) {
      // An entry that is not a map names nothing (and operator[] on a scalar would throw).
      if (!item.IsMap() || !item["name"] || !item["name"].IsScalar()) continue;
      if (item["name"].Scalar() == name) return item[key] ? item[key] : YAML::Node();
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.Scalar() : std::string();
}

// A field given either as a path or inline as base64 (`*-data`, which wins, as in kubectl): the path to hand
// to cpp-httplib, inline data written to a private file first.
Result<std::string> file_or_data(const YAML::Node& map, const char* file_key, const char* data_key,
                                 const std::string& base_dir, std::shared_ptr<PrivateFiles>& files) {
  std::string data = str(map, data_key);
  if (data.empty()) return resolve(base_dir, str(map, file_key));
  auto decoded = base64_decode(data);
  if (!decoded) return config_error(std::string(data_key) + ": " + decoded.error().message);
  if (!files) {
    auto created = PrivateFiles::create();
    if (!created) return created.error();
    files = *created;
  }
  return files->write(data_key, *decoded);
}

}  // namespace

Result<ServerAddress> parse_server_url(const std::string& url) {
  ServerAddress a;
  auto sep = url.find("://");
  if (sep == std::string::npos) return config_error("server '" + url + "' has no scheme (https://host:port)");
  a.scheme = url.substr(0, sep);
  if (a.scheme != "https" && a.scheme != "http")
    return config_error("server '" + url + "': unsupported scheme");
  std::string rest = url.substr(sep + 3);
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) a.base_path = rest.substr(slash);
  while (!a.base_path.empty() && a.base_path.back() == '/') a.base_path.pop_back();
  std::string port;
  if (!authority.empty() && authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) return config_error("server '" + url + "': unterminated IPv6 address");
    a.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return config_error("server '" + url + "': junk after IPv6 address");
      port = authority.substr(close + 2);
    }
  } else {
    auto colon = authority.rfind(':');
    a.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (a.host.empty()) return config_error("server '" + url + "' has no host");
  a.port = a.scheme == "https" ? 443 : 80;
  if (!port.empty()) {
    const auto number = parse_integer<int>(port, 1, 65535);
    if (!number) return config_error("server '" + url + "': bad port '" + port + "'");
    a.port = *number;
  }
  return a;
}

Result<KubeConfig> parse_kubeconfig(const std::string& yaml_text, const std::string& base_dir,
                                    const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return config_error(std::string("kubeconfig: ") + e.what());
  }
  if (!root.IsMap()) return config_error("kubeconfig: not a YAML map");
  std::string ctx_name = context.empty() ? str(root, "current-context") : context;
  if (ctx_name.empty()) return config_error("kubeconfig: no current-context and no context given");
  YAML::Node ctx = find_named(root, "contexts", "context", ctx_name);
  if (!ctx.IsDefined() || !ctx.IsMap())
    return config_error("kubeconfig: no context named '" + ctx_name + "'");
  std::string cluster_name = str(ctx, "cluster");
  YAML::Node cluster = find_named(root, "clusters", "cluster", cluster_name);
  if (!cluster.IsDefined() || !cluster.IsMap()) {
    return config_error("kubeconfig: context '" + ctx_name + "' names cluster '" + cluster_name +
                        "', which is not defined");
  }

  KubeConfig cfg;
  cfg.server = str(cluster, "server");
  auto address = parse_server_url(cfg.server);
  if (!address) return config_error("kubeconfig cluster '" + cluster_name + "': " + address.error().message);
  cfg.address = *address;
  std::string insecure = str(cluster, "insecure-skip-tls-verify");
  cfg.insecure_skip_tls_verify = insecure == "true" || insecure == "True";
  auto ca = file_or_data(cluster, "certificate-authority", "certificate-authority-data", base_dir, cfg.files);
  if (!ca) return ca.error();
  cfg.ca_file = *ca;

  std::string user_name = str(ctx, "user");
  if (!user_name.empty()) {
    YAML::Node user = find_named(root, "users", "user", user_name);
    if (!user.IsDefined()) return config_error("kubeconfig: user '" + user_name + "' is not defined");
    if (user.IsMap()) {
      if (user["exec"] || user["auth-provider"]) {
        return make_error(ErrorCode::Unsupported,
                          "kubeconfig user '" + user_name +
                              "': exec and auth-provider credentials are not supported "
                              "(use a token, a token file or a client certificate)");
      }
      if (!str(user, "token").empty()) {
        cfg.token = TokenSource::fixed(str(user, "token"));
      } else if (!str(user, "tokenFile").empty()) {
        cfg.token = TokenSource::from_file(resolve(base_dir, str(user, "tokenFile")));
      }
      auto cert = file_or_data(user, "client-certificate", "client-certificate-data", base_dir, cfg.files);
      if (!cert) return cert.error();
      auto key = file_or_data(user, "client-key", "client-key-data", base_dir, cfg.files);
      if (!key) return key.error();
      if (cert->empty() != key->empty()) {
        return config_error("kubeconfig user '" + user_name +
                            "': a client certificate needs its key and vice versa");
      }
      cfg.client_cert_file = *cert;
      cfg.client_key_file = *key;
    }
  }
  if (!str(ctx, "namespace").empty()) cfg.ns = str(ctx, "namespace");
  return cfg;
}

Result<KubeConfig> load_kubeconfig(const std::string& path, const std::string& context) {
  auto text = read_file(path);
  if (!text) return text.error();
  auto cfg = parse_kubeconfig(*text, std::filesystem::path(path).parent_path().string(), context);
  if (!cfg) return make_error(cfg.error().code, path + ": " + cfg.error().message);
  return cfg;
}

Result<KubeConfig> load_in_cluster(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return make_error(ErrorCode::Unavailable,
                      "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  }
  std::string h = host;
  // An IPv6 service address comes bare; a URL needs it in brackets.
  std::string server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  KubeConfig cfg;
  cfg.server = server;
  auto address = parse_server_url(server);
  if (!address) return address.error();
  cfg.address = *address;
  std::string token_path = sa_dir + "/token";
  cfg.token = TokenSource::from_file(token_path);
  if (auto t = cfg.token->token(); !t) return t.error();  // fail at start-up, not on the first request
  cfg.ca_file = sa_dir + "/ca.crt";
  if (!std::filesystem::exists(cfg.ca_file))
    return make_error(ErrorCode::Io, "no CA bundle at " + cfg.ca_file);
  if (auto ns = read_file(sa_dir + "/namespace"); ns && !trim(*ns).empty()) cfg.ns = trim(*ns);
  return cfg;
}

Result<KubeConfig> load_default_config(const std::string& path, const std::string& context) {
  if (!path.empty()) return load_kubeconfig(path, context);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    std::string first = env;
    first = first.substr(0, first.find(':'));
    return load_kubeconfig(first, context);
  }
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host != nullptr && *host != '\0') {
    return load_in_cluster();
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr)
    return make_error(ErrorCode::NotFound, "no kubeconfig: set --kubeconfig or $KUBECONFIG");
  return load_kubeconfig(std::string(home) + "/.kube/config", context);
}

}  // namespace conduit::kube_client
