#include "transfer/request.h"

#include <string>

namespace conduit::agent {

Result<ResolvedRequest> ResolvedRequest::from_json(const nlohmann::json& body) {
  auto wire = api::TransferRequest::from_json(body);
  if (!wire) return wire.error();
  ResolvedRequest r;
  r.grants.reserve(wire->targets.size());
  for (std::size_t i = 0; i < wire->targets.size(); ++i) {
    const api::TransferTarget& t = wire->targets[i];
    const std::string path = "targets[" + std::to_string(i) + "]";
    auto key = RemoteKey::from_json(t.grant);
    if (!key) return make_error(ErrorCode::InvalidArgument, path + ".grant: " + key.error().message);
    if (t.ring_bytes > key->length)
      return make_error(ErrorCode::InvalidArgument, path + ".ringBytes: is larger than the grant");
    if (wire->chain && key->staged) {
      return make_error(ErrorCode::InvalidArgument,
                        path + ": a chain hop's region must be host memory (the grant is staged)");
    }
    r.grants.push_back(std::move(*key));
  }
  r.wire = std::move(*wire);
  return r;
}

}  // namespace conduit::agent
