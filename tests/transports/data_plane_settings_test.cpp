// The data-plane settings as text (conduit/data_plane_settings.h): the names the agent's options and
// conduit-bench's flags share, the environment variables they keep from before they were options, and the
// values they hand the transports.
#include "conduit/data_plane_settings.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace conduit {
namespace {

Status set(DataPlaneSettings& s, std::string_view name, const std::string& text) {
  for (const DataPlaneSetting& setting : data_plane_settings()) {
    if (setting.name == name) return setting.apply(s, text);
  }
  return make_error(ErrorCode::NotFound, "no setting " + std::string(name));
}

TEST(DataPlaneSettings, KeepTheEnvironmentVariablesScriptsAndDocsUse) {
  std::set<std::string> variables;
  for (const DataPlaneSetting& s : data_plane_settings()) {
    variables.insert(environment_name(s.name));
    EXPECT_NE(std::string(s.help), "") << s.name;
    EXPECT_NE(std::string(s.default_text), "") << s.name;
  }
  for (const char* v :
       {"CONDUIT_PROGRESS", "CONDUIT_CUDA_DRIVER", "CONDUIT_IB_DEVICES", "CONDUIT_IB_NEAR",
        "CONDUIT_IB_LISTEN", "CONDUIT_IB_PORT", "CONDUIT_IB_GID_INDEX", "CONDUIT_IB_QPS_PER_PEER",
        "CONDUIT_IB_SQ_DEPTH", "CONDUIT_IB_SIGNAL_EVERY", "CONDUIT_IB_TRAFFIC_CLASS", "CONDUIT_IB_SL",
        "CONDUIT_IB_TIMEOUT", "CONDUIT_IB_RETRY_COUNT"}) {
    EXPECT_EQ(variables.count(v), 1u) << v;
  }
}

TEST(DataPlaneSettings, ProgressModeByName) {
  DataPlaneSettings s;
  EXPECT_EQ(s.progress, ProgressMode::Auto);
  for (const ProgressMode m :
       {ProgressMode::Spin, ProgressMode::Fd, ProgressMode::Backoff, ProgressMode::Auto}) {
    ASSERT_TRUE(set(s, "progress", std::string(to_string(m))).ok()) << to_string(m);
    EXPECT_EQ(s.progress, m);
  }
  ASSERT_TRUE(set(s, "progress", "spin").ok());
  const Status bad = set(s, "progress", "fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(bad.error().message, "\"fast\" is not one of auto, fd, backoff, spin");
  EXPECT_EQ(s.progress, ProgressMode::Spin);  // unchanged by the refused value
}

TEST(DataPlaneSettings, TheTransportIsOpenedWithThemAsValues) {
  DataPlaneSettings s;
  ASSERT_TRUE(set(s, "progress", "backoff").ok());
  ASSERT_TRUE(set(s, "ib-sq-depth", "256").ok());
  ASSERT_TRUE(set(s, "ib-listen", "10.0.0.5:0").ok());
  TransportConfig asked;
  asked.provider = "tcp";
  asked.rails = 2;
  const TransportConfig config = s.applied_to(asked);
  EXPECT_EQ(config.provider, "tcp");  // what the caller set stays
  EXPECT_EQ(config.rails, 2);
  EXPECT_EQ(config.progress, ProgressMode::Backoff);
  EXPECT_EQ(config.ibverbs.sq_depth, 256u);
  EXPECT_EQ(config.ibverbs.listen, "10.0.0.5:0");
}

TEST(DataPlaneSettings, CudaDriverIsAPathThatMustBeGiven) {
  DataPlaneSettings s;
  EXPECT_EQ(s.cuda_driver, "libcuda.so.1");
  ASSERT_TRUE(set(s, "cuda-driver", "/usr/local/nvidia/lib64/libcuda.so.1").ok());
  EXPECT_EQ(s.cuda_driver, "/usr/local/nvidia/lib64/libcuda.so.1");
  EXPECT_FALSE(set(s, "cuda-driver", "").ok());
}

}  // namespace
}  // namespace conduit
