#include "node_certificate.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "conduit/common/base64.h"
#include "conduit/common/condition.h"
#include "conduit/common/log.h"
#include "conduit/common/openssl.h"
#include "kube_client/client.h"
#include "kube_client/resource.h"

namespace conduit::agent {
namespace {

using json = nlohmann::json;
using SystemClock = std::chrono::system_clock;

using Key = ossl::Pkey;
using Cert = ossl::Cert;

std::string node_cn(const std::string& node) {
  return std::string(kube_client::kAgentCommonNamePrefix) + node;
}

// A new P-256 key and a CSR for `cn` signed with it, as PEM.
Result<std::pair<Key, std::string>> make_request(const std::string& cn) {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return make_error(ErrorCode::Unavailable, "cannot make a key: " + ossl::error_text());
  ossl::Req req(X509_REQ_new());
  X509_NAME* name = req ? X509_REQ_get_subject_name(req.get()) : nullptr;
  if (!req || name == nullptr || X509_REQ_set_version(req.get(), 0) != 1 ||
      X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0) != 1 ||
      X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return make_error(ErrorCode::Unavailable, "cannot make a certificate request: " + ossl::error_text());
  }
  ossl::Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509_REQ(out.get(), req.get()) != 1) {
    return make_error(ErrorCode::Unavailable, "cannot write the certificate request: " + ossl::error_text());
  }
  return std::pair<Key, std::string>{std::move(key), ossl::bio_text(out.get())};
}

// When a certificate for `cn` held with `key` is due for renewal (two thirds into its life), or why it is
// no use.
Result<SystemClock::time_point> renewal_time(X509* cert, EVP_PKEY* key, const std::string& cn) {
  if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    return make_error(ErrorCode::InvalidArgument, "the certificate is not the key's");
  }
  if (ossl::common_name(cert) != cn)
    return make_error(ErrorCode::InvalidArgument, "the certificate names another CN");
  const auto from = ossl::time_of(X509_get0_notBefore(cert));
  const auto until = ossl::time_of(X509_get0_notAfter(cert));
  if (!from || !until) return make_error(ErrorCode::InvalidArgument, "the certificate's dates do not read");
  if (*until <= SystemClock::now())
    return make_error(ErrorCode::InvalidArgument, "the certificate has expired");
  return *from + (*until - *from) * 2 / 3;
}

// key then certificate, 0600, written beside `path` and renamed over it.
Status write_pair(const std::string& path, EVP_PKEY* key, const std::string& cert_pem) {
  ossl::Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return make_error(ErrorCode::Unavailable, "cannot write the key: " + ossl::error_text());
  }
  const std::string text = ossl::bio_text(out.get()) + cert_pem;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(ErrorCode::Io, "cannot write " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::Io, "cannot write " + tmp + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::Io, "cannot rename " + tmp + " to " + path + ": " + why);
  }
  return {};
}

// A CSR's condition of `type` ("Denied", "Failed") when it holds; one without a status counts as True, as the
// API server defaults it.
const json* holding(const json& csr, const char* type) {
  const json* c = csr.contains("status") ? find_condition(csr["status"], type) : nullptr;
  return c != nullptr && c->value("status", "True") == "True" ? c : nullptr;
}

}  // namespace

NodeCertificate::NodeCertificate(NodeCertificateOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<NodeCertificate>> NodeCertificate::start(NodeCertificateOptions options) {
  if (options.file.empty()) return make_error(ErrorCode::InvalidArgument, "no file for the node certificate");
  if (options.node.empty())
    return make_error(ErrorCode::InvalidArgument, "the node certificate needs a node name");
  if (options.lifetime < std::chrono::minutes(10)) {
    // The CSR API's floor for spec.expirationSeconds.
    return make_error(ErrorCode::InvalidArgument, "a node certificate lives at least 10 minutes");
  }
  std::unique_ptr<NodeCertificate> self(new NodeCertificate(std::move(options)));
  kube_client::ClientOptions client;
  client.user_agent = "conduit-agent";
  self->client_ = std::make_unique<kube_client::KubeClient>(self->options_.kube, client);
  self->not_ready_ = "no node certificate yet";
  self->thread_ = std::thread([s = self.get()] { s->run(); });
  return self;
}

NodeCertificate::~NodeCertificate() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> NodeCertificate::not_ready() const {
  std::lock_guard lock(mu_);
  return not_ready_;
}

void NodeCertificate::set_state(std::optional<std::string> not_ready) {
  std::lock_guard lock(mu_);
  not_ready_ = std::move(not_ready);
}

bool NodeCertificate::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stop_; });
}

std::optional<SystemClock::time_point> NodeCertificate::renew_at() const {
  ossl::Bio in(BIO_new_file(options_.file.c_str(), "r"));
  if (!in) {
    ERR_clear_error();
    return std::nullopt;
  }
  Key key(PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr));
  Cert cert(key ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  if (!key || !cert) return std::nullopt;
  auto at = renewal_time(cert.get(), key.get(), node_cn(options_.node));
  if (!at) return std::nullopt;
  return *at;
}

void NodeCertificate::run() {
  auto backoff = std::chrono::milliseconds(1000);
  for (;;) {
    const auto at = renew_at();  // nullopt: no certificate usable now
    if (at && *at > SystemClock::now()) {
      set_state(std::nullopt);
      backoff = std::chrono::milliseconds(1000);
      // Woken at least hourly, so a clock that jumped is noticed.
      const auto wait = std::min<SystemClock::duration>(*at - SystemClock::now(), std::chrono::hours(1));
      if (!sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(wait))) return;
      continue;
    }
    if (request(/*have_valid=*/at.has_value())) {
      backoff = std::chrono::milliseconds(1000);
      continue;
    }
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    // A certificate still valid keeps being used while the renewal is retried.
    if (!sleep_for(backoff)) return;
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(60));
  }
}

bool NodeCertificate::request(bool have_valid) {
  const std::string cn = node_cn(options_.node);
  auto fail = [&](const std::string& why) {
    log::warn("node certificate: " + why, {{"node", options_.node}});
    // While an older certificate is valid the agent stays ready; the reason is in the log.
    if (!have_valid) set_state(why);
    return false;
  };
  auto made = make_request(cn);
  if (!made) return fail(made.error().message);
  auto& [key, pem] = *made;
  json csr = {{"apiVersion", "certificates.k8s.io/v1"},
              {"kind", "CertificateSigningRequest"},
              {"metadata",
               {{"generateName", "conduit-agent-" + options_.node + "-"},
                {"labels", {{"conduit.dev/node", options_.node}}}}},
              {"spec",
               {{"request", base64_encode(pem)},
                {"signerName", kube_client::kAgentSignerName},
                {"expirationSeconds", options_.lifetime.count()},
                {"usages", {"client auth", "digital signature"}}}}};
  auto created = client_->create(kube_client::resources::certificate_signing_requests(), "", csr);
  if (!created) return fail("cannot create a CertificateSigningRequest: " + created.error().message);
  const std::string name = kube_client::meta_string(*created, "name");
  log::info("node certificate requested", {{"node", options_.node}, {"csr", name}});
  if (!have_valid) set_state("waiting for the controller to sign CertificateSigningRequest " + name);
  json current = std::move(*created);
  for (;;) {
    if (const json* denied = holding(current, "Denied")) {
      return fail("CertificateSigningRequest " + name + " was denied: " + denied->value("message", ""));
    }
    if (const json* failed = holding(current, "Failed")) {
      return fail("CertificateSigningRequest " + name + " failed: " + failed->value("message", ""));
    }
    const json& status = current.contains("status") ? current["status"] : json();
    if (status.is_object() && status.contains("certificate") && status["certificate"].is_string() &&
        !status["certificate"].get_ref<const std::string&>().empty()) {
      break;
    }
    if (!sleep_for(options_.poll)) return false;
    auto again = client_->get(kube_client::resources::certificate_signing_requests(), "", name);
    if (!again) {
      if (again.error().code == ErrorCode::NotFound)
        return fail("CertificateSigningRequest " + name + " is gone");
      log::warn("node certificate: cannot read CertificateSigningRequest " + name,
                {{"error", again.error().message}});
      continue;  // the apiserver may be back at the next look
    }
    current = std::move(*again);
  }
  auto cert_pem = base64_decode(current["status"]["certificate"].get<std::string>());
  if (!cert_pem) return fail("CertificateSigningRequest " + name + ": the certificate is not base64");
  ossl::Bio in = ossl::memory_bio(*cert_pem);
  Cert cert(in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert)
    return fail("CertificateSigningRequest " + name +
                ": the certificate does not parse: " + ossl::error_text());
  if (auto usable = renewal_time(cert.get(), key.get(), cn); !usable) {
    return fail("CertificateSigningRequest " + name +
                ": the signed certificate is no use: " + usable.error().message);
  }
  if (auto written = write_pair(options_.file, key.get(), *cert_pem); !written)
    return fail(written.error().message);
  set_state(std::nullopt);
  log::info("node certificate issued", {{"node", options_.node}, {"csr", name}, {"file", options_.file}});
  return true;
}

}  // namespace conduit::agent
