// Who may call what (docs/security.md, "Identities"): a real agent over HTTPS with --client-ca-file, called
// by each kind of caller on each kind of route, and the outcomes the table in the docs names and no other;
// then two agents whose landing reports are let in or refused by the grant's peer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "build_paths.h"
#include "temp_dir.h"
#include "tls_files.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::AgentOptions;
using testing::AgentProcess;
using testing::CertFiles;
using testing::TestCa;

constexpr std::uint64_t MiB = 1 << 20;
constexpr const char* kToken = "test-token-0123456789";

// An HTTPS agent that takes client certificates signed by `ca` as callers' identities.
AgentOptions identity_agent(const CertFiles& serving, const TestCa& ca, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--client-ca-file", ca.cert().string()});
  return testing::tls_agent(serving, ca.cert(), extra);
}

// One caller: a client certificate or none, the token or none.
struct Caller {
  std::string name;
  std::optional<CertFiles> cert;
  bool token = false;
};

// The status `caller` gets for `method path body`; 0 when the TLS handshake (or anything before an answer)
// fails.
int status_of(const std::string& url, const std::filesystem::path& ca, const Caller& caller,
              const std::string& method, const std::string& path, const json& body = nullptr) {
  auto client = caller.cert ? std::make_unique<httplib::Client>(url, caller.cert->cert.string(),
                                                                caller.cert->key.string())
                            : std::make_unique<httplib::Client>(url);
  client->set_ca_cert_path(ca.string());
  client->set_connection_timeout(2s);
  client->set_read_timeout(5s);
  httplib::Headers headers;
  if (caller.token) headers.emplace("Authorization", std::string("Bearer ") + kToken);
  httplib::Result r = method == "GET"      ? client->Get(path, headers)
                      : method == "DELETE" ? client->Delete(path, headers)
                                           : client->Post(path, headers, body.dump(), "application/json");
  return r ? r->status : 0;
}

class AgentIdentity : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ca.ok() && other_ca.ok()) << "openssl could not make certificates"; }

  testing::TempDir dir;
  TestCa ca{dir.path() / "ca", "conduit-test-ca"};
  TestCa other_ca{dir.path() / "other", "someone-elses-ca"};
};

TEST_F(AgentIdentity, EachCallerGetsExactlyWhatTheTableSays) {
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "r"}, {"bytes", MiB}, {"memory", "host"}}).status, 201);
  // A grant the controller made for node-b's agent, which writes into it and reports what landed.
  auto g = a.post("/v1/regions/r/grants",
                  {{"length", MiB}, {"access", "write"}, {"ttlSeconds", 600}, {"peer", "node-b"}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  ASSERT_EQ(g.body.value("peer", ""), "node-b");
  const std::string grant = g.body["id"];

  const std::vector<Caller> callers{
      {"nothing", std::nullopt, false},
      {"token (operator)", std::nullopt, true},
      {"another CA's certificate", other_ca.issue("conduit:controller", "DNS:x"), false},
      {"an expired certificate", ca.issue("conduit:controller", "DNS:x", /*expired=*/true), false},
      {"conduit:controller", ca.issue("conduit:controller", "DNS:x"), false},
      {"conduit:operator", ca.issue("conduit:operator", "DNS:x"), false},
      {"conduit:agent:node-b", ca.issue("conduit:agent:node-b", "DNS:x"), false},
      {"conduit:agent:node-c (another node)", ca.issue("conduit:agent:node-c", "DNS:x"), false},
      {"conduit:agent (any agent)", ca.issue("conduit:agent", "DNS:x"), false},
      {"a certificate naming no identity", ca.issue("mallory", "DNS:x"), false},
      // A known certificate wins over the token: an agent's certificate with the token is still an agent.
      {"conduit:agent:node-c with the token", ca.issue("conduit:agent:node-c", "DNS:x"), true},
  };
  ASSERT_TRUE(ca.ok() && other_ca.ok());

  struct Route {
    std::string method, path;
    json body;
  };
  int created = 0;
  auto routes = [&] {
    return std::vector<Route>{
        {"GET", "/healthz", nullptr},
        {"GET", "/v1/regions", nullptr},
        {"POST",
         "/v1/regions",
         {{"name", "n" + std::to_string(++created)}, {"bytes", 4096}, {"memory", "host"}}},
        {"POST",
         "/v1/regions/r/grants",
         {{"length", 4096}, {"access", "write"}, {"ttlSeconds", 60}, {"peer", "node-b"}}},
        {"GET", "/v1/regions/r/checksum", nullptr},
        {"POST", "/v1/grants/" + grant + "/landed", {{"offset", 0}, {"length", 4096}}},
        // r onto itself through the grant: a transfer that starts and ends at once.
        {"POST",
         "/v1/transfers",
         {{"source", {{"region", "r"}, {"length", 4096}}},
          {"targets", {{{"grant", g.body["key"]}, {"url", a.url()}, {"region", "r"}}}}}},
    };
  };
  // Columns as routes() lists them. 0: no answer (the handshake fails).
  const std::map<std::string, std::vector<int>> expected{
      {"nothing", {200, 401, 401, 401, 401, 401, 401}},
      {"token (operator)", {200, 200, 201, 201, 200, 200, 202}},
      {"another CA's certificate", {0, 0, 0, 0, 0, 0, 0}},
      {"an expired certificate", {0, 0, 0, 0, 0, 0, 0}},
      {"conduit:controller", {200, 200, 201, 201, 200, 200, 202}},
      {"conduit:operator", {200, 200, 201, 201, 200, 200, 202}},
      {"conduit:agent:node-b", {200, 403, 403, 403, 200, 200, 202}},
      {"conduit:agent:node-c (another node)", {200, 403, 403, 403, 403, 403, 403}},
      {"conduit:agent (any agent)", {200, 403, 403, 403, 200, 200, 202}},
      {"a certificate naming no identity", {200, 403, 403, 403, 403, 403, 403}},
      {"conduit:agent:node-c with the token", {200, 403, 403, 403, 403, 403, 403}},
  };
  for (const Caller& caller : callers) {
    std::vector<int> got;
    for (const Route& route : routes()) {
      got.push_back(status_of(a.url(), ca.cert(), caller, route.method, route.path, route.body));
    }
    EXPECT_EQ(got, expected.at(caller.name)) << caller.name;
  }
}

TEST_F(AgentIdentity, TheReasonNamesTheCallerAndWhatItMayNotDo) {
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started());
  const Caller agent{"b", ca.issue("conduit:agent:node-b", "DNS:x"), false};
  const Caller nobody{"m", ca.issue("mallory", "DNS:x"), false};
  auto error_of = [&](const Caller& caller, const std::string& path) {
    httplib::Client client(a.url(), caller.cert->cert.string(), caller.cert->key.string());
    client.set_ca_cert_path(ca.cert().string());
    auto r = client.Get(path);
    return r ? json::parse(r->body, nullptr, false) : json();
  };
  const json refused = error_of(agent, "/v1/regions");
  EXPECT_EQ(refused["error"]["code"], "Forbidden");
  EXPECT_EQ(refused["error"]["message"], "the agent of node \"node-b\" may not GET /v1/regions");
  const json unknown = error_of(nobody, "/v1/regions");
  EXPECT_EQ(unknown["error"]["code"], "Forbidden");
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("\"mallory\", which is no Conduit identity"),
            std::string::npos)
      << unknown.dump();
}

// The controller's signer of node certificates has a CA of its own (--agent-client-ca-file): what it signs
// names one node's agent, and the same key minting a controller, an operator or "any agent" gets nowhere.
TEST_F(AgentIdentity, TheAgentsCaNamesOneNodesAgentAlone) {
  TestCa signer{dir.path() / "signer", "conduit-agent-signer"};
  ASSERT_TRUE(signer.ok());
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca,
                                {"--agent-client-ca-file", signer.cert().string()}));
  ASSERT_TRUE(a.started());
  auto answer = [&](const CertFiles& cert, const std::string& path) {
    httplib::Client client(a.url(), cert.cert.string(), cert.key.string());
    client.set_ca_cert_path(ca.cert().string());
    client.set_connection_timeout(2s);
    auto r = client.Get(path);
    return r ? std::make_pair(r->status, json::parse(r->body, nullptr, false)) : std::make_pair(0, json());
  };
  // A node's agent: in, with an agent's scope (no operator route), as with the install's CA.
  const auto node = answer(signer.issue("conduit:agent:node-b", "DNS:x"), "/v1/regions");
  EXPECT_EQ(node.first, 403);
  EXPECT_EQ(node.second["error"]["message"], "the agent of node \"node-b\" may not GET /v1/regions");
  for (const char* name :
       {"conduit:controller", "conduit:operator", "conduit:agent", "conduit:controller:team-a"}) {
    const auto minted = answer(signer.issue(name, "DNS:x"), "/v1/regions");
    EXPECT_EQ(minted.first, 403) << name;
    EXPECT_NE(minted.second["error"]["message"].get<std::string>().find("may name one node's agent alone"),
              std::string::npos)
        << name << ": " << minted.second.dump();
  }
  // The install's CA still names everyone it did.
  EXPECT_EQ(answer(ca.issue("conduit:controller", "DNS:x"), "/v1/regions").first, 200);
}

// A tenant's controller (conduit:controller:<namespace>, one that watches that namespace alone) acts for its
// namespace and nothing else: what it asks for names its namespace, and of what exists it reads only what
// its namespace may use and changes only its own, so its credentials alone reach no other tenant.
TEST_F(AgentIdentity, ATenantsControllerActsForItsNamespaceAlone) {
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started());
  for (const json& region :
       {json{{"name", "own"}, {"namespace", "team-a"}}, json{{"name", "theirs"}, {"namespace", "team-b"}},
        json{{"name", "lent"}, {"namespace", "team-b"}, {"sharedWith", {"team-a"}}},
        json{{"name", "open"}}}) {
    json body = region;
    body["bytes"] = MiB;
    ASSERT_EQ(a.post("/v1/regions", body).status, 201) << body.dump();
  }
  const auto operators = a.post("/v1/regions/own/grants", {{"access", "write"}, {"ttlSeconds", 600}});
  ASSERT_EQ(operators.status, 201);
  const std::string operators_grant = operators.body["id"];
  const auto operators_transfer =
      a.post("/v1/transfers", {{"source", {{"region", "open"}, {"length", 4096}}},
                               {"targets", {{{"grant", operators.body["key"]}, {"url", a.url()}}}}});
  ASSERT_EQ(operators_transfer.status, 202) << operators_transfer.body.dump();

  const CertFiles cert = ca.issue("conduit:controller:team-a", "DNS:x");
  const CertFiles not_a_namespace = ca.issue("conduit:controller:Team_A", "DNS:x");
  ASSERT_TRUE(ca.ok());
  auto call = [&](const CertFiles& as, const std::string& method, const std::string& path,
                  const json& body = nullptr) {
    httplib::Client client(a.url(), as.cert.string(), as.key.string());
    client.set_ca_cert_path(ca.cert().string());
    auto r = method == "GET"      ? client.Get(path)
             : method == "DELETE" ? client.Delete(path)
                                  : client.Post(path, body.dump(), "application/json");
    return std::make_pair(r ? r->status : 0, r ? json::parse(r->body, nullptr, false) : json());
  };
  auto status = [&](const std::string& method, const std::string& path, const json& body = nullptr) {
    return call(cert, method, path, body).first;
  };
  auto names = [](const json& list) {
    std::set<std::string> out;
    for (const json& item : list["items"]) out.insert(item.contains("name") ? item["name"] : item["id"]);
    return out;
  };

  EXPECT_EQ(call(not_a_namespace, "GET", "/v1/regions").first, 403) << "a name that is no namespace";

  // Regions: it sees what team-a may use, makes only team-a's, deletes only team-a's.
  auto [listed, regions] = call(cert, "GET", "/v1/regions");
  EXPECT_EQ(listed, 200);
  EXPECT_EQ(names(regions), (std::set<std::string>{"own", "lent", "open"}));
  EXPECT_EQ(status("GET", "/v1/regions/lent"), 200);
  EXPECT_EQ(status("GET", "/v1/regions/theirs"), 403);
  EXPECT_EQ(status("GET", "/v1/regions/theirs/checksum"), 403);
  EXPECT_EQ(status("POST", "/v1/regions", {{"name", "n1"}, {"bytes", 4096}, {"namespace", "team-a"}}), 201);
  auto [made_for_b, why] =
      call(cert, "POST", "/v1/regions", {{"name", "n2"}, {"bytes", 4096}, {"namespace", "team-b"}});
  EXPECT_EQ(made_for_b, 403);
  const std::string message = why.contains("error") ? why["error"].value("message", "") : "";
  EXPECT_NE(message.find("the controller of namespace \"team-a\" may not act for namespace \"team-b\""),
            std::string::npos)
      << why.dump();
  EXPECT_EQ(status("POST", "/v1/regions", {{"name", "n3"}, {"bytes", 4096}}), 403) << "a request naming none";
  EXPECT_EQ(status("DELETE", "/v1/regions/lent"), 403) << "shared with it, not its own";
  EXPECT_EQ(status("DELETE", "/v1/regions/open"), 403);
  EXPECT_EQ(status("DELETE", "/v1/regions/n1"), 204);

  // Grants: made for team-a only, on regions team-a may use; of those that exist, only team-a's.
  const json write{{"access", "write"}, {"ttlSeconds", 60}, {"namespace", "team-a"}};
  auto [made, own_grant] = call(cert, "POST", "/v1/regions/own/grants", write);
  ASSERT_EQ(made, 201) << own_grant.dump();
  EXPECT_EQ(own_grant.value("namespace", ""), "team-a");
  auto [lent_made, lent_grant] = call(cert, "POST", "/v1/regions/lent/grants", write);
  ASSERT_EQ(lent_made, 201) << lent_grant.dump();
  EXPECT_EQ(status("POST", "/v1/regions/theirs/grants", write), 403);
  json for_b = write;
  for_b["namespace"] = "team-b";
  EXPECT_EQ(status("POST", "/v1/regions/theirs/grants", for_b), 403);
  auto [grants_listed, grants] = call(cert, "GET", "/v1/grants");
  EXPECT_EQ(grants_listed, 200);
  EXPECT_EQ(names(grants), (std::set<std::string>{own_grant["id"], lent_grant["id"]}));
  EXPECT_EQ(status("GET", "/v1/grants/" + operators_grant), 403);
  EXPECT_EQ(status("POST", "/v1/grants/" + operators_grant + "/renew", {{"ttlSeconds", 60}}), 403);
  EXPECT_EQ(status("DELETE", "/v1/grants/" + operators_grant), 403);
  EXPECT_EQ(status("POST", "/v1/grants/" + operators_grant + "/landed", {{"offset", 0}, {"length", 4096}}),
            403);

  // Transfers: for team-a only, and of those that exist only its own.
  const json transfer{{"source", {{"region", "own"}, {"length", 4096}}},
                      {"targets", {{{"grant", lent_grant["key"]}, {"url", a.url()}}}},
                      {"namespace", "team-a"}};
  auto [started, mine] = call(cert, "POST", "/v1/transfers", transfer);
  EXPECT_EQ(started, 202) << mine.dump();
  json for_b_transfer = transfer;
  for_b_transfer["namespace"] = "team-b";
  EXPECT_EQ(status("POST", "/v1/transfers", for_b_transfer), 403);
  auto [transfers_listed, transfers] = call(cert, "GET", "/v1/transfers");
  EXPECT_EQ(transfers_listed, 200);
  EXPECT_EQ(names(transfers), std::set<std::string>{mine["id"]});
  EXPECT_EQ(status("GET", "/v1/transfers/" + operators_transfer.body["id"].get<std::string>()), 403);
  EXPECT_EQ(status("GET", "/v1/transfers/" + mine["id"].get<std::string>()), 200);
  EXPECT_EQ(status("DELETE", "/v1/grants/" + own_grant["id"].get<std::string>()), 204);
}

// What an agent's certificate reaches on another node is what a live grant made for it allows, on that
// grant's range and with its access (rest/peer_access.h). The outside probe's two ways in, as it ran them:
// a read grant used to overwrite its region (op "read" into it), and a 4 KiB grant used to send on and
// checksum the rest of its 1 MiB region. Before the fix both were let in (202, the victim overwritten; the
// other 960 KiB sent and checksummed).
TEST_F(AgentIdentity, AnAgentReachesOnlyItsGrantsRangeAndAccess) {
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started());
  testing::load_seeded(a, "victim", MiB, 1);
  testing::load_seeded(a, "secret", MiB, 2);
  testing::load_seeded(a, "theirs", MiB, 3);
  ASSERT_EQ(a.post("/v1/regions", {{"name", "mine"}, {"bytes", MiB}, {"memory", "host"}}).status, 201);
  const std::string whole = "/checksum?slice=" + std::to_string(MiB);
  const json victim_before = a.get("/v1/regions/victim" + whole).body["crc32c"];
  ASSERT_FALSE(victim_before.is_null());

  auto grant = [&](const std::string& region, const json& body) {
    return testing::region_grant(a, region, body);
  };
  // A pull's read grant naming no peer (as `conduit transfer --pull` made them), and a read grant on a
  // region the attacker fills.
  grant("victim", {{"access", "read"}, {"ttlSeconds", 600}});
  const json attackers = grant("theirs", {{"access", "read"}, {"ttlSeconds", 600}});
  // 4 KiB of a 1 MiB region, for node-b to write, and a region node-b may write whole.
  const json small =
      grant("secret", {{"length", 4096}, {"access", "write"}, {"ttlSeconds", 600}, {"peer", "node-b"}});
  const json into_mine = grant("mine", {{"access", "write"}, {"ttlSeconds", 600}, {"peer", "node-b"}});

  const CertFiles node_b = ca.issue("conduit:agent:node-b", "DNS:x");
  const CertFiles node_c = ca.issue("conduit:agent:node-c", "DNS:x");
  ASSERT_TRUE(ca.ok());
  auto call = [&](const CertFiles& as, const std::string& method, const std::string& path,
                  const json& body = nullptr) {
    httplib::Client client(a.url(), as.cert.string(), as.key.string());
    client.set_ca_cert_path(ca.cert().string());
    auto r = method == "GET" ? client.Get(path) : client.Post(path, body.dump(), "application/json");
    return std::make_pair(r ? r->status : 0, r ? json::parse(r->body, nullptr, false) : json());
  };
  auto message = [](const json& answer) {
    return answer.contains("error") ? answer["error"].value("message", "") : answer.dump();
  };

  // 1. A read grant never makes its region a write target.
  auto [overwrite, refused] = call(
      node_b, "POST", "/v1/transfers",
      {{"source", {{"region", "victim"}}}, {"op", "read"}, {"targets", {{{"grant", attackers["key"]}}}}});
  EXPECT_EQ(overwrite, 403) << refused.dump();
  EXPECT_NE(message(refused).find("no grant made for it lets it write bytes [0, +1048576) of region "
                                  "\"victim\" (a read grant never lets its agent write)"),
            std::string::npos)
      << refused.dump();
  std::this_thread::sleep_for(200ms);  // had it started, it would be done by now
  EXPECT_EQ(a.get("/v1/regions/victim" + whole).body["crc32c"], victim_before) << "victim overwritten";
  // Sending the range it may read out is what a read grant allows.
  auto [sent_on, sent] = call(node_b, "POST", "/v1/transfers",
                              {{"source", {{"region", "victim"}, {"length", 4096}}},
                               {"targets", {{{"grant", into_mine["key"]}, {"url", a.url()}}}}});
  EXPECT_EQ(sent_on, 202) << sent.dump();

  // 2. A grant on part of a region opens that part alone.
  const json beyond{{"source", {{"region", "secret"}, {"offset", 65536}, {"length", MiB - 65536}}},
                    {"targets", {{{"grant", into_mine["key"]}}}}};
  auto [leaked, leak_refused] = call(node_b, "POST", "/v1/transfers", beyond);
  EXPECT_EQ(leaked, 403) << leak_refused.dump();
  EXPECT_NE(message(leak_refused).find("bytes [65536, +983040) of region \"secret\""), std::string::npos)
      << leak_refused.dump();
  EXPECT_EQ(call(node_b, "POST", "/v1/transfers",
                 {{"source", {{"region", "secret"}}}, {"targets", {{{"grant", into_mine["key"]}}}}})
                .first,
            403)
      << "to the region's end";
  // Each scatter op's range alike: one op past the grant refuses the whole request.
  auto ops = [&](std::uint64_t second) {
    return json{{"source", {{"region", "secret"}}},
                {"targets", {{{"grant", into_mine["key"]}}}},
                {"ops",
                 {{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 2048}},
                  {{"sourceOffset", second}, {"targetOffset", 2048}, {"length", 2048}}}}};
  };
  EXPECT_EQ(call(node_b, "POST", "/v1/transfers", ops(2048)).first, 202) << "both ops in its 4 KiB";
  EXPECT_EQ(call(node_b, "POST", "/v1/transfers", ops(65536)).first, 403) << "the second op past it";
  EXPECT_EQ(call(node_b, "GET", "/v1/regions/secret/checksum").first, 403) << "the whole region";
  EXPECT_EQ(call(node_b, "GET", "/v1/regions/secret/checksum?offset=4096&length=4096").first, 403);
  EXPECT_EQ(call(node_b, "GET", "/v1/regions/secret/checksum?length=4096").first, 200) << "its own range";
  EXPECT_EQ(call(node_c, "GET", "/v1/regions/secret/checksum?length=4096").first, 403) << "another node";
  EXPECT_EQ(call(node_b, "POST", "/v1/grants/" + small["id"].get<std::string>() + "/landed",
                 {{"offset", 4096}, {"length", 4096}})
                .first,
            403)
      << "a landing report past the grant";
  EXPECT_EQ(call(node_b, "POST", "/v1/grants/" + small["id"].get<std::string>() + "/landed",
                 {{"offset", 0}, {"length", 4096}})
                .first,
            200);

  // For the grant's lifetime: revoked, it allows nothing.
  ASSERT_EQ(a.del("/v1/grants/" + small["id"].get<std::string>()).status, 204);
  EXPECT_EQ(call(node_b, "GET", "/v1/regions/secret/checksum?length=4096").first, 403) << "after revoking";
}

// `conduit transfer --pull` names the node of the agent that reads in its read grant (GET /v1/node of the
// --to agent), so only that node's certificate may use it. The reader here asks the source for checksums
// of what it read (verify crc32c): an agent that says it is node-b but presents node-x's certificate is
// refused. Before, the pull's grant named no node and any agent certificate used it: the second pull
// succeeded.
TEST_F(AgentIdentity, TheClisPullGrantNamesTheNodeThatReads) {
  auto reader = [&](const std::string& presents) {
    const CertFiles client = ca.issue("conduit:agent:" + presents, "DNS:" + presents);
    return identity_agent(
        ca.issue("node-b", "DNS:node-b,IP:127.0.0.1"), ca,
        {"--node-name", "node-b", "--peer-ca-file", ca.cert().string(), "--peer-client-cert",
         client.cert.string(), "--peer-client-key", client.key.string()});
  };
  AgentProcess a(
      identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca, {"--node-name", "node-a"}));
  AgentProcess b(reader("node-b"));
  AgentProcess liar(reader("node-x"));
  ASSERT_TRUE(ca.ok());
  ASSERT_TRUE(a.started() && b.started() && liar.started());
  testing::load_seeded(a, "src", 4 * MiB, 11);
  for (AgentProcess* to : {&b, &liar}) {
    ASSERT_EQ(to->post("/v1/regions", {{"name", "dst"}, {"bytes", 4 * MiB}, {"memory", "host"}}).status, 201);
  }
  auto pull = [&](const AgentProcess& to) {
    const std::string command = "CONDUIT_TOKEN=" + std::string(kToken) +
                                " CONDUIT_CA_CERT=" + ca.cert().string() + " " +
                                conduit::testing::built_binary("conduit") + " transfer --pull --from " +
                                a.url() + "/src --to " + to.url() + "/dst --verify crc32c > /dev/null 2>&1";
    return std::system(command.c_str());
  };
  EXPECT_EQ(pull(b), 0) << "node-b reading through a grant made for node-b";
  EXPECT_NE(pull(liar), 0) << "node-x's certificate used a grant made for node-b";
  EXPECT_EQ(a.get("/v1/grants").body["items"], json::array()) << "the CLI revokes its grant either way";
}

TEST_F(AgentIdentity, AgentsPresentTheirCertificatesAndOnlyTheGrantsPeerMayReportLandedBytes) {
  // Two agents with certificates of their own nodes and no token for each other. Node-a sends to node-b
  // with crc32c: every landing report is a call a -> b that b lets in only for the grant's peer.
  const CertFiles a_client = ca.issue("conduit:agent:node-a", "DNS:node-a");
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca,
                                {"--peer-ca-file", ca.cert().string(), "--peer-client-cert",
                                 a_client.cert.string(), "--peer-client-key", a_client.key.string()}));
  AgentProcess b(identity_agent(ca.issue("node-b", "DNS:node-b,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 8 * MiB + 4321;
  testing::load_seeded(a, "src", size, 7);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", size}, {"memory", "host"}}).status, 201);

  auto send_through = [&](const std::string& peer) {
    auto g = b.post("/v1/regions/dst/grants",
                    {{"length", size}, {"access", "write"}, {"ttlSeconds", 600}, {"peer", peer}});
    EXPECT_EQ(g.status, 201) << g.body.dump();
    const json body{
        {"source", {{"region", "src"}}},
        {"targets",
         {{{"grant", g.body["key"]}, {"grantId", g.body["id"]}, {"url", b.url()}, {"region", "dst"}}}},
        {"verify", "crc32c"}};
    auto started = a.post("/v1/transfers", body);
    EXPECT_EQ(started.status, 202) << started.body.dump();
    json now;
    for (int i = 0; i < 200; ++i) {
      now = a.get("/v1/transfers/" + started.body.value("id", "")).body;
      const std::string state = now.value("state", "");
      if (state != "Queued" && state != "Running") break;
      std::this_thread::sleep_for(50ms);
    }
    return now;
  };
  const json mine = send_through("node-a");
  EXPECT_EQ(mine.value("state", ""), "Succeeded") << mine.dump();
  const std::string whole = "/checksum?slice=" + std::to_string(size);
  EXPECT_EQ(b.get("/v1/regions/dst" + whole).body["crc32c"], a.get("/v1/regions/src" + whole).body["crc32c"]);

  const json theirs = send_through("node-c");
  EXPECT_EQ(theirs.value("state", ""), "Failed") << theirs.dump();
  EXPECT_NE(theirs.dump().find("may not POST /v1/grants/"), std::string::npos) << theirs.dump();
}

// The sum of a grant's ranges (POST /v1/grants/{id}/checksum) is for the grant's peer alone: a verified
// scatter batch from node-a through a grant made for node-a compares its sums over that route; through one
// made for node-c it fails saying node-a may not ask; and another node's certificate is refused the route.
TEST_F(AgentIdentity, OnlyTheGrantsPeerMayAskForTheSumOfItsRanges) {
  const CertFiles a_client = ca.issue("conduit:agent:node-a", "DNS:node-a");
  AgentProcess a(identity_agent(ca.issue("node-a", "DNS:node-a,IP:127.0.0.1"), ca,
                                {"--peer-ca-file", ca.cert().string(), "--peer-client-cert",
                                 a_client.cert.string(), "--peer-client-key", a_client.key.string()}));
  AgentProcess b(identity_agent(ca.issue("node-b", "DNS:node-b,IP:127.0.0.1"), ca));
  ASSERT_TRUE(a.started() && b.started());
  testing::load_seeded(a, "src", 4 * MiB, 5);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", 4 * MiB}, {"memory", "host"}}).status, 201);
  const json ops = json::array({{{"sourceOffset", 0}, {"targetOffset", MiB}, {"length", MiB}},
                                {{"sourceOffset", 3 * MiB}, {"targetOffset", 0}, {"length", 4096}}});
  auto scatter = [&](const json& g) {
    return a.post("/v1/transfers?waitSeconds=30",
                  {{"source", {{"region", "src"}}},
                   {"targets", {{{"grant", g["key"]}, {"url", b.url()}, {"grantId", g["id"]}}}},
                   {"verify", "crc32c"},
                   {"ops", ops}});
  };
  const json for_a =
      testing::region_grant(b, "dst", {{"access", "write"}, {"ttlSeconds", 600}, {"peer", "node-a"}});
  const json for_c =
      testing::region_grant(b, "dst", {{"access", "write"}, {"ttlSeconds", 600}, {"peer", "node-c"}});

  const auto mine = scatter(for_a);
  EXPECT_EQ(mine.body.value("state", ""), "Succeeded") << mine.body.dump();
  EXPECT_EQ(mine.body.value("verified", false), true) << mine.body.dump();
  const auto theirs = scatter(for_c);
  EXPECT_EQ(theirs.body.value("state", ""), "Failed") << theirs.body.dump();
  EXPECT_EQ(theirs.body.value("reason", ""), "RemoteAccessDenied") << theirs.body.dump();
  EXPECT_NE(theirs.body.dump().find("may not POST /v1/grants/"), std::string::npos) << theirs.body.dump();

  const std::string route = "/v1/grants/" + for_a["id"].get<std::string>() + "/checksum";
  const json body{{"rangesPacked", "AAAAAAAAAAABAAAAAAAAAA=="}};  // [0, +1)
  const Caller node_a{"node-a", a_client, false};
  const Caller node_c{"node-c", ca.issue("conduit:agent:node-c", "DNS:x"), false};
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ(status_of(b.url(), ca.cert(), node_a, "POST", route, body), 200);
  EXPECT_EQ(status_of(b.url(), ca.cert(), node_c, "POST", route, body), 403) << "another node's agent";
  EXPECT_EQ(status_of(b.url(), ca.cert(), {"nothing", std::nullopt, false}, "POST", route, body), 401);
}

}  // namespace
}  // namespace conduit
