// Small text helpers for what people type into flags, environment variables, config files and one-line files
// (tokens, namespaces): one trim, one comma split, one integer reader, so that every reader of such text
// agrees on what a blank, an empty entry or a number is. Sizes with units are conduit/common/size.h.
#pragma once

#include <charconv>
#include <concepts>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conduit {

// ASCII white space: what the C locale's isspace() accepts, named here so no reader depends on the locale.
inline constexpr std::string_view kBlanks = " \t\n\v\f\r";

// `text` without the blanks at either end. A view into `text`: keep what it points into alive, or copy it
// into a std::string.
std::string_view trim(std::string_view text);

// Every piece between separators, as it is: "a,,b," -> {"a", "", "b", ""}; "" -> {""}. Views into `text`.
std::vector<std::string_view> split(std::string_view text, char separator);

// A comma-separated list of names as operators write it: "mlx5_0, mlx5_3," -> {"mlx5_0", "mlx5_3"}. Blanks
// around names and empty entries are dropped.
std::vector<std::string> split_list(std::string_view text);

// {"a", "b"} with ", " -> "a, b"; no items -> "".
std::string join(std::span<const std::string> items, std::string_view separator);

// ASCII letters lower-cased, everything else kept (PCI addresses, container ids, "TRUE").
std::string to_lower(std::string text);

// The whole of `text` as a T: digits only (a leading '-' for a signed T), no blanks, no '+', no overflow.
template <std::integral T>
std::optional<T> parse_integer(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end) return std::nullopt;
  return value;
}

// parse_integer() of `text`, and only when it lies in [min, max]. The caller words the error, since each
// reader already has its own ("must be 1..64", "want an integer in 1..255").
template <std::integral T>
std::optional<T> parse_integer(std::string_view text, T min, T max) {
  const std::optional<T> value = parse_integer<T>(text);
  if (!value || *value < min || *value > max) return std::nullopt;
  return value;
}

}  // namespace conduit
