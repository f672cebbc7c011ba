#include "import_open.h"

#include <string>
#include <utility>

namespace conduit::agent {

Result<OpenedRegion> open_region(const RegionStore& regions, const nlohmann::json& body,
                                 const std::optional<Importer>& opener) {
  for (const auto& [key, value] : body.items()) {
    if (key != "open" && key != "writable")
      return make_error(ErrorCode::InvalidArgument, "unknown field \"" + key + "\" in open request");
  }
  if (!body["open"].is_string())
    return make_error(ErrorCode::InvalidArgument, "\"open\" must be a region's name (a string)");
  bool writable = false;
  if (body.contains("writable")) {
    if (!body["writable"].is_boolean())
      return make_error(ErrorCode::InvalidArgument, "\"writable\" must be true or false");
    writable = body["writable"].get<bool>();
  }
  auto region = regions.get(body["open"].get<std::string>());
  if (!region) return region.error();
  // A pod's region is its own (docs/pods.md): a process of another pod, or of none, does not map it.
  const std::string owner = (*region)->importer() ? (*region)->importer()->pod_uid : "";
  const std::string pod = opener ? opener->pod_uid : "";
  if (!owner.empty() && owner != pod) {
    return make_error(ErrorCode::Forbidden, "region \"" + (*region)->name() + "\" belongs to pod " + owner +
                                                "; the opener runs in " +
                                                (pod.empty() ? std::string("no pod") : "pod " + pod));
  }
  auto fd = (*region)->open_shared(writable);
  if (!fd) return fd.error();
  return OpenedRegion{std::move(*region), std::move(*fd)};
}

}  // namespace conduit::agent
