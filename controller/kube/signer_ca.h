// The CA that signs agents' client certificates (a cert-manager CA Secret mounted into the controller), and
// the one thing it does: turn a reviewed certificate request into a client certificate. It copies nothing
// from the request but the subject and the public key; every extension is the signer's own.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "conduit/common/result.h"

namespace conduit::kube {

struct IssuedCertificate {
  std::string pem;        // the leaf alone
  std::string serial;     // hex, for the log
  std::string not_after;  // RFC 3339, for the log
};

class SignerCa {
 public:
  // Reads both PEM files (the certificate file's first certificate is the signer's) and checks that the key
  // is the certificate's and that the certificate is a CA that may sign certificates.
  static Result<SignerCa> load(const std::string& cert_file, const std::string& key_file);

  SignerCa(SignerCa&&) noexcept;
  SignerCa& operator=(SignerCa&&) noexcept;
  ~SignerCa();

  // A client certificate for `request_pem`: X.509 v3, a random 128-bit serial, valid from 5 minutes ago
  // (clock skew) for `lifetime`, but never past the CA's own notAfter; CA:FALSE, digitalSignature (and
  // keyEncipherment for an RSA key), clientAuth, subject and authority key identifiers; no SANs.
  Result<IssuedCertificate> issue(std::string_view request_pem, std::chrono::seconds lifetime) const;

 private:
  struct Keys;
  explicit SignerCa(std::unique_ptr<Keys> keys);
  std::unique_ptr<Keys> keys_;
};

}  // namespace conduit::kube
