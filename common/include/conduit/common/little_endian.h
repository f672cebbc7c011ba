// Little-endian uint64s in byte strings (opsPacked, rangesPacked, a .safetensors header's size), read the
// same whatever this machine's byte order is.
#pragma once

#include <cstdint>

namespace conduit {

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

}  // namespace conduit
