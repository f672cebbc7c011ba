// EndpointSlices of the agent Service -> the agent directory, and agents' answers -> FabricNode status.
// (tests/scenarios/e2e/test_cluster.py runs discovery for real, with agents in network namespaces.)
#include "discovery.h"

#include <gtest/gtest.h>

#include "conduit/common/condition.h"
#include "fakes.h"

namespace conduit::controller {
namespace {

using json = nlohmann::json;

json slice(const json& ports, const json& endpoints) {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata", {{"name", "conduit-agent-x"}, {"namespace", "conduit"}}},
          {"addressType", "IPv4"},
          {"ports", ports},
          {"endpoints", endpoints}};
}

TEST(EndpointSlices, ReadyEndpointsMapByNodeNameTargetRefOrHostname) {
  const json ports = json::array({{{"name", "metrics"}, {"port", 9090}}, {{"name", "http"}, {"port", 7070}}});
  const auto agents = agents_from_endpoint_slices({
      slice(ports,
            json::array({
                {{"addresses", {"10.0.0.5"}}, {"nodeName", "node-a"}, {"conditions", {{"ready", true}}}},
                {{"addresses", {"10.0.0.6"}}, {"targetRef", {{"kind", "Pod"}, {"name", "agent-b"}}}},
                {{"addresses", {"10.0.0.7"}}, {"hostname", "node-c"}},
                {{"addresses", {"10.0.0.8"}}, {"nodeName", "node-d"}, {"conditions", {{"ready", false}}}},
                {{"addresses", json::array()}, {"nodeName", "node-e"}},
                {{"addresses", {"10.0.0.9"}}},
            })),
      slice(json::array({{{"port", 7071}}}),
            json::array({{{"addresses", {"fd00::1"}}, {"nodeName", "node-f"}}})),
      slice(json::array(), json::array({{{"addresses", {"10.0.0.10"}}, {"nodeName", "node-g"}}})),
  });
  const std::map<std::string, std::string> want{{"node-a", "http://10.0.0.5:7070"},
                                                {"agent-b", "http://10.0.0.6:7070"},
                                                {"node-c", "http://10.0.0.7:7070"},
                                                {"node-f", "http://[fd00::1]:7071"}};
  EXPECT_EQ(agents, want);
}

TEST(EndpointSlices, APortNamedHttpsMeansTheAgentsServeTls) {
  const json ports =
      json::array({{{"name", "metrics"}, {"port", 9090}}, {{"name", "https"}, {"port", 7443}}});
  const auto agents = agents_from_endpoint_slices(
      {slice(ports, json::array({{{"addresses", {"10.0.0.5"}}, {"nodeName", "node-a"}}}))});
  EXPECT_EQ(agents, (std::map<std::string, std::string>{{"node-a", "https://10.0.0.5:7443"}}));
}

TEST(EndpointSlices, MalformedSlicesAreIgnoredNotFatal) {
  EXPECT_TRUE(
      agents_from_endpoint_slices(
          {json::object(), slice(json::array({{{"port", 7070}}}),
                                 json::array({{{"nodeName", "Not_A_Node"}, {"addresses", {"10.0.0.1"}}}}))})
          .empty());
}

TEST(NodeDiscovery, EachGpuInAFabricNodeNamesItsNearestNics) {
  testing::ManualClock clock;
  testing::MemoryStore store(clock);
  testing::FakeAgents agents;
  agents.add_node("gpu-1");
  agents.nodes["gpu-1"].info = {
      {"topology",
       {{"gpus", {{{"pciAddress", "0000:53:00.0"}}, {{"pciAddress", "0000:64:00.0"}}}},
        {"nicChoice",
         {{"gpus",
           {{{"gpu", "0000:53:00.0"}, {"nics", {"mlx5_0", "mlx5_1"}}, {"distance", "SameSwitch"}},
            {{"gpu", "0000:64:00.0"}, {"nics", {"mlx5_2"}}, {"distance", "SameNumaNode"}}}}}}}}};
  AgentDirectory directory;
  directory.set("gpu-1", "http://gpu-1:7070");
  NodeDiscovery discovery;
  discovery.run(agents, directory, store);
  ASSERT_EQ(store.node_status.count("gpu-1"), 1U);
  const auto& gpus = store.node_status["gpu-1"]["gpus"];
  ASSERT_EQ(gpus.size(), 2U) << store.node_status["gpu-1"].dump(2);
  EXPECT_EQ(gpus[0]["nearestNics"], nlohmann::json({"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(gpus[0]["nicDistance"], "SameSwitch");
  EXPECT_EQ(gpus[1]["nearestNics"], nlohmann::json({"mlx5_2"}));
}

// What a FabricNode says is what the pre-flight reads; a node whose agent left the agent Service's endpoints
// (its pod is not ready) turns unreachable in both, instead of staying as it was last seen.
TEST(NodeDiscovery, FabricFactsFollowTheFabricNodesAndAnAgentThatLeftIsUnreachable) {
  testing::ManualClock clock;
  testing::MemoryStore store(clock);
  testing::FakeAgents agents;
  FabricFacts facts;
  for (const char* node : {"node-a", "node-b"}) {
    agents.add_node(node);
    agents.nodes[node].info = {{"fabric", {{{"provider", "efa"}}, {{"provider", "tcp;ofi_rxm"}}}},
                               {"checks", {{{"name", "rdma"}, {"ok", true}, {"message", ""}}}}};
  }
  AgentDirectory directory;
  directory.set("node-a", "http://node-a:7070");
  directory.set("node-b", "http://node-b:7070");
  NodeDiscovery discovery(&facts);
  discovery.run(agents, directory, store);
  ASSERT_TRUE(facts.get("node-a"));
  EXPECT_TRUE(facts.get("node-a")->reachable);
  EXPECT_EQ(facts.get("node-a")->rdma_ready, true);
  EXPECT_EQ(facts.get("node-a")->transports, (std::vector<std::string>{"efa", "tcp"}));

  agents.nodes["node-a"].down = true;
  directory.remove("node-b");
  discovery.run(agents, directory, store);
  EXPECT_FALSE(facts.get("node-a")->reachable);
  EXPECT_NE(facts.get("node-a")->unreachable_why.find("did not answer"), std::string::npos);
  EXPECT_EQ(facts.get("node-a")->transports, (std::vector<std::string>{"efa", "tcp"})) << "kept as last seen";
  EXPECT_FALSE(facts.get("node-b")->reachable);
  const json* reachable = find_condition(store.node_status["node-b"], "Reachable");
  ASSERT_NE(reachable, nullptr) << store.node_status["node-b"].dump(2);
  EXPECT_EQ((*reachable)["status"], "False");
  EXPECT_NE((*reachable)["message"].get<std::string>().find("ready endpoints"), std::string::npos);
  EXPECT_EQ(discovery.reachable_counts(), (std::pair<int, int>{0, 2}));
}

}  // namespace
}  // namespace conduit::controller
