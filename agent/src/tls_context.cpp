#include "tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include "conduit/common/log.h"
#include "conduit/common/openssl.h"

namespace conduit::agent {

namespace {

// Every certificate of a PEM bundle.
Result<std::vector<std::shared_ptr<X509>>> read_certificates(const std::string& file) {
  ossl::Bio in(BIO_new_file(file.c_str(), "r"));
  if (!in)
    return make_error(ErrorCode::InvalidArgument,
                      "agent CA " + file + " does not open: " + ossl::error_text());
  std::vector<std::shared_ptr<X509>> out;
  while (X509* cert = PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr))
    out.emplace_back(cert, X509_free);
  ERR_clear_error();  // the end of the file
  if (out.empty())
    return make_error(ErrorCode::InvalidArgument, "agent CA " + file + " holds no certificate");
  return out;
}

}  // namespace

TlsContext::TlsContext(std::string cert_file, std::string key_file, std::string client_ca_file,
                       std::string agent_client_ca_file)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      client_ca_file_(std::move(client_ca_file)),
      agent_client_ca_file_(std::move(agent_client_ca_file)) {}

Result<std::shared_ptr<TlsContext>> TlsContext::load(std::string cert_file, std::string key_file,
                                                     std::string client_ca_file,
                                                     std::string agent_client_ca_file) {
  std::shared_ptr<TlsContext> tls(new TlsContext(std::move(cert_file), std::move(key_file),
                                                 std::move(client_ca_file), std::move(agent_client_ca_file)));
  tls->loaded_ = tls->stamps();
  auto built = tls->build();
  if (!built) return built.error();
  tls->ctx_ = std::move(built->ctx);
  tls->agent_anchors_ = std::move(built->agent_anchors);
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
  return {stamp(cert_file_), stamp(key_file_), client_ca_file_.empty() ? FileStamp{} : stamp(client_ca_file_),
          agent_client_ca_file_.empty() ? FileStamp{} : stamp(agent_client_ca_file_)};
}

Result<TlsContext::Built> TlsContext::build() const {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return make_error(ErrorCode::ResourceExhausted, "TLS: " + ossl::error_text());
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
                      "TLS certificate " + cert_file_ + " does not load: " + ossl::error_text());
  }
  if (SSL_CTX_use_PrivateKey_file(c, key_file_.c_str(), SSL_FILETYPE_PEM) != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "TLS key " + key_file_ + " does not load: " + ossl::error_text());
  }
  if (SSL_CTX_check_private_key(c) != 1) {
    return make_error(ErrorCode::InvalidArgument, "TLS key " + key_file_ + " is not the key of " +
                                                      cert_file_ + ": " + ossl::error_text());
  }
  Anchors agent_anchors;
  if (!agent_client_ca_file_.empty()) {
    auto read = read_certificates(agent_client_ca_file_);
    if (!read) return read.error();
    agent_anchors = std::move(*read);
  }
  // The CAs' names go in the CertificateRequest, so a client holding several certificates picks ours.
  STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
  for (const std::string* file : {&client_ca_file_, &agent_client_ca_file_}) {
    if (file->empty()) continue;
    if (SSL_CTX_load_verify_locations(c, file->c_str(), nullptr) != 1) {
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return make_error(ErrorCode::InvalidArgument,
                        "client CA " + *file + " does not load: " + ossl::error_text());
    }
    if (names != nullptr) SSL_add_file_cert_subjects_to_stack(names, file->c_str());
  }
  if (names != nullptr && sk_X509_NAME_num(names) > 0) {
    SSL_CTX_set_client_CA_list(c, names);
  } else if (names != nullptr) {
    sk_X509_NAME_free(names);
  }
  if (!client_ca_file_.empty() || !agent_client_ca_file_.empty()) {
    // VERIFY_PEER without FAIL_IF_NO_PEER_CERT: a certificate that does not verify (another CA, expired)
    // ends the handshake; no certificate leaves the caller to its token, or to the public routes.
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  }
  return Built{std::move(ctx), std::move(agent_anchors)};
}

PeerCertificate TlsContext::peer(SSL* ssl) const {
  // Without a client CA the server never asks for a certificate, and with one a certificate that fails
  // verification ends the handshake; the result is checked anyway.
  if (ssl == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return {};
  PeerCertificate out{ossl::common_name(cert), false};
  // The chain's last certificate is the trust anchor that verified it.
  STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl);
  const int n = chain != nullptr ? sk_X509_num(chain) : 0;
  X509* anchor = n > 0 ? sk_X509_value(chain, n - 1) : nullptr;
  std::lock_guard lock(mu_);
  for (const auto& a : agent_anchors_) {
    if (anchor != nullptr && X509_cmp(anchor, a.get()) == 0) out.agent_signer = true;
  }
  return out;
}

std::shared_ptr<SSL_CTX> TlsContext::current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ < std::chrono::seconds(1)) return ctx_;
  checked_ = now;
  const auto seen = stamps();
  if (seen == loaded_) return ctx_;
  auto built = build();
  if (!built) {
    // Often a rotation caught between its two files: the next look (a second on) tries again.
    if (built.error().message != last_error_) {
      log::warn("TLS files changed but do not load: serving with the previous certificate",
                {{"error", built.error().message}});
      last_error_ = built.error().message;
    }
    return ctx_;
  }
  loaded_ = seen;
  last_error_.clear();
  ctx_ = std::move(built->ctx);
  agent_anchors_ = std::move(built->agent_anchors);
  ++loads_;
  log::info("TLS certificate reloaded", {{"cert", cert_file_}, {"loads", std::to_string(loads_)}});
  return ctx_;
}

int TlsContext::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

}  // namespace conduit::agent
