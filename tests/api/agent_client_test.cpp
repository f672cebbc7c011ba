// AgentClient against a stand-in agent: the errors every caller reads the same way (conduit/api/errors.h),
// the token it sends, and the bodies it posts.
#include "conduit/api/agent_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace conduit::api {
namespace {

using nlohmann::json;

class StandIn {
 public:
  StandIn() {
    server_.Get("/v1/regions/(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      last_token = req.get_header_value("Authorization");
      const std::string name = req.matches[1];
      if (name == "secret") {
        res.status = 401;
        res.set_content(R"({"error":{"code":"Unauthorized","message":"invalid bearer token"}})",
                        "application/json");
      } else if (name == "proxy") {
        res.status = 502;
        res.set_content("<html>bad gateway</html>", "text/html");
      } else if (name == "missing") {
        res.status = 404;
        res.set_content(R"({"error":{"code":"NotFound","message":"no region \"missing\""}})",
                        "application/json");
      } else {
        res.set_content(json{{"name", name}, {"bytes", 4096}, {"memory", "host"}}.dump(), "application/json");
      }
    });
    server_.Post("/v1/transfers", [this](const httplib::Request& req, httplib::Response& res) {
      posted = json::parse(req.body);
      res.status = 202;
      res.set_content(R"({"id":"t-1","state":"Queued"})", "application/json");
    });
    // The client keeps its connection alive; a short keep-alive lets stop() end without waiting 5 s for it.
    server_.set_keep_alive_timeout(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StandIn() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::string last_token;
  json posted;

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(AgentClient, ReadsAnswersAndErrorsAsEveryCallerDoes) {
  StandIn agent;
  const AgentClient client(agent.url() + "/", {.token = std::string("t0k")});
  auto region = client.get_region("weights");
  ASSERT_TRUE(region) << region.error().message;
  EXPECT_EQ(region->bytes, 4096u);
  EXPECT_EQ(agent.last_token, "Bearer t0k");

  auto refused = client.get_region("secret");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::RemoteAccess);
  EXPECT_EQ(refused.error().message, "Unauthorized: invalid bearer token");

  auto missing = client.get_region("missing");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);
  EXPECT_EQ(missing.error().message, "NotFound: no region \"missing\"");

  auto proxy = client.get_region("proxy");
  ASSERT_FALSE(proxy);
  EXPECT_EQ(proxy.error().code, ErrorCode::Provider);
  EXPECT_EQ(proxy.error().message, "agent at " + agent.url() + " answered HTTP 502 to GET /v1/regions/proxy");

  auto gone = AgentClient("http://127.0.0.1:1", {}, "agent on node \"n1\"").get_region("weights");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::PeerUnreachable);
  EXPECT_EQ(gone.error().message.rfind("agent on node \"n1\" did not answer GET /v1/regions/weights: ", 0),
            0u)
      << gone.error().message;

  EXPECT_FALSE(AgentClient::valid_url("ftp://10.0.0.2:7070"));
  EXPECT_TRUE(AgentClient::valid_url("http://10.0.0.2:7070/"));
}

TEST(AgentClient, TokensComeFromTheSourceAtEachCall) {
  StandIn agent;
  int calls = 0;
  const AgentClient client(
      agent.url(),
      {.token = std::function<std::string()>([&calls] { return "t" + std::to_string(++calls); })});
  ASSERT_TRUE(client.get_region("a"));
  EXPECT_EQ(agent.last_token, "Bearer t1");
  ASSERT_TRUE(client.get_region("a"));
  EXPECT_EQ(agent.last_token, "Bearer t2");
  ASSERT_TRUE(AgentClient(agent.url(), {}).get_region("a"));
  EXPECT_EQ(agent.last_token, "") << "no token source: no Authorization header";
}

TEST(AgentClient, PostsTheOneTransferBody) {
  StandIn agent;
  TransferRequest request;
  request.source_region = "src";
  request.length = 4096;
  request.targets.push_back(
      {.grant = json{{"provider", "tcp;ofi_rxm"}}, .url = "http://b:7070", .region = "dst"});
  auto started = AgentClient(agent.url(), {}).start_transfer(request);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_EQ(started->id, "t-1");
  EXPECT_EQ(agent.posted, request.to_json());
}

}  // namespace
}  // namespace conduit::api
