// YAML as people and tools write it, turned into the JSON the controller works with by the one reader
// (controller/store/yaml_json_reader): every document of a stream as Kubernetes mode reads kubeconfigs, CRDs
// and examples, and the first one as the local store reads a job file. Neither entry may throw past its
// Result or crash, and the local store's writer (controller/store/yaml_json) must read back what it wrote:
// to_yaml(parse_yaml(x)) parses to the same JSON.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "controller/store/yaml_json.h"
#include "controller/store/yaml_json_reader.h"

namespace {

// NaN never equals itself, so a document holding one cannot be compared by ==.
bool has_nan(const nlohmann::json& j) {
  if (j.is_number_float()) return std::isnan(j.get<double>());
  if (j.is_structured()) {
    for (const auto& item : j) {
      if (has_nan(item)) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)conduit::controller::parse_yaml_documents(text);

  auto parsed = conduit::controller::parse_yaml(text);
  if (!parsed || has_nan(*parsed)) return 0;
  const std::string written = conduit::controller::to_yaml(*parsed);
  auto again = conduit::controller::parse_yaml(written);
  if (!again || *again != *parsed) {
    std::fprintf(stderr, "round trip changed the document:\n%s\n--- wrote ---\n%s\n--- read back ---\n%s\n",
                 parsed->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str(),
                 written.c_str(),
                 again ? again->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str()
                       : again.error().message.c_str());
    std::abort();
  }
  return 0;
}
