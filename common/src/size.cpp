#include "conduit/common/size.h"

#include <array>
#include <charconv>

#include "conduit/common/text.h"

namespace conduit {

namespace {

struct Unit {
  std::string_view suffix;
  std::uint64_t scale;
};

constexpr std::array<Unit, 18> kUnits{{
    {"", 1},
    {"B", 1},
    {"KiB", 1ULL << 10},
    {"Ki", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"Mi", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"Gi", 1ULL << 30},
    {"TiB", 1ULL << 40},
    {"Ti", 1ULL << 40},
    {"KB", 1000ULL},
    {"K", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"M", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"G", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"T", 1000ULL * 1000 * 1000 * 1000},
}};

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
  const std::string_view t = trim(text);
  const auto bad = [&] {
    return make_error(ErrorCode::InvalidArgument,
                      "bad size \"" + std::string(text) + "\" (want e.g. 8GiB, 512MiB or 1073741824)");
  };
  std::uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
  if (ec != std::errc{} || ptr == t.data()) return bad();
  const std::string_view suffix = trim(t.substr(static_cast<std::size_t>(ptr - t.data())));
  for (const Unit& unit : kUnits) {
    if (suffix != unit.suffix) continue;
    if (n > UINT64_MAX / unit.scale) {
      return make_error(ErrorCode::InvalidArgument, "size \"" + std::string(text) + "\" is too large");
    }
    return n * unit.scale;
  }
  return bad();
}

Result<std::uint64_t> parse_bit_rate(std::string_view text) {
  static constexpr std::array<Unit, 5> kRates{{{"bit", 1},
                                               {"Kbit", 1000ULL},
                                               {"Mbit", 1000ULL * 1000},
                                               {"Gbit", 1000ULL * 1000 * 1000},
                                               {"Tbit", 1000ULL * 1000 * 1000 * 1000}}};
  const std::string_view t = trim(text);
  const auto bad = [&] {
    return make_error(ErrorCode::InvalidArgument, "bad link rate \"" + std::string(text) +
                                                      "\" (want bits per second, e.g. 100Gbit or 800Mbit)");
  };
  std::uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
  if (ec != std::errc{} || ptr == t.data() || n == 0) return bad();
  const std::string_view suffix = trim(t.substr(static_cast<std::size_t>(ptr - t.data())));
  for (const Unit& unit : kRates) {
    if (suffix != unit.suffix) continue;
    if (n > UINT64_MAX / unit.scale)
      return make_error(ErrorCode::InvalidArgument, "link rate \"" + std::string(text) + "\" is too large");
    return n * unit.scale;
  }
  return bad();
}

std::string format_size(std::uint64_t bytes) {
  static constexpr std::array<Unit, 4> kBinary{
      {{"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}}};
  for (const Unit& u : kBinary) {
    if (bytes >= u.scale && bytes % u.scale == 0)
      return std::to_string(bytes / u.scale) + std::string(u.suffix);
  }
  return std::to_string(bytes) + "B";
}

}  // namespace conduit
