#include "secure_random.h"

#include <sys/random.h>

#include <random>

namespace conduit::fabric {

std::uint64_t secure_random64() {
  std::uint64_t x = 0;
  if (::getrandom(&x, sizeof x, 0) != static_cast<ssize_t>(sizeof x)) {
    std::random_device rd;  // no getrandom(2): the C++ library's own entropy source
    x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  return x;
}

}  // namespace conduit::fabric
