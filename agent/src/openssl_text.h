// What OpenSSL says, as text: its last error, a certificate's common name. For the agent's TLS server (who a
// caller is) and its node certificate (what it was issued).
#pragma once

#include <openssl/err.h>
#include <openssl/x509.h>

#include <string>

namespace conduit::agent {

inline std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
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

}  // namespace conduit::agent
