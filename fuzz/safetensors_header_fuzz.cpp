// The start of a .safetensors file as the agent reads it before loading one (8-byte header size, JSON
// header): nothing crashes or throws, and a header it accepts names tensors that pass the manifest's checks,
// written out again reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "conduit/api/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  unsigned char prefix[8];
  std::memcpy(prefix, data, 8);
  auto n = conduit::api::safetensors_header_size(prefix, size);
  if (!n) return 0;
  const std::string_view header(reinterpret_cast<const char*>(data) + 8, *n);
  const std::uint64_t data_bytes = size - 8 - *n;
  auto m = conduit::api::Manifest::from_safetensors_header(header, data_bytes);
  if (!m) return 0;
  if (!m->check(data_bytes) || m->data_bytes() != data_bytes) std::abort();
  auto written = m->safetensors_header();
  if (!written || written->size() % 8 != 0) std::abort();
  auto again = conduit::api::Manifest::from_safetensors_header(*written, data_bytes);
  if (!again || again->to_json() != m->to_json()) std::abort();
  return 0;
}
