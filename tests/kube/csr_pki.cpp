#include "csr_pki.h"

#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <sstream>

namespace conduit::kube::testing {
namespace {

std::time_t epoch(const ASN1_TIME* t) {
  std::tm tm{};
  return ASN1_TIME_to_tm(t, &tm) == 1 ? timegm(&tm) : 0;
}

bool critical(X509* cert, int nid) {
  const int at = X509_get_ext_by_NID(cert, nid, -1);
  return at >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, at)) == 1;
}

}  // namespace

ossl::Pkey make_key(const std::string& kind) {
  if (kind == "ec:P-256") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (kind == "ec:P-384") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-384"));
  if (kind == "ec:P-521") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-521"));
  if (kind == "rsa:1024") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", std::size_t{1024}));
  if (kind == "rsa:2048") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", std::size_t{2048}));
  if (kind == "ed25519") return ossl::Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  return nullptr;
}

std::string make_request(EVP_PKEY* key, const std::vector<std::pair<std::string, std::string>>& subject,
                         EVP_PKEY* signer) {
  ossl::Req req(X509_REQ_new());
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  for (const auto& [field, value] : subject) {
    X509_NAME_add_entry_by_txt(name, field.c_str(), MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1, 0);
  }
  X509_REQ_set_pubkey(req.get(), key);
  EVP_PKEY* by = signer != nullptr ? signer : key;
  const int type = EVP_PKEY_get_base_id(by);
  X509_REQ_sign(req.get(), by, type == EVP_PKEY_ED25519 ? nullptr : EVP_sha256());
  ossl::Bio out(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_REQ(out.get(), req.get());
  return ossl::bio_text(out.get());
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

CertFacts inspect(const std::string& cert_pem, const std::string& ca_file) {
  CertFacts f;
  ossl::Bio in = ossl::memory_bio(cert_pem);
  ossl::Cert cert(PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    f.verify_error = "no certificate";
    return f;
  }
  f.parsed = true;

  std::unique_ptr<X509_STORE, ossl::Deleter<X509_STORE, X509_STORE_free>> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, ossl::Deleter<X509_STORE_CTX, X509_STORE_CTX_free>> ctx(
      X509_STORE_CTX_new());
  X509_STORE_load_file(store.get(), ca_file.c_str());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) != 1) {
    f.verify_error = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  }

  ossl::Bio name(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(name.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_RFC2253);
  f.subject = ossl::bio_text(name.get());
  const uint32_t xku = X509_get_extended_key_usage(cert.get());
  f.client_auth = (xku & XKU_SSL_CLIENT) != 0;
  f.server_auth = (xku & XKU_SSL_SERVER) != 0;
  f.is_ca = X509_check_ca(cert.get()) != 0;
  f.basic_constraints_critical = critical(cert.get(), NID_basic_constraints);
  const uint32_t ku = X509_get_key_usage(cert.get());
  f.digital_signature = (ku & KU_DIGITAL_SIGNATURE) != 0;
  f.key_encipherment = (ku & KU_KEY_ENCIPHERMENT) != 0;
  f.key_usage_critical = critical(cert.get(), NID_key_usage);
  f.key_ids =
      X509_get0_subject_key_id(cert.get()) != nullptr && X509_get0_authority_key_id(cert.get()) != nullptr;
  f.has_san = X509_get_ext_by_NID(cert.get(), NID_subject_alt_name, -1) >= 0;
  ossl::Bignum serial(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
  f.serial_bits = serial ? BN_num_bits(serial.get()) : 0;
  f.not_after = epoch(X509_get0_notAfter(cert.get()));
  f.lifetime_seconds = f.not_after - epoch(X509_get0_notBefore(cert.get()));
  ossl::error_text();
  return f;
}

std::time_t not_after_of_file(const std::string& pem_file) {
  std::ifstream in(pem_file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string pem = text.str();  // the BIO reads it in place
  ossl::Bio bio = ossl::memory_bio(pem);
  ossl::Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  return cert ? epoch(X509_get0_notAfter(cert.get())) : 0;
}

}  // namespace conduit::kube::testing
