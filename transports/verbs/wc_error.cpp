#include "wc_error.h"

#include <infiniband/verbs.h>

#include <cstdio>

namespace conduit::verbs {

WcErrorClass classify_wc_status(int status) {
  switch (static_cast<ibv_wc_status>(status)) {
    case IBV_WC_SUCCESS:
      return {ErrorCode::Provider, "not an error"};
    case IBV_WC_RETRY_EXC_ERR:
      return {ErrorCode::PeerUnreachable,
              "the peer did not acknowledge: it is down, unreachable, or its queue pair is gone"};
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return {ErrorCode::PeerUnreachable, "the peer's receive queue stayed not-ready past the RNR retries"};
    case IBV_WC_RESP_TIMEOUT_ERR:
      return {ErrorCode::PeerUnreachable, "the peer did not respond in time"};
    case IBV_WC_REM_ABORT_ERR:
      return {ErrorCode::PeerUnreachable, "the peer aborted the operation"};
    case IBV_WC_REM_ACCESS_ERR:
      return {ErrorCode::RemoteAccess,
              "the peer refused access: its rkey is invalid or revoked, or the range lies outside its "
              "registration"};
    case IBV_WC_REM_INV_REQ_ERR:
      return {
          ErrorCode::RemoteAccess,
          "the peer rejected the request as invalid (length beyond its registration or an operation its QP "
          "does not allow)"};
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return {ErrorCode::RemoteAccess,
              "the peer rejected the RDMA READ request (its QP does not allow reads)"};
    case IBV_WC_REM_OP_ERR:
      return {ErrorCode::Provider, "the peer could not complete the operation (an error on its side)"};
    case IBV_WC_WR_FLUSH_ERR:
      return {ErrorCode::Cancelled, "flushed: an earlier operation on the same queue pair failed"};
    case IBV_WC_LOC_LEN_ERR:
      return {ErrorCode::Provider, "local length error: the request exceeds what the queue pair accepts"};
    case IBV_WC_LOC_QP_OP_ERR:
      return {ErrorCode::Provider, "local queue pair operation error (bad work request or QP state)"};
    case IBV_WC_LOC_PROT_ERR:
      return {ErrorCode::Provider,
              "local protection error: the local buffer is not covered by its registration (released too "
              "early?)"};
    case IBV_WC_LOC_ACCESS_ERR:
      return {ErrorCode::Provider, "local access error: the local registration does not allow this access"};
    case IBV_WC_MW_BIND_ERR:
      return {ErrorCode::Provider, "memory window bind error"};
    case IBV_WC_BAD_RESP_ERR:
      return {ErrorCode::Provider, "unexpected response from the peer's transport"};
    case IBV_WC_LOC_EEC_OP_ERR:
    case IBV_WC_LOC_RDD_VIOL_ERR:
    case IBV_WC_INV_EECN_ERR:
    case IBV_WC_INV_EEC_STATE_ERR:
      return {ErrorCode::Provider, "reliable-datagram error (never expected on RC)"};
    case IBV_WC_FATAL_ERR:
      return {ErrorCode::Provider, "fatal device error: the adapter needs attention"};
    case IBV_WC_GENERAL_ERR:
      return {ErrorCode::Provider, "general device error"};
    case IBV_WC_TM_ERR:
    case IBV_WC_TM_RNDV_INCOMPLETE:
      return {ErrorCode::Provider, "tag-matching error (never expected on RC RDMA)"};
  }
  return {ErrorCode::Provider, "unknown completion status"};
}

std::string describe_wc_error(int status, std::uint32_t vendor_err, std::string_view what) {
  const WcErrorClass c = classify_wc_status(status);
  std::string out = std::string(what) + " failed: " + ibv_wc_status_str(static_cast<ibv_wc_status>(status)) +
                    " (" + std::string(c.hint) + ")";
  if (vendor_err != 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " [vendor error 0x%x]", vendor_err);
    out += buf;
  }
  return out;
}

}  // namespace conduit::verbs
