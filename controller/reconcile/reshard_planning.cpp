#include "reshard_planning.h"

namespace conduit::controller {

Result<PlannedReshard> plan_reshard(const std::vector<ReshardSideInput>&,
                                    const std::vector<ReshardSideInput>&) {
  return make_error(ErrorCode::Unsupported, "this build has no reshard planner yet");
}

}  // namespace conduit::controller
