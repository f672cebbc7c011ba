// Request bodies of the agent's REST API, read the way the server reads them (rest/body.h read_json_body:
// JSON without exceptions, then "is an object") and handed to every body parser: POST /v1/regions,
// /v1/regions/{name}/save, /v1/regions/{name}/grants, /v1/regions/{name}/staging and /v1/transfers. None may
// throw or crash, and the error answer the agent would send must serialize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "conduit/api/names.h"
#include "regions.h"
#include "rest/requests.h"
#include "transfer/request.h"

namespace {

using nlohmann::json;

// What send_error() does with a message: it may echo client bytes, so it is dumped with replacement.
void answer(const conduit::Error& error) {
  const json body{{"error", {{"code", "InvalidArgument"}, {"message", error.message}}}};
  (void)body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return 0;

  if (auto region = conduit::agent::rest::parse_create_region(body); !region) {
    answer(region.error());
  } else if (!conduit::api::validate_name(region->name).ok() ||
             (region->bytes == 0) == !region->file.has_value()) {
    std::abort();  // accepted: a valid name and exactly one of bytes and file
  }
  if (auto file = conduit::agent::rest::parse_save_region(body); !file) {
    answer(file.error());
  } else if (file->file.empty()) {
    std::abort();
  }
  if (auto grant = conduit::agent::rest::parse_create_grant(body); !grant) {
    answer(grant.error());
  } else if (grant->ttl.count() < 1 || grant->ttl.count() > 86400 || (grant->length && *grant->length == 0)) {
    std::abort();
  }
  if (auto staging = conduit::agent::rest::parse_staging(body); !staging) {
    answer(staging.error());
  } else if (staging->length == 0) {
    std::abort();
  }
  if (auto transfer = conduit::agent::ResolvedRequest::from_json(body); !transfer) {
    answer(transfer.error());
  } else {
    const conduit::api::TransferRequest& wire = transfer->wire;
    if (wire.targets.empty() || wire.targets.size() > 16 || transfer->grants.size() != wire.targets.size() ||
        (wire.source_region.empty() && wire.source_file.empty()) || wire.window == 0 ||
        wire.chunk_bytes < 4096) {
      std::abort();
    }
    // What the agent accepted, written out again (as a Chain hop forwards it), reads back the same.
    auto again = conduit::api::TransferRequest::from_json(wire.to_json());
    if (!again || again->to_json() != wire.to_json()) std::abort();
  }
  return 0;
}
