// Byte sizes as people type them: "256MiB", "1GiB", "16MB", "4096".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conduit::bench {

std::optional<std::uint64_t> parse_size(std::string_view text);
std::string format_size(std::uint64_t bytes);

}  // namespace conduit::bench
