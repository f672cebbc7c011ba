// OpenSSL objects owned by unique_ptrs, OpenSSL's own error text and what a certificate says (its CN, its
// times): for the certificate work on both ends of a node certificate (the agent's request, the controller's
// review and issuing) and the agent's TLS server, and digests (the reshard planner's fingerprints).
// Header-only; no other common/ header names an OpenSSL type.
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace conduit::ossl {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};

using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using Pkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Req = std::unique_ptr<X509_REQ, Deleter<X509_REQ, X509_REQ_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Ext = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;
using AsnInteger = std::unique_ptr<ASN1_INTEGER, Deleter<ASN1_INTEGER, ASN1_INTEGER_free>>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, Deleter<EVP_MD_CTX, EVP_MD_CTX_free>>;

// Drains this thread's OpenSSL error queue into one line, so a failure's text is the library's own and no
// stale entry is left to confuse the next call. "unknown OpenSSL error" when the queue is empty.
inline std::string error_text() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// The certificate's (first) common name as UTF-8; empty when it has none.
inline std::string common_name(X509* cert) {
  std::string name;
  X509_NAME* subject = X509_get_subject_name(cert);
  const int at = subject != nullptr ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (at >= 0) {
    unsigned char* utf8 = nullptr;
    const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
    if (n > 0) name.assign(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(n));
    OPENSSL_free(utf8);
  }
  return name;
}

// A certificate time (notBefore, notAfter) on the system clock; nullopt when it does not read.
inline std::optional<std::chrono::system_clock::time_point> time_of(const ASN1_TIME* t) {
  int days = 0, seconds = 0;  // from now to t
  if (ASN1_TIME_diff(&days, &seconds, nullptr, t) != 1) return std::nullopt;
  return std::chrono::system_clock::now() +
         std::chrono::seconds(static_cast<long long>(days) * 86400 + seconds);
}

// Reads `data` in place: it must outlive the BIO.
inline Bio memory_bio(std::string_view data) {
  return Bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

// What a memory BIO holds.
inline std::string bio_text(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
}

// The first PEM CERTIFICATE REQUEST in `pem`; null (with error_text() to say why) when there is none.
inline Req parse_request(std::string_view pem) {
  Bio bio = memory_bio(pem);
  return Req(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

}  // namespace conduit::ossl
