#include "op_validation.h"

namespace conduit {

Status validate_ops(std::span<const Op> ops, const BatchOptions& options, const OpRules& rules) {
  auto bad = [](std::size_t i, const std::string& why) {
    return make_error(ErrorCode::InvalidArgument, "op " + std::to_string(i) + ": " + why);
  };
  if (options.slice_bytes == 0) return make_error(ErrorCode::InvalidArgument, "slice size must be > 0");
  if (options.slice_bytes > rules.max_message) {
    return make_error(ErrorCode::InvalidArgument, "slice size " + std::to_string(options.slice_bytes) +
                                                      " exceeds " + std::string(rules.max_message_what) +
                                                      " of " + std::to_string(rules.max_message));
  }
  if (options.window == 0) return make_error(ErrorCode::InvalidArgument, "window must be > 0");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.local == nullptr || !op.local->valid()) return bad(i, "local registration is missing or released");
    if (!rules.owns(*op.local)) return bad(i, "local registration belongs to another transport");
    if (op.remote.provider != rules.provider) {
      return bad(i, "remote key is for provider \"" + op.remote.provider + "\", this transport is " +
                        std::string(rules.transport));
    }
    if (op.remote.rails.empty()) return bad(i, "remote key has no rails");
    if (rules.key_problem) {
      if (auto why = rules.key_problem(op.remote)) return bad(i, *why);
    }
    if (op.local_offset > op.local->length() || op.length > op.local->length() - op.local_offset) {
      return bad(i, "local range [" + std::to_string(op.local_offset) + ", +" + std::to_string(op.length) +
                        ") is outside the " + std::to_string(op.local->length()) +
                        "-byte local registration");
    }
    if (op.remote_offset > op.remote.length || op.length > op.remote.length - op.remote_offset) {
      return bad(i, "remote range [" + std::to_string(op.remote_offset) + ", +" + std::to_string(op.length) +
                        ") is outside the " + std::to_string(op.remote.length) + "-byte remote region");
    }
  }
  return {};
}

}  // namespace conduit
