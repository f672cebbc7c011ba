#include "size.h"

#include <array>
#include <charconv>
#include <utility>

namespace conduit::bench {

namespace {
constexpr std::array<std::pair<std::string_view, std::uint64_t>, 9> kUnits{{
    {"", 1},
    {"B", 1},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"k", 1ULL << 10},
}};
}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || ptr == text.data()) return std::nullopt;
  const std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      if (n > UINT64_MAX / scale) return std::nullopt;
      return n * scale;
    }
  }
  return std::nullopt;
}

std::string format_size(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace conduit::bench
