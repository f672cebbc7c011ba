#include "signer_ca.h"

#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <ctime>

#include "conduit/common/openssl.h"
#include "conduit/common/time.h"
#include "kube_client/credentials.h"

namespace conduit::kube {
namespace {

constexpr long kClockSkewSeconds = 5 * 60;

Error ca_error(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

Error issue_error(const std::string& what) {
  return make_error(ErrorCode::Provider,
                    "issuing the agent certificate: " + what + ": " + ossl::error_text());
}

Status add_extension(X509* leaf, X509V3_CTX& ctx, int nid, const char* value) {
  ossl::Ext ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(leaf, ext.get(), -1) != 1) return issue_error(std::string(OBJ_nid2sn(nid)));
  return {};
}

// The CA's subject key identifier or, for a CA without one, the SHA-1 of its public key (RFC 5280's first
// method, what "hash" computes), so that chain building finds the CA either way. OpenSSL's
// "keyid:always" would refuse such a CA.
Status add_authority_key_id(X509* leaf, X509* ca) {
  std::unique_ptr<AUTHORITY_KEYID, ossl::Deleter<AUTHORITY_KEYID, AUTHORITY_KEYID_free>> akid(
      AUTHORITY_KEYID_new());
  if (!akid) return issue_error("authorityKeyIdentifier");
  if (const ASN1_OCTET_STRING* skid = X509_get0_subject_key_id(ca)) {
    akid->keyid = ASN1_OCTET_STRING_dup(skid);
  } else {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    akid->keyid = ASN1_OCTET_STRING_new();
    if (akid->keyid != nullptr && (X509_pubkey_digest(ca, EVP_sha1(), md, &len) != 1 ||
                                   ASN1_OCTET_STRING_set(akid->keyid, md, static_cast<int>(len)) != 1)) {
      return issue_error("the CA's key identifier");
    }
  }
  if (akid->keyid == nullptr ||
      X509_add1_ext_i2d(leaf, NID_authority_key_identifier, akid.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return issue_error("authorityKeyIdentifier");
  }
  return {};
}

std::string rfc3339(const ASN1_TIME* t) {
  const auto at = ossl::time_of(t);
  return at ? format_rfc3339(*at) : "(unreadable)";
}

}  // namespace

struct SignerCa::Keys {
  ossl::Cert cert;
  ossl::Pkey key;
};

SignerCa::SignerCa(std::unique_ptr<Keys> keys) : keys_(std::move(keys)) {}
SignerCa::SignerCa(SignerCa&&) noexcept = default;
SignerCa& SignerCa::operator=(SignerCa&&) noexcept = default;
SignerCa::~SignerCa() = default;

Result<SignerCa> SignerCa::load(const std::string& cert_file, const std::string& key_file) {
  auto cert_pem = kube_client::read_file(cert_file);
  if (!cert_pem) return ca_error("the agent signer certificate: " + cert_pem.error().message);
  auto key_pem = kube_client::read_file(key_file);
  if (!key_pem) return ca_error("the agent signer key: " + key_pem.error().message);

  auto keys = std::make_unique<Keys>();
  ossl::Bio cert_bio = ossl::memory_bio(*cert_pem);
  keys->cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!keys->cert) return ca_error(cert_file + " holds no PEM certificate: " + ossl::error_text());
  ossl::Bio key_bio = ossl::memory_bio(*key_pem);
  keys->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!keys->key) return ca_error(key_file + " holds no PEM private key: " + ossl::error_text());
  if (X509_check_private_key(keys->cert.get(), keys->key.get()) != 1) {
    ossl::error_text();
    return ca_error("the key in " + key_file + " is not the key of the certificate in " + cert_file);
  }
  if (X509_check_ca(keys->cert.get()) != 1) {
    return ca_error("the certificate in " + cert_file +
                    " is not a CA (it needs basicConstraints CA:TRUE and, if it has keyUsage, keyCertSign)");
  }
  return SignerCa(std::move(keys));
}

Result<IssuedCertificate> SignerCa::issue(std::string_view request_pem, std::chrono::seconds lifetime) const {
  X509* ca = keys_->cert.get();
  ossl::Req req = ossl::parse_request(request_pem);
  if (!req) return issue_error("the request does not parse");
  EVP_PKEY* subject_key = X509_REQ_get0_pubkey(req.get());
  if (subject_key == nullptr) return issue_error("the request's public key");

  // Seconds the CA has left: a leaf outliving its issuer would only fail verification later, and less
  // clearly.
  const auto ca_end = ossl::time_of(X509_get0_notAfter(ca));
  if (!ca_end) return issue_error("the CA's notAfter");
  const long long ca_left =
      std::chrono::duration_cast<std::chrono::seconds>(*ca_end - std::chrono::system_clock::now()).count();
  if (ca_left <= 0) {
    return make_error(ErrorCode::Unavailable,
                      "the agent signer CA expired at " + rfc3339(X509_get0_notAfter(ca)) + ": rotate it");
  }

  ossl::Cert leaf(X509_new());
  if (!leaf || X509_set_version(leaf.get(), X509_VERSION_3) != 1) return issue_error("a new certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return issue_error("a random serial");
  ossl::Bignum serial_bn(BN_bin2bn(serial, sizeof serial, nullptr));
  if (!serial_bn || BN_to_ASN1_INTEGER(serial_bn.get(), X509_get_serialNumber(leaf.get())) == nullptr) {
    return issue_error("the serial");
  }
  if (X509_set_issuer_name(leaf.get(), X509_get_subject_name(ca)) != 1 ||
      X509_set_subject_name(leaf.get(), X509_REQ_get_subject_name(req.get())) != 1 ||
      X509_set_pubkey(leaf.get(), subject_key) != 1) {
    return issue_error("the names and key");
  }
  const bool capped = lifetime.count() >= ca_left;
  if (X509_gmtime_adj(X509_getm_notBefore(leaf.get()), -kClockSkewSeconds) == nullptr ||
      (capped ? X509_set1_notAfter(leaf.get(), X509_get0_notAfter(ca)) != 1
              : X509_gmtime_adj(X509_getm_notAfter(leaf.get()), static_cast<long>(lifetime.count())) ==
                    nullptr)) {
    return issue_error("the validity");
  }

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca, leaf.get(), nullptr, nullptr, 0);
  const bool rsa = EVP_PKEY_get_base_id(subject_key) == EVP_PKEY_RSA;
  for (const auto& [nid, value] : {
           std::pair{NID_basic_constraints, "critical,CA:FALSE"},
           std::pair{NID_key_usage,
                     rsa ? "critical,digitalSignature,keyEncipherment" : "critical,digitalSignature"},
           std::pair{NID_ext_key_usage, "clientAuth"},
           std::pair{NID_subject_key_identifier, "hash"},
       }) {
    if (Status s = add_extension(leaf.get(), ctx, nid, value); !s) return s.error();
  }
  if (Status s = add_authority_key_id(leaf.get(), ca); !s) return s.error();

  // Ed25519/Ed448 keys sign without a separate digest.
  const int ca_type = EVP_PKEY_get_base_id(keys_->key.get());
  const EVP_MD* md = ca_type == EVP_PKEY_ED25519 || ca_type == EVP_PKEY_ED448 ? nullptr : EVP_sha256();
  if (X509_sign(leaf.get(), keys_->key.get(), md) <= 0) return issue_error("signing");

  ossl::Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509(out.get(), leaf.get()) != 1) return issue_error("writing PEM");
  IssuedCertificate issued;
  issued.pem = ossl::bio_text(out.get());
  if (char* hex = BN_bn2hex(serial_bn.get())) {
    issued.serial = hex;
    OPENSSL_free(hex);
  }
  issued.not_after = rfc3339(X509_get0_notAfter(leaf.get()));
  return issued;
}

}  // namespace conduit::kube
