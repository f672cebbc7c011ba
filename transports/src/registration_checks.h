// What register_memory checks in every backend before registering anything: that the range lies inside
// the region, and that CUDA memory goes only to a transport that registers it directly (elsewhere it
// takes the staged path, docs/gpu.md). Shared so the backends refuse alike and say so in the same words;
// each calls them in its own order.
#pragma once

#include <cstdint>
#include <string_view>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"
#include "conduit/transport.h"

namespace conduit {

// The length of [offset, +length) in `region`, Transport::kWholeRegion meaning the rest of it;
// InvalidArgument where the range is empty or reaches outside.
Result<std::uint64_t> registration_length(const MemoryRegion& region, std::uint64_t offset,
                                          std::uint64_t length);

// Unsupported for CUDA memory where `caps` say the transport (`name`) cannot register it directly, with
// the GPU path it has and why.
Status check_memory_kind(const MemoryRegion& region, const Capabilities& caps, std::string_view name);

}  // namespace conduit
