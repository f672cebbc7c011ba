#include "conduit/common/random.h"

#include <sys/random.h>

#include <algorithm>
#include <random>

namespace conduit {

std::uint64_t secure_random64() {
  std::uint64_t x = 0;
  if (::getrandom(&x, sizeof x, 0) != static_cast<ssize_t>(sizeof x)) {
    std::random_device rd;  // no getrandom(2): the C++ library's own entropy source
    x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  return x;
}

std::string random_hex(std::size_t digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  digits = std::min<std::size_t>(digits, 16);
  const std::uint64_t x = secure_random64();
  std::string out(digits, '0');
  for (std::size_t i = 0; i < digits; ++i) out[digits - 1 - i] = kHex[(x >> (4 * i)) & 0xf];
  return out;
}

}  // namespace conduit
