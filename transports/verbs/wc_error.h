// Work-completion failures as the project's error classes, with rdma-core's own text (ibv_wc_status_str)
// and a line saying what the status usually means, so "transport retry counter exceeded" reaches a person
// as "the peer did not acknowledge: it is down, unreachable, or its queue pair is gone".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "conduit/common/result.h"

namespace conduit::verbs {

struct WcErrorClass {
  ErrorCode code;
  std::string_view hint;  // what to look at; never empty for a failure status
};

// For every ibv_wc_status (an int so tests need no device and unknown values are safe): the class and
// hint. PeerUnreachable: retry/RNR exceeded, response timeout, remote abort (worth a retry elsewhere).
// RemoteAccess: the peer refused (bad or revoked rkey, range outside its MR, invalid read request).
// Cancelled: flushed because an earlier WR on the QP failed. Provider: local or device faults.
WcErrorClass classify_wc_status(int status);

// "write of 1048576 bytes to 0x7f.. (rkey 0x1234) on mlx5_0 failed: remote access error (the peer refused
// ...) [vendor error 0x88]"
std::string describe_wc_error(int status, std::uint32_t vendor_err, std::string_view what);

}  // namespace conduit::verbs
