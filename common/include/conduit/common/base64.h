// Standard base64 (RFC 4648, with padding), OpenSSL's codec: how the Kubernetes API carries []byte fields (a
// CSR's request and certificate, a kubeconfig's *-data) and how the REST API carries packed scatter ops.
#pragma once

#include <string>
#include <string_view>

#include "conduit/common/result.h"

namespace conduit {

std::string base64_encode(std::string_view bytes);

// Line breaks and blanks are skipped and the URL-safe alphabet (- and _) is read as the standard one, since
// writers of each kind are met; anything else is refused with InvalidArgument saying "invalid base64".
Result<std::string> base64_decode(std::string_view text);

}  // namespace conduit
