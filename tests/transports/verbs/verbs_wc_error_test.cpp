// Completion failures as the error classes the agent and controller act on (a dead peer is worth a retry
// elsewhere, a refused key is not), with rdma-core's own words and a hint for a person.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include "wc_error.h"

namespace conduit::verbs {
namespace {

TEST(VerbsWcError, PeerGoneIsPeerUnreachable) {
  for (int status :
       {IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_REM_ABORT_ERR}) {
    EXPECT_EQ(classify_wc_status(status).code, ErrorCode::PeerUnreachable)
        << ibv_wc_status_str(ibv_wc_status(status));
  }
}

TEST(VerbsWcError, PeerRefusalIsRemoteAccessDenied) {
  for (int status : {IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_RD_REQ_ERR}) {
    EXPECT_EQ(classify_wc_status(status).code, ErrorCode::RemoteAccess)
        << ibv_wc_status_str(ibv_wc_status(status));
  }
  // The name the REST layer and the controller see.
  EXPECT_EQ(to_string(classify_wc_status(IBV_WC_REM_ACCESS_ERR).code), "RemoteAccessDenied");
  EXPECT_EQ(to_string(classify_wc_status(IBV_WC_RETRY_EXC_ERR).code), "PeerUnreachable");
}

TEST(VerbsWcError, FlushedIsCancelledAndLocalFaultsAreProviderErrors) {
  EXPECT_EQ(classify_wc_status(IBV_WC_WR_FLUSH_ERR).code, ErrorCode::Cancelled);
  for (int status : {IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_ACCESS_ERR,
                     IBV_WC_BAD_RESP_ERR, IBV_WC_FATAL_ERR, IBV_WC_GENERAL_ERR, IBV_WC_REM_OP_ERR}) {
    EXPECT_EQ(classify_wc_status(status).code, ErrorCode::Provider)
        << ibv_wc_status_str(ibv_wc_status(status));
  }
}

TEST(VerbsWcError, EveryFailureStatusHasAHint) {
  for (int status = IBV_WC_LOC_LEN_ERR; status <= IBV_WC_TM_RNDV_INCOMPLETE; ++status) {
    const WcErrorClass c = classify_wc_status(status);
    EXPECT_FALSE(c.hint.empty()) << status;
    EXPECT_NE(c.hint, "unknown completion status") << status;
  }
  EXPECT_EQ(classify_wc_status(999).hint, "unknown completion status");
  EXPECT_EQ(classify_wc_status(999).code, ErrorCode::Provider);
}

TEST(VerbsWcError, MessageCarriesTheOperationRdmaCoresTextTheHintAndTheVendorCode) {
  const std::string m =
      describe_wc_error(IBV_WC_REM_ACCESS_ERR, 0x88, "RDMA write of 4096 bytes at remote 0x1000");
  EXPECT_EQ(m.rfind("RDMA write of 4096 bytes at remote 0x1000 failed: ", 0), 0u) << m;
  EXPECT_NE(m.find(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)), std::string::npos) << m;
  EXPECT_NE(m.find("rkey is invalid or revoked"), std::string::npos) << m;
  EXPECT_NE(m.find("[vendor error 0x88]"), std::string::npos) << m;

  const std::string r = describe_wc_error(IBV_WC_RETRY_EXC_ERR, 0, "RDMA read");
  EXPECT_NE(r.find(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)), std::string::npos) << r;
  EXPECT_NE(r.find("did not acknowledge"), std::string::npos) << r;
  EXPECT_EQ(r.find("vendor error"), std::string::npos) << r;
}

}  // namespace
}  // namespace conduit::verbs
