// A TransferJob's spec as the controller reads it: from the API server (JSON) or from a local store file
// (YAML, which unlike JSON text may carry bytes that are not UTF-8). TransferJobSpec::parse must answer
// every input with a spec or an error, never an exception or a crash, and what it accepts must hold the
// CRD's rules.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "reconcile/transfer_job.h"
#include "store/yaml_json.h"

namespace {

void check(const nlohmann::json& spec) {
  auto parsed = conduit::controller::TransferJobSpec::parse(spec);
  if (!parsed) return;
  if (parsed->targets.empty() || parsed->targets.size() > 64 || parsed->window < 1 || parsed->window > 256 ||
      parsed->chunk_bytes < 4096 || parsed->chunk_bytes > (64u << 20)) {
    std::abort();
  }
  if (!parsed->source.file.empty() && !conduit::controller::is_relative_path_inside(parsed->source.file)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded()) {
    check(json);
    return 0;
  }
  if (auto yaml = conduit::controller::parse_yaml(text)) check(*yaml);
  return 0;
}
