#include "conduit/verbs_options.h"

namespace conduit::verbs {

Status VerbsOptions::validate() const {
  auto bad = [](const std::string& why) { return make_error(ErrorCode::InvalidArgument, "ibverbs: " + why); };
  if (port < 1 || port > 255) return bad("port must be 1..255");
  if (gid_index < -1 || gid_index > 255) return bad("gid index must be -1 (automatic) or 0..255");
  if (qps_per_peer < 1 || qps_per_peer > 64) return bad("qps per peer must be 1..64");
  if (sq_depth < 2 || sq_depth > 32768) return bad("send queue depth must be 2..32768");
  if (signal_every < 1) return bad("signal every must be >= 1");
  if (service_level > 15) return bad("service level must be 0..15");
  if (ack_timeout < 1 || ack_timeout > 31) return bad("ack timeout exponent must be 1..31");
  if (retry_count > 7) return bad("retry count must be 0..7");
  return {};
}

}  // namespace conduit::verbs
