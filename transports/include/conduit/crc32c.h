// CRC32C (Castagnoli, as iSCSI and ext4 use it) over host memory, from ISA-L's crc32_iscsi, per slice so a
// mismatch names the slice that differs rather than only saying "somewhere in 256 MiB".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace conduit {

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t seed = 0);

// CRC32C of each `slice_bytes` piece of data, the last one possibly shorter.
std::vector<std::uint32_t> crc32c_slices(std::span<const std::byte> data, std::uint64_t slice_bytes);

}  // namespace conduit
