#include "conduit/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <limits>

namespace conduit {

// ISA-L's crc32_iscsi takes and returns the raw register (no final inversion) and an int length; we present
// the standard CRC32C (init and xorout 0xffffffff, so crc32c("123456789") == 0xe3069283) and feed it in
// pieces that fit an int.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t seed) {
  std::uint32_t reg = ~seed;
  constexpr std::size_t kMaxPiece = std::size_t{1} << 30;
  for (std::size_t done = 0; done < data.size();) {
    const std::size_t n = std::min(kMaxPiece, data.size() - done);
    auto* p = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data() + done));
    reg = crc32_iscsi(p, static_cast<int>(n), reg);
    done += n;
  }
  return ~reg;
}

std::vector<std::uint32_t> crc32c_slices(std::span<const std::byte> data, std::uint64_t slice_bytes) {
  std::vector<std::uint32_t> out;
  if (slice_bytes == 0) return out;
  out.reserve((data.size() + slice_bytes - 1) / slice_bytes);
  for (std::uint64_t off = 0; off < data.size(); off += slice_bytes) {
    out.push_back(crc32c(data.subspan(off, std::min<std::uint64_t>(slice_bytes, data.size() - off))));
  }
  return out;
}

}  // namespace conduit
