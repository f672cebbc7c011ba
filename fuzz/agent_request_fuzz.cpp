// Request bodies of the agent's REST API, read the way the server reads them (rest/body.h read_json_body:
// JSON without exceptions, then "is an object") and handed to every body reader of api/ the routes use, and
// to the agent's reading of POST /v1/transfers. None may throw or crash, the error answer the agent would
// send must serialize, and what a reader accepted, written out again as a client sends it, reads back the
// same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "conduit/api/grant.h"
#include "conduit/api/names.h"
#include "conduit/api/wire.h"
#include "transfer/request.h"

namespace {

using nlohmann::json;

// What send_error() does with a message: it may echo client bytes, so it is dumped with replacement.
void answer(const conduit::Error& error) {
  const json body{{"error", {{"code", "InvalidArgument"}, {"message", error.message}}}};
  (void)body.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The body `read` from what a client would send for it: from_json(to_json()) gives it back.
template <class T>
void reads_back(const T& read) {
  auto again = T::from_json(read.to_json());
  if (!again || again->to_json() != read.to_json()) std::abort();
}

// Read, then reads_back, or answered.
template <class T>
void round_trip(const json& body) {
  if (auto read = T::from_json(body); !read) {
    answer(read.error());
  } else {
    reads_back(*read);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return 0;

  if (auto region = conduit::api::region_request_from_json(body); !region) {
    answer(region.error());
  } else {
    // Accepted: a valid name and exactly one of bytes and file.
    std::visit(
        [](const auto& read) {
          if (!conduit::api::validate_name(read.name).ok()) std::abort();
          reads_back(read);
        },
        *region);
    const auto* allocate = std::get_if<conduit::api::CreateRegion>(&*region);
    const auto* load = std::get_if<conduit::api::LoadRegion>(&*region);
    if ((allocate && allocate->bytes == 0) || (load && load->file.empty())) std::abort();
  }
  if (auto file = conduit::api::SaveRegion::from_json(body); !file) {
    answer(file.error());
  } else if (file->file.empty()) {
    std::abort();
  } else {
    reads_back(*file);
  }
  if (auto grant = conduit::api::GrantRequest::from_json(body); !grant) {
    answer(grant.error());
  } else if (grant->ttl_seconds < 1 || grant->ttl_seconds > 86400 || (grant->length && *grant->length == 0) ||
             (grant->access != "write" && grant->access != "read")) {
    std::abort();
  } else {
    reads_back(*grant);
  }
  if (auto staging = conduit::api::StagingRequest::from_json(body); !staging) {
    answer(staging.error());
  } else if (staging->length == 0) {
    std::abort();
  } else {
    reads_back(*staging);
  }
  round_trip<conduit::api::RingGrantRequest>(body);
  round_trip<conduit::api::RenewGrant>(body);
  round_trip<conduit::api::LandedReport>(body);
  round_trip<conduit::api::CommitRequest>(body);
  round_trip<conduit::api::StatFile>(body);
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
