// A deterministic byte pattern from a seed (splitmix64), so two processes can fill and check memory
// without shipping it: benchmarks and tests write a seeded pattern and compare CRC32C on the other side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace conduit {

inline void fill_pattern(std::span<std::byte> out, std::uint64_t seed) {
  std::uint64_t x = seed;
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    x += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<std::byte>(seed + i);
}

}  // namespace conduit
