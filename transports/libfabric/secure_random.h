// Random 64-bit values a peer must not be able to guess (grant keys, endpoint names), from the kernel's
// CSPRNG.
#pragma once

#include <cstdint>

namespace conduit::fabric {

std::uint64_t secure_random64();

}  // namespace conduit::fabric
