#include "conduit/transport.h"

#include <chrono>
#include <thread>

#include "../libfabric/libfabric_transport.h"
#include "conduit/verbs.h"

namespace conduit {

// The backend factory: adding a backend adds a line here and a folder beside libfabric/.
Result<std::unique_ptr<Transport>> open_transport(const TransportConfig& config) {
  if (config.provider == verbs::kProviderName) {
    auto options = verbs::VerbsOptions::from_environment();
    if (!options) return options.error();
    return verbs::open(config, *options);
  }
  return fabric::LibfabricTransport::open(config);
}

BatchStatus wait(Transport& transport, BatchId id) {
  // The rails progress on their own threads; this thread only watches, so a short sleep costs nothing.
  for (;;) {
    BatchStatus s = transport.poll(id);
    if (s.finished) return s;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace conduit
