// releaseGrant through real conduit-agent processes on loopback: the source agent revokes a target's grant
// at the target agent the moment the transfer ends, however it ends, so the target region can be deleted
// at once by whoever sees the end.
#include <gtest/gtest.h>

#include "agent_process.h"

namespace conduit {
namespace {

using testing::AgentProcess;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

class ReleaseGrant : public testing::TwoAgents {
 protected:
  // Starts a transfer of a's "src" into b's "dst" with the grant released at the end; its final status.
  json transfer(const json& extra = json::object()) {
    const json g = testing::region_grant(b, "dst", {{"access", "write"}, {"ttlSeconds", 600}});
    json body{
        {"source", {{"region", "src"}}},
        {"targets", {{{"grant", g["key"]}, {"url", b.url()}, {"grantId", g["id"]}, {"releaseGrant", true}}}}};
    body.update(extra);
    auto started = a.post("/v1/transfers", body);
    EXPECT_EQ(started.status, 202) << started.body.dump();
    return a.wait_transfer(started.body.value("id", ""));
  }
};

TEST_F(ReleaseGrant, TheGrantIsGoneWhenTheTransferEnds) {
  ASSERT_TRUE(a.started() && b.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "src"}, {"bytes", 8 * MiB}}).status, 201);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", 8 * MiB}}).status, 201);

  EXPECT_EQ(transfer()["state"], "Succeeded");
  EXPECT_EQ(b.get("/v1/grants").body["items"], json::array()) << "released before the end showed";

  // Failed (past its deadline) releases too.
  const json failed = transfer({{"maxBytesPerSecond", MiB}, {"deadlineSeconds", 1}});
  EXPECT_EQ(failed["reason"], "DeadlineExceeded") << failed.dump();
  EXPECT_EQ(b.get("/v1/grants").body["items"], json::array());
  EXPECT_EQ(b.del("/v1/regions/dst").status, 204) << "the region is free the moment the transfer ended";
}

TEST_F(ReleaseGrant, NeedsTheGrantIdAndUrl) {
  ASSERT_TRUE(a.started() && b.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "src"}, {"bytes", MiB}}).status, 201);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", MiB}}).status, 201);
  auto g = b.post("/v1/regions/dst/grants", {{"access", "write"}});
  auto refused = a.post("/v1/transfers", {{"source", {{"region", "src"}}},
                                          {"targets", {{{"grant", g.body["key"]}, {"releaseGrant", true}}}}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.dump().find("releaseGrant"), std::string::npos) << refused.body.dump();
}

}  // namespace
}  // namespace conduit
