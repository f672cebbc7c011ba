// Keys and certificate requests as an agent would make them (and as a bad one might), and what a user checks
// on the certificate that comes back, all with OpenSSL in process: the agent signer's tests.
#pragma once

#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "conduit/common/openssl.h"

namespace conduit::kube::testing {

// "ec:P-256", "ec:P-384", "ec:P-521", "rsa:1024", "rsa:2048", "ed25519".
ossl::Pkey make_key(const std::string& kind);

// A PEM certificate request for `key` naming `subject` (attribute, value; e.g. {"CN", "conduit:agent:a"}).
// Signed by `signer` when given instead of `key`: a request whose signature does not verify.
std::string make_request(EVP_PKEY* key, const std::vector<std::pair<std::string, std::string>>& subject,
                         EVP_PKEY* signer = nullptr);

struct CertFacts {
  bool parsed = false;
  std::string verify_error;  // empty: parsed and verifies against the CA for TLS client authentication
  std::string subject;       // RFC 2253
  bool client_auth = false;  // extendedKeyUsage
  bool server_auth = false;
  bool is_ca = false;
  bool basic_constraints_critical = false;
  bool digital_signature = false;  // keyUsage
  bool key_encipherment = false;
  bool key_usage_critical = false;
  bool key_ids = false;  // subject and authority key identifiers
  bool has_san = false;
  int serial_bits = 0;
  long long lifetime_seconds = 0;  // notAfter - notBefore
  std::time_t not_after = 0;
};

// What the API server's JSON holds for []byte fields (spec.request).
std::string base64(const std::string& bytes);

CertFacts inspect(const std::string& cert_pem, const std::string& ca_file);
// notAfter of the first certificate in a PEM file.
std::time_t not_after_of_file(const std::string& pem_file);

}  // namespace conduit::kube::testing
