#include "tls_context.h"

#include <openssl/err.h>
#include <sys/stat.h>

#include "conduit/common/log.h"

namespace conduit::agent {

namespace {

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

}  // namespace

TlsContext::TlsContext(std::string cert_file, std::string key_file, std::string client_ca_file)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      client_ca_file_(std::move(client_ca_file)) {}

Result<std::shared_ptr<TlsContext>> TlsContext::load(std::string cert_file, std::string key_file,
                                                     std::string client_ca_file) {
  std::shared_ptr<TlsContext> tls(
      new TlsContext(std::move(cert_file), std::move(key_file), std::move(client_ca_file)));
  tls->loaded_ = tls->stamps();
  auto ctx = tls->build();
  if (!ctx) return ctx.error();
  tls->ctx_ = std::move(*ctx);
  tls->checked_ = std::chrono::steady_clock::now();
  tls->loads_ = 1;
  return tls;
}

TlsContext::Stamps TlsContext::stamps() const {
  auto stamp = [](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return FileStamp{};
    return FileStamp{static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                     static_cast<long long>(st.st_size), static_cast<unsigned long long>(st.st_ino)};
  };
  return {stamp(cert_file_), stamp(key_file_),
          client_ca_file_.empty() ? FileStamp{} : stamp(client_ca_file_)};
}

Result<std::shared_ptr<SSL_CTX>> TlsContext::build() const {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return make_error(ErrorCode::ResourceExhausted, "TLS: " + openssl_error());
  SSL_CTX* c = ctx.get();
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  // No renegotiation (a client could make the server redo handshakes at will) and no session tickets: a
  // ticket is a write after the handshake, and our clients open a connection per call and never resume.
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_num_tickets(c, 0);
  // Writes behave as send(2) (partial counts) on the non-blocking sockets the gate and workers use; an idle
  // kept-alive connection gives its buffers back.
  SSL_CTX_set_mode(
      c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_use_certificate_chain_file(c, cert_file_.c_str()) != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "TLS certificate " + cert_file_ + " does not load: " + openssl_error());
  }
  if (SSL_CTX_use_PrivateKey_file(c, key_file_.c_str(), SSL_FILETYPE_PEM) != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "TLS key " + key_file_ + " does not load: " + openssl_error());
  }
  if (SSL_CTX_check_private_key(c) != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "TLS key " + key_file_ + " is not the key of " + cert_file_ + ": " + openssl_error());
  }
  if (!client_ca_file_.empty()) {
    if (SSL_CTX_load_verify_locations(c, client_ca_file_.c_str(), nullptr) != 1) {
      return make_error(ErrorCode::InvalidArgument,
                        "client CA " + client_ca_file_ + " does not load: " + openssl_error());
    }
    // The CA's name goes in the CertificateRequest, so a client holding several certificates picks ours.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca_file_.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(c, names);
    // VERIFY_PEER without FAIL_IF_NO_PEER_CERT: a certificate that does not verify (another CA, expired)
    // ends the handshake; no certificate leaves the caller to its token, or to the public routes.
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  }
  return ctx;
}

std::shared_ptr<SSL_CTX> TlsContext::current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ < std::chrono::seconds(1)) return ctx_;
  checked_ = now;
  const auto seen = stamps();
  if (seen == loaded_) return ctx_;
  auto ctx = build();
  if (!ctx) {
    // Often a rotation caught between its two files: the next look (a second on) tries again.
    if (ctx.error().message != last_error_) {
      log::warn("TLS files changed but do not load: serving with the previous certificate",
                {{"error", ctx.error().message}});
      last_error_ = ctx.error().message;
    }
    return ctx_;
  }
  loaded_ = seen;
  last_error_.clear();
  ctx_ = std::move(*ctx);
  ++loads_;
  log::info("TLS certificate reloaded", {{"cert", cert_file_}, {"loads", std::to_string(loads_)}});
  return ctx_;
}

int TlsContext::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

}  // namespace conduit::agent
