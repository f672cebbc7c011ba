// Where the API server is and who we are to it: from a kubeconfig file (current context or a named one) or
// from the pod's service account (in-cluster). The result is plain data plus shared handles (a token that
// may rotate, private copies of inline certificates) that KubeClient turns into connections.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "conduit/common/result.h"
#include "credentials.h"

namespace conduit::kube_client {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ServerAddress {
  std::string scheme;  // "https" or "http"
  std::string host;    // without brackets for IPv6
  int port = 0;
  std::string base_path;  // "" or "/prefix" (a server behind a path-routing proxy), no trailing slash
};

Result<ServerAddress> parse_server_url(const std::string& url);

struct KubeConfig {
  std::string server;  // as configured, for messages
  ServerAddress address;
  std::string ca_file;  // PEM bundle to verify the server; empty: the system trust store
  bool insecure_skip_tls_verify = false;
  std::string client_cert_file;  // PEM client certificate and key (mutual TLS); both or neither
  std::string client_key_file;
  std::shared_ptr<TokenSource> token;   // null: no bearer token
  std::string ns = "default";           // the context's (or the service account's) namespace
  std::shared_ptr<PrivateFiles> files;  // owns the copies of *-data fields the paths above point into
};

// A kubeconfig's `context` (empty: current-context). Relative file paths are relative to the file's
// directory, as kubectl resolves them. exec and auth-provider users are refused with a message.
Result<KubeConfig> load_kubeconfig(const std::string& path, const std::string& context = "");
Result<KubeConfig> parse_kubeconfig(const std::string& yaml_text, const std::string& base_dir,
                                    const std::string& context = "");

// In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service account's token, ca.crt and namespace under
// `sa_dir` (a parameter so tests can point it at a temp dir).
Result<KubeConfig> load_in_cluster(const std::string& sa_dir = kServiceAccountDir);

// What the controller does without flags, in kubectl's order: `path` if given, else the first file in
// $KUBECONFIG, else in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config.
Result<KubeConfig> load_default_config(const std::string& path = "", const std::string& context = "");

}  // namespace conduit::kube_client
