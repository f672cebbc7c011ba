#include "conduit/transport.h"

#include <chrono>
#include <thread>

#include "../libfabric/libfabric_transport.h"
#include "conduit/verbs.h"

namespace conduit {

// The backend factory: adding a backend adds a line here and a folder beside libfabric/.
Result<std::unique_ptr<Transport>> open_transport(const TransportConfig& config) {
  if (config.provider == verbs::kProviderName) return verbs::open(config, config.ibverbs);
  return fabric::LibfabricTransport::open(config);
}

std::string_view to_string(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::Auto:
      return "auto";
    case ProgressMode::Fd:
      return "fd";
    case ProgressMode::Backoff:
      return "backoff";
    case ProgressMode::Spin:
      return "spin";
  }
  return "unknown";
}

Result<std::vector<std::uint32_t>> registration_rails(std::span<const std::uint32_t> asked, int rails) {
  std::vector<std::uint32_t> out;
  if (asked.empty()) {
    for (int r = 0; r < rails; ++r) out.push_back(static_cast<std::uint32_t>(r));
    return out;
  }
  for (const std::uint32_t r : asked) {
    if (r >= static_cast<std::uint32_t>(rails)) {
      return make_error(
          ErrorCode::InvalidArgument,
          "rail " + std::to_string(r) + " does not exist (this transport has " + std::to_string(rails) + ")");
    }
    if (!out.empty() && r <= out.back()) {
      return make_error(ErrorCode::InvalidArgument,
                        "rails to register on must be ascending, without repeats");
    }
    out.push_back(r);
  }
  return out;
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
