// RemoteKey JSON as it arrives from another process (the grant inside a POST /v1/transfers body, a key a
// peer hands over): parse never throws or crashes, and a key it accepts survives a round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "conduit/remote_key.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)conduit::from_hex(text);
  auto key = conduit::RemoteKey::parse(text);
  if (!key) return 0;
  auto again = conduit::RemoteKey::parse(key->to_string());
  if (!again || !(*again == *key)) std::abort();
  return 0;
}
