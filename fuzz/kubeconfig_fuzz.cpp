// A kubeconfig file (--kubeconfig, $KUBECONFIG, ~/.kube/config): parse_kubeconfig must turn any text into a
// config or an error, never an exception or a crash. Inline *-data fields are decoded and written to a
// private temp directory that the result owns and removes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "conduit/common/base64.h"
#include "kube_client/kube_config.h"
#include "kube_client/log.h"

namespace kube_client = conduit::kube_client;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)conduit::base64_decode(text);
  (void)kube_client::parse_server_url(text);
  auto config = kube_client::parse_kubeconfig(text, "/nonexistent-kubeconfig-dir");
  if (config && (config->address.host.empty() || config->address.port <= 0 || config->address.port > 65535)) {
    std::abort();
  }
  return 0;
}
