// The query string of GET /v1/regions/{name}/checksum, split into parameters as cpp-httplib does it, then
// parsed by the agent; and the path segments ({name}, {id}) checked the way the routes check them.
#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "conduit/api/names.h"
#include "regions.h"
#include "rest/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  httplib::Params params;
  httplib::detail::parse_query_text(text, params);
  if (auto query = conduit::agent::rest::parse_checksum_query(params); query && query->slice == 0)
    std::abort();
  (void)conduit::agent::rest::validate_id(text);
  (void)conduit::api::validate_name(text);
  return 0;
}
