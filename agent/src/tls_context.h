// The agent's TLS server identity: its certificate chain and key, as an OpenSSL context that new
// connections take. The files are re-read when they change (cert-manager, or a chart upgrade, rotating
// them), checked at most once a second; a pair that does not load (half-written, key not matching) keeps the
// previous context and says why once. Connections already open keep the context they started with.
// With a client CA the server also asks each caller for a certificate: one signed by that CA is verified in
// the handshake (a bad one ends it) and names the caller (rest/identity.h); none at all is allowed, since
// probes and token holders present none. A second CA (--agent-client-ca-file, the controller's signer of
// node certificates) is trusted the same way, but what it signed may name agents alone.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::agent {

// What says a file changed: its modification time, size and inode (a rename over it changes the inode).
struct FileStamp {
  long long mtime_ns = 0;
  long long size = 0;
  unsigned long long inode = 0;
  bool operator==(const FileStamp&) const = default;
};

// The verified certificate a caller presented.
struct PeerCertificate {
  std::string name;           // its common name; empty: none, or one that did not verify
  bool agent_signer = false;  // signed by the agents' CA (--agent-client-ca-file): it may name an agent alone
};

class TlsContext {
 public:
  // Fails with the reason when the pair does not load now.
  static Result<std::shared_ptr<TlsContext>> load(std::string cert_file, std::string key_file,
                                                  std::string client_ca_file = "",
                                                  std::string agent_client_ca_file = "");

  // The context for a new connection.
  std::shared_ptr<SSL_CTX> current();
  // Who `ssl`'s handshake verified, for a connection made with a context of this object.
  PeerCertificate peer(SSL* ssl) const;
  // How many times the files were loaded (1 at start; each rotation adds one).
  int loads() const;

 private:
  using Stamps = std::array<FileStamp, 4>;
  using Anchors = std::vector<std::shared_ptr<X509>>;
  struct Built {
    std::shared_ptr<SSL_CTX> ctx;
    Anchors agent_anchors;  // the certificates of --agent-client-ca-file
  };
  TlsContext(std::string cert_file, std::string key_file, std::string client_ca_file,
             std::string agent_client_ca_file);
  Result<Built> build() const;
  Stamps stamps() const;

  const std::string cert_file_, key_file_, client_ca_file_, agent_client_ca_file_;
  mutable std::mutex mu_;
  std::shared_ptr<SSL_CTX> ctx_;
  Anchors agent_anchors_;
  Stamps loaded_{};
  std::chrono::steady_clock::time_point checked_{};
  std::string last_error_;
  int loads_ = 0;
};

}  // namespace conduit::agent
