// Random values a peer must not be able to guess (grant keys, grant and transfer ids, endpoint and file
// names), all from the kernel's CSPRNG: one source, so no id is weaker than another by accident.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace conduit {

std::uint64_t secure_random64();

// `digits` lowercase hex digits (at most 16) of one secure_random64() draw: random_hex(8) -> "3f9a01c2".
std::string random_hex(std::size_t digits = 16);

}  // namespace conduit
