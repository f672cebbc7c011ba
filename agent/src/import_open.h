// The import socket's open line: {"open": "<region>", "writable": false} asks for a descriptor of a shareable
// region's memory (shared_memory.h), so that a second local process maps the bytes the agent holds instead of
// receiving a copy. The agent keeps nothing per opener: the mapping is the opener's, and lives on in its
// process after the region is deleted.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"
#include "importer.h"
#include "regions.h"

namespace conduit::agent {

struct OpenedRegion {
  RegionPtr region;
  UniqueFd fd;  // read-only unless the line asked for "writable": true
};

// Reads the open line `body` strictly and opens the region it names for `opener` (who is at the other end of
// the socket, as the kernel says): NotFound for an unknown region; InvalidArgument for a malformed line or a
// region not backed by a memfd ("region X is not shareable: made without shareable:true"); Forbidden when
// a pod shared the region and the opener runs in another pod (or in none), by the rule of pods' regions.
Result<OpenedRegion> open_region(const RegionStore& regions, const nlohmann::json& body,
                                 const std::optional<Importer>& opener);

}  // namespace conduit::agent
