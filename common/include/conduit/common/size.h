// Byte sizes as people type them ("256MiB", "8Gi", "16MB", "4096") and as they read them ("256MiB").
// One parser for every flag, config file and CLI argument that takes a size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "conduit/common/result.h"

namespace conduit {

// Binary units (KiB..TiB), Kubernetes quantities (Ki..Ti) and decimal SI units (KB..TB, K..T).
// InvalidArgument naming the text when it is not a size or overflows 64 bits.
Result<std::uint64_t> parse_size(std::string_view text);

// Link rates as NICs are rated: bits per second in SI units ("100Gbit", "800Mbit", "1Tbit", "1000000bit").
// InvalidArgument naming the text when it is not one, is 0 or overflows 64 bits.
Result<std::uint64_t> parse_bit_rate(std::string_view text);

// The largest binary unit that divides `bytes` exactly: 268435456 -> "256MiB", 1000 -> "1000B".
std::string format_size(std::uint64_t bytes);

}  // namespace conduit
