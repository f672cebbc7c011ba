#include "conduit/common/text.h"

namespace conduit {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  for (;;) {
    const auto at = text.find(separator);
    pieces.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return pieces;
    text.remove_prefix(at + 1);
  }
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> names;
  for (const std::string_view piece : split(text, ',')) {
    if (const std::string_view name = trim(piece); !name.empty()) names.emplace_back(name);
  }
  return names;
}

std::string join(std::span<const std::string> items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string to_lower(std::string text) {
  // By hand rather than std::tolower, whose answer depends on the locale (and is undefined for a negative
  // char, a UTF-8 byte); no program here sets one, so this is what std::tolower did for them.
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

}  // namespace conduit
