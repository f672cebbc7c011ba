// The REST API as a client meets it: a real conduit-agent on loopback, bad requests refused with the right
// status and a JSON error while changing nothing, the token required everywhere but the health routes, and
// agent/openapi.yaml matching the routes the agent serves, down to the shape of what they answer.
#include <gtest/gtest.h>
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent_process.h"
#include "conduit/crc32c.h"
#include "file_bytes.h"
#include "openapi_spec.h"

namespace conduit {
namespace {

using testing::AgentProcess;
using testing::read_file;
using testing::small_tcp_agent;
using testing::spec_operations;
using json = nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

// Every (method, path template) the agent serves (agent/src/rest/). The OpenAPI test proves the spec lists
// exactly these.
const std::set<std::string> kServedRoutes = {
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "GET /v1/node",
    "GET /v1/regions",
    "POST /v1/regions",
    "GET /v1/regions/{name}",
    "DELETE /v1/regions/{name}",
    "POST /v1/regions/{name}/save",
    "GET /v1/regions/{name}/manifest",
    "PUT /v1/regions/{name}/manifest",
    "GET /v1/regions/{name}/checksum",
    "GET /v1/regions/{name}/version",
    "POST /v1/regions/{name}/acks",
    "GET /v1/regions/{name}/acks",
    "POST /v1/regions/{name}/grants",
    "POST /v1/regions/{name}/staging",
    "POST /v1/files/stat",
    "GET /v1/grants",
    "POST /v1/grants",
    "GET /v1/grants/{id}",
    "DELETE /v1/grants/{id}",
    "POST /v1/grants/{id}/landed",
    "POST /v1/grants/{id}/commit",
    "POST /v1/grants/{id}/checksum",
    "POST /v1/grants/{id}/renew",
    "GET /v1/transfers",
    "POST /v1/transfers",
    "GET /v1/transfers/{id}",
    "DELETE /v1/transfers/{id}",
    "POST /v1/reshard/plans",
};

struct Reply {
  int status = 0;  // 0: no answer
  json body;       // null when empty or not JSON
  std::string text;
  httplib::Headers headers;

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::string code() const {
    return body.is_object() && body.contains("error") ? body["error"].value("code", "") : "";
  }
};

// Any method, path, body, content type and headers, with nothing added but what HTTP needs.
Reply send(const std::string& url, const std::string& method, const std::string& path,
           const std::string& body = "", const std::string& content_type = "",
           const httplib::Headers& headers = {}) {
  httplib::Client client(url);
  client.set_read_timeout(30, 0);
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.headers = headers;
  req.body = body;
  if (!content_type.empty()) req.set_header("Content-Type", content_type);
  auto res = client.send(req);
  Reply reply;
  if (!res) return reply;
  reply.status = res->status;
  reply.text = res->body;
  reply.headers = res->headers;
  reply.body = json::parse(res->body, nullptr, false);
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

httplib::Headers bearer(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

// An error answer as the spec promises it: JSON, {"error": {"code", "message"}}.
void expect_json_error(const Reply& r, const std::string& what) {
  EXPECT_EQ(r.header("Content-Type"), "application/json") << what;
  ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << what << ": " << r.text;
  EXPECT_TRUE(r.body["error"]["code"].is_string()) << what << ": " << r.text;
  EXPECT_TRUE(r.body["error"]["message"].is_string()) << what << ": " << r.text;
}

// What a refused request must leave alone: regions, grants, transfers and the data directory.
json snapshot(AgentProcess& agent) {
  json files = json::array();
  for (const auto& entry : std::filesystem::recursive_directory_iterator(agent.data_dir())) {
    files.push_back(entry.path().lexically_relative(agent.data_dir()).string());
  }
  std::sort(files.begin(), files.end());
  return {{"regions", agent.get("/v1/regions").body},
          {"grants", agent.get("/v1/grants").body},
          {"transfers", agent.get("/v1/transfers").body},
          {"files", files}};
}

bool gpu_available(AgentProcess& agent) {
  for (const auto& check : agent.get("/v1/node").body.value("checks", json::array())) {
    if (check.value("name", "") == "gpu") return check.value("ok", false);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------
// 1. Bad requests: each answers its status and error code and changes nothing.

struct BadRequest {
  std::string what;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string code;
  std::string content_type = "application/json";
};

TEST(AgentApi, BadRequestsAnswerTheirErrorAndChangeNothing) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.post("/v1/regions", {{"name", "existing"}, {"bytes", 4096}}).status, 201);

  const std::string name64(64, 'a');
  const std::string oversized = R"({"name":"big","bytes":4096,"pad":")" + std::string(2 * MiB, 'x') + "\"}";
  const std::string key_wrong_provider =
      R"({"provider":"bogus","base":"0","length":4096,"rails":[{"address":"00","key":"1"}]})";
  std::vector<BadRequest> cases = {
      {"malformed JSON", "POST", "/v1/regions", R"({"name": "a",)", 400, "MalformedJson"},
      {"empty body", "POST", "/v1/regions", "", 400, "MalformedJson"},
      {"body not an object", "POST", "/v1/regions", R"(["a"])", 400, "InvalidArgument"},
      {"unknown field", "POST", "/v1/regions", R"({"name":"a","bytes":4096,"colour":"red"})", 400,
       "InvalidArgument"},
      {"bytes as a string", "POST", "/v1/regions", R"({"name":"a","bytes":"4096"})", 400, "InvalidArgument"},
      {"bytes as a float", "POST", "/v1/regions", R"({"name":"a","bytes":4096.5})", 400, "InvalidArgument"},
      {"name as a number", "POST", "/v1/regions", R"({"name":7,"bytes":4096})", 400, "InvalidArgument"},
      {"missing name", "POST", "/v1/regions", R"({"bytes":4096})", 400, "InvalidArgument"},
      {"name with upper case", "POST", "/v1/regions", R"({"name":"Upper","bytes":4096})", 400,
       "InvalidArgument"},
      {"name with underscore", "POST", "/v1/regions", R"({"name":"under_score","bytes":4096})", 400,
       "InvalidArgument"},
      {"name of 64 characters", "POST", "/v1/regions", R"({"name":")" + name64 + R"(","bytes":4096})", 400,
       "InvalidArgument"},
      {"empty name", "POST", "/v1/regions", R"({"name":"","bytes":4096})", 400, "InvalidArgument"},
      {"bytes 0", "POST", "/v1/regions", R"({"name":"a","bytes":0})", 400, "InvalidArgument"},
      {"bytes negative", "POST", "/v1/regions", R"({"name":"a","bytes":-4096})", 400, "InvalidArgument"},
      {"bytes over the cap", "POST", "/v1/regions", R"({"name":"a","bytes":2147483648})", 422,
       "ResourceExhausted"},
      {"unknown memory kind", "POST", "/v1/regions", R"({"name":"a","bytes":4096,"memory":"tpu"})", 400,
       "InvalidArgument"},
      {"both bytes and file", "POST", "/v1/regions", R"({"name":"a","bytes":4096,"file":"x.bin"})", 400,
       "InvalidArgument"},
      {"neither bytes nor file", "POST", "/v1/regions", R"({"name":"a"})", 400, "InvalidArgument"},
      {"mode other than load", "POST", "/v1/regions", R"({"name":"a","file":"x.bin","mode":"mmap"})", 400,
       "InvalidArgument"},
      {"file escaping with ..", "POST", "/v1/regions", R"({"name":"a","file":"../etc/passwd"})", 400,
       "InvalidArgument"},
      {"absolute file", "POST", "/v1/regions", R"({"name":"a","file":"/etc/passwd"})", 400,
       "InvalidArgument"},
      {"file escaping through a subdirectory", "POST", "/v1/regions", R"({"name":"a","file":"sub/../../x"})",
       400, "InvalidArgument"},
      {"missing file", "POST", "/v1/regions", R"({"name":"a","file":"missing.bin"})", 404, "NotFound"},
      {"duplicate name", "POST", "/v1/regions", R"({"name":"existing","bytes":4096})", 409, "AlreadyExists"},
      {"body over the size limit", "POST", "/v1/regions", oversized, 413, "PayloadTooLarge"},
      {"text/plain body", "POST", "/v1/regions", R"({"name":"a","bytes":4096})", 415, "UnsupportedMediaType",
       "text/plain"},
      {"form body", "POST", "/v1/regions", "name=a&bytes=4096", 415, "UnsupportedMediaType",
       "application/x-www-form-urlencoded"},
      {"unknown route", "GET", "/v1/nope", "", 404, "RouteNotFound"},
      {"unknown route outside /v1", "GET", "/nope", "", 404, "RouteNotFound"},
      {"wrong method", "PUT", "/v1/regions", R"({"name":"a","bytes":4096})", 405, "MethodNotAllowed"},
      {"wrong method without a body", "PATCH", "/v1/regions/existing", "", 405, "MethodNotAllowed"},
      {"get of an invalid name", "GET", "/v1/regions/Upper", "", 400, "InvalidArgument"},
      {"get of an unknown region", "GET", "/v1/regions/ghost", "", 404, "NotFound"},
      {"delete of an unknown region", "DELETE", "/v1/regions/ghost", "", 404, "NotFound"},
      {"delete of an invalid name", "DELETE", "/v1/regions/under_score", "", 400, "InvalidArgument"},
      {"save escaping the data dir", "POST", "/v1/regions/existing/save", R"({"file":"../x.bin"})", 400,
       "InvalidArgument"},
      {"save to an absolute path", "POST", "/v1/regions/existing/save", R"({"file":"/tmp/x.bin"})", 400,
       "InvalidArgument"},
      {"save with an unknown field", "POST", "/v1/regions/existing/save", R"({"file":"x.bin","sync":false})",
       400, "InvalidArgument"},
      {"save of an unknown region", "POST", "/v1/regions/ghost/save", R"({"file":"x.bin"})", 404, "NotFound"},
      {"checksum with a non-numeric slice", "GET", "/v1/regions/existing/checksum?slice=abc", "", 400,
       "InvalidArgument"},
      {"checksum with a negative offset", "GET", "/v1/regions/existing/checksum?offset=-1", "", 400,
       "InvalidArgument"},
      {"checksum with slice 0", "GET", "/v1/regions/existing/checksum?slice=0", "", 400, "InvalidArgument"},
      {"checksum with an unknown parameter", "GET", "/v1/regions/existing/checksum?from=0", "", 400,
       "InvalidArgument"},
      {"checksum past the end", "GET", "/v1/regions/existing/checksum?offset=8192", "", 400,
       "InvalidArgument"},
      // A parameter a route does not read is refused, never silently ignored (the probe's ?namespace= on a
      // region, which scopes nothing there).
      {"region with a namespace parameter", "GET", "/v1/regions/existing?namespace=team-a", "", 400,
       "InvalidArgument"},
      {"region list with a parameter", "GET", "/v1/regions?limit=5", "", 400, "InvalidArgument"},
      {"transfer start with a namespace parameter", "POST", "/v1/transfers?namespace=a",
       R"({"source":{"region":"existing"},"targets":[]})", 400, "InvalidArgument"},
      {"health with a parameter", "GET", "/healthz?verbose=1", "", 400, "InvalidArgument"},
      {"checksum of an unknown region", "GET", "/v1/regions/ghost/checksum", "", 404, "NotFound"},
      {"grant on an unknown region", "POST", "/v1/regions/ghost/grants",
       R"({"access":"write","ttlSeconds":60})", 404, "NotFound"},
      {"grant range outside the region", "POST", "/v1/regions/existing/grants",
       R"({"offset":4000,"length":200,"access":"write","ttlSeconds":60})", 400, "InvalidArgument"},
      {"grant offset past the end", "POST", "/v1/regions/existing/grants",
       R"({"offset":8192,"access":"write","ttlSeconds":60})", 400, "InvalidArgument"},
      {"grant with unknown access", "POST", "/v1/regions/existing/grants", R"({"access":"execute"})", 400,
       "InvalidArgument"},
      {"grant without access", "POST", "/v1/regions/existing/grants", R"({"ttlSeconds":60})", 400,
       "InvalidArgument"},
      {"grant with ttl 0", "POST", "/v1/regions/existing/grants", R"({"access":"read","ttlSeconds":0})", 400,
       "InvalidArgument"},
      {"grant with an unknown field", "POST", "/v1/regions/existing/grants", R"({"access":"read","key":"x"})",
       400, "InvalidArgument"},
      {"revoke of an unknown grant", "DELETE", "/v1/grants/g-nope", "", 404, "NotFound"},
      {"get of an unknown grant", "GET", "/v1/grants/g-nope", "", 404, "NotFound"},
      {"get of an unknown transfer", "GET", "/v1/transfers/t-999999", "", 404, "NotFound"},
      {"cancel of an unknown transfer", "DELETE", "/v1/transfers/t-999999", "", 404, "NotFound"},
      {"transfer with zero targets", "POST", "/v1/transfers",
       R"({"source":{"region":"existing"},"targets":[]})", 400, "InvalidArgument"},
      {"transfer with a malformed grant key", "POST", "/v1/transfers",
       R"({"source":{"region":"existing"},"targets":[{"grant":{"provider":"tcp","base":"x"}}]})", 400,
       "InvalidArgument"},
      {"transfer with a key for a provider the agent lacks", "POST", "/v1/transfers",
       R"({"source":{"region":"existing"},"targets":[{"grant":)" + key_wrong_provider + "}]}", 400,
       "InvalidArgument"},
      {"transfer from an unknown region", "POST", "/v1/transfers",
       R"({"source":{"region":"ghost"},"targets":[{"grant":)" + key_wrong_provider + "}]}", 404, "NotFound"},
      {"transfer with an unknown field", "POST", "/v1/transfers",
       R"({"source":{"region":"existing"},"targets":[{"grant":)" + key_wrong_provider + "}],\"priority\":1}",
       400, "InvalidArgument"},
  };
  if (!gpu_available(agent)) {
    cases.push_back({"cuda memory without CUDA", "POST", "/v1/regions",
                     R"({"name":"a","bytes":4096,"memory":"cuda:0"})", 422, "Unsupported"});
  }

  const json before = snapshot(agent);
  for (const auto& c : cases) {
    const std::string what = c.what + " (" + c.method + " " + c.path + ")";
    const Reply r = send(agent.url(), c.method, c.path, c.body, c.method == "POST" ? c.content_type : "",
                         bearer(agent.token()));
    EXPECT_EQ(r.status, c.status) << what << ": " << r.text;
    EXPECT_EQ(r.code(), c.code) << what << ": " << r.text;
    expect_json_error(r, what);
    EXPECT_EQ(snapshot(agent), before) << what << " changed the agent's state";
  }
}

TEST(AgentApi, MethodNotAllowedListsTheAllowedMethods) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  const Reply r = send(agent.url(), "DELETE", "/v1/node", "", "", bearer(agent.token()));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "GET");
}

// ---------------------------------------------------------------------------------------------------------
// 2. The token: required on every route but the health checks.

// A concrete request for a route template: placeholders point at objects that exist (or ids that do not:
// auth is decided before any lookup).
std::string concrete(std::string path) {
  for (const auto& [from, to] : {std::pair{"{name}", "existing"}, std::pair{"{id}", "x-1"}}) {
    if (auto at = path.find(from); at != std::string::npos) path.replace(at, std::string(from).size(), to);
  }
  return path;
}

TEST(AgentApi, EveryRouteButHealthNeedsTheToken) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.post("/v1/regions", {{"name", "existing"}, {"bytes", 4096}}).status, 201);
  const json before = snapshot(agent);

  const std::vector<std::pair<std::string, httplib::Headers>> refused = {
      {"no Authorization header", {}},
      {"a wrong token", bearer("wrong")},
      {"the token with a byte more", bearer(agent.token() + "x")},
      {"a prefix of the token", bearer(agent.token().substr(0, agent.token().size() - 1))},
      {"Basic credentials", {{"Authorization", "Basic x"}}},
      {"the token without a scheme", {{"Authorization", agent.token()}}},
      {"Bearer with no token", {{"Authorization", "Bearer "}}},
  };
  for (const auto& route : kServedRoutes) {
    const std::string method = route.substr(0, route.find(' '));
    const std::string path = concrete(route.substr(route.find(' ') + 1));
    const bool is_public = path == "/healthz" || path == "/readyz" || path == "/metrics";
    // A body that would succeed if it were let in, so a 401 is the only thing keeping it out.
    const std::string body = method == "POST" ? R"({"name":"sneaky","bytes":4096})" : "";
    for (const auto& [what, headers] : refused) {
      const Reply r = send(agent.url(), method, path, body, body.empty() ? "" : "application/json", headers);
      const std::string label = route + " with " + what;
      if (is_public) {
        EXPECT_EQ(r.status, 200) << label << ": " << r.text;
        continue;
      }
      EXPECT_EQ(r.status, 401) << label << ": " << r.text;
      EXPECT_EQ(r.code(), "Unauthorized") << label;
      EXPECT_TRUE(r.header("WWW-Authenticate").starts_with("Bearer")) << label;
      expect_json_error(r, label);
    }
  }
  // Unknown routes need the token too, so an anonymous caller cannot map the API.
  EXPECT_EQ(send(agent.url(), "GET", "/v1/nope").status, 401);
  EXPECT_EQ(snapshot(agent), before);

  // The scheme is case-insensitive (RFC 7235).
  EXPECT_EQ(
      send(agent.url(), "GET", "/v1/regions", "", "", {{"Authorization", "bearer " + agent.token()}}).status,
      200);
}

TEST(AgentApi, HealthReadinessAndMetricsNeedNoToken) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  const Reply health = send(agent.url(), "GET", "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, json({{"status", "ok"}}));
  EXPECT_EQ(send(agent.url(), "GET", "/readyz").status, 200);
  const Reply metrics = send(agent.url(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_TRUE(metrics.header("Content-Type").starts_with("text/plain")) << metrics.header("Content-Type");
  EXPECT_NE(metrics.text.find("conduit_agent_"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// 3. agent/openapi.yaml against the live agent.

YAML::Node resolve(const YAML::Node& spec, YAML::Node node) {
  while (node.IsMap() && node["$ref"]) {
    const std::string ref = node["$ref"].as<std::string>();  // "#/components/schemas/Region"
    YAML::Node target = YAML::Clone(spec);
    std::size_t at = 2;
    while (at < ref.size()) {
      const std::size_t slash = std::min(ref.find('/', at), ref.size());
      target = target[ref.substr(at, slash - at)];
      at = slash + 1;
    }
    if (!target) return target;
    node = target;
  }
  return node;
}

// The subset of OpenAPI schema the spec uses: $ref, type, required, properties, items, nullable, oneOf.
// Returns the first mismatch as "path: why", or "" when `value` fits.
std::string schema_mismatch(const YAML::Node& spec, const YAML::Node& schema_ref, const json& value,
                            const std::string& at) {
  const YAML::Node schema = resolve(spec, schema_ref);
  if (!schema) return at + ": unresolvable $ref";
  if (value.is_null() && schema["nullable"] && schema["nullable"].as<bool>()) return "";
  if (schema["oneOf"]) {
    for (const auto& option : schema["oneOf"]) {
      if (schema_mismatch(spec, option, value, at).empty()) return "";
    }
    return at + ": matches none of oneOf";
  }
  const std::string type = schema["type"] ? schema["type"].as<std::string>() : "";
  const bool fits =
      type.empty() || (type == "object" && value.is_object()) || (type == "array" && value.is_array()) ||
      (type == "string" && value.is_string()) || (type == "boolean" && value.is_boolean()) ||
      (type == "integer" && value.is_number_integer()) || (type == "number" && value.is_number());
  if (!fits) return at + ": expected " + type + ", got " + value.dump();
  if (value.is_object()) {
    for (const auto& required : schema["required"]) {
      if (!value.contains(required.as<std::string>())) return at + ": missing " + required.as<std::string>();
    }
    for (const auto& property : schema["properties"]) {
      const std::string name = property.first.as<std::string>();
      if (!value.contains(name)) continue;
      if (auto why = schema_mismatch(spec, property.second, value[name], at + "." + name); !why.empty())
        return why;
    }
  }
  if (value.is_array() && schema["items"]) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (auto why = schema_mismatch(spec, schema["items"], value[i], at + "[" + std::to_string(i) + "]");
          !why.empty()) {
        return why;
      }
    }
  }
  return "";
}

TEST(AgentApi, OpenApiSpecListsExactlyTheServedRoutes) {
  const YAML::Node spec = testing::agent_openapi();
  ASSERT_EQ(spec["openapi"].as<std::string>(), "3.0.3");
  std::set<std::string> in_spec;
  for (const auto& op : spec_operations(spec)) {
    EXPECT_TRUE(in_spec.insert(op.method + " " + op.path).second) << "twice in the spec: " << op.path;
  }
  EXPECT_EQ(in_spec, kServedRoutes);
}

TEST(AgentApi, EveryOperationInTheSpecAnswersAsTheSpecSays) {
  const YAML::Node spec = testing::agent_openapi();
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());

  // Objects for the placeholders: a source and a target region, a grant to keep and one to revoke, a region
  // to delete, and a transfer between the two regions of this very agent.
  for (const auto* name : {"spec-source", "spec-target", "spec-doomed"}) {
    ASSERT_EQ(agent.post("/v1/regions", {{"name", name}, {"bytes", MiB}}).status, 201) << name;
  }
  const auto make_grant = [&] {
    return testing::region_grant(agent, "spec-target", {{"access", "write"}, {"ttlSeconds", 600}});
  };
  const json grant = make_grant();
  const json doomed_grant = make_grant();
  // A grant that saves a file, all of whose bytes were reported landed: ready to commit.
  auto saving = agent.post("/v1/regions/spec-target/grants",
                           {{"access", "write"}, {"length", 4096}, {"save", {{"file", "spec-commit.bin"}}}});
  ASSERT_EQ(saving.status, 201) << saving.body.dump();
  const std::string saving_id = saving.body["id"];
  ASSERT_EQ(agent.post("/v1/grants/" + saving_id + "/landed", {{"offset", 0}, {"length", 4096}}).status, 200);
  const json transfer_body = {{"source", {{"region", "spec-source"}}},
                              {"targets", {{{"grant", grant["key"]}}}}};
  auto started = agent.post("/v1/transfers", transfer_body);
  ASSERT_EQ(started.status, 202) << started.body.dump();
  const std::string transfer_id = started.body["id"];
  const json manifest = {
      {"tensors", {{{"name", "w"}, {"dtype", "U8"}, {"shape", {16}}, {"offset", 0}, {"length", 16}}}}};
  ASSERT_EQ(agent.put("/v1/regions/spec-source/manifest", manifest).status, 200);

  struct Call {
    std::map<std::string, std::string> placeholders;
    std::string query;
    json body;
  };
  const std::map<std::string, Call> calls = {
      {"POST /v1/regions", {{}, "", {{"name", "spec-new"}, {"bytes", 4096}, {"memory", "host"}}}},
      {"GET /v1/regions/{name}", {{{"name", "spec-source"}}, "", nullptr}},
      {"DELETE /v1/regions/{name}", {{{"name", "spec-doomed"}}, "", nullptr}},
      {"POST /v1/regions/{name}/save", {{{"name", "spec-source"}}, "", {{"file", "spec-source.bin"}}}},
      {"GET /v1/regions/{name}/checksum",
       {{{"name", "spec-source"}}, "?offset=0&length=0&slice=65536", nullptr}},
      {"GET /v1/regions/{name}/version", {{{"name", "spec-source"}}, "?after=0", nullptr}},
      {"POST /v1/regions/{name}/acks",
       {{{"name", "spec-source"}}, "", {{"reader", "spec/1"}, {"version", 0}}}},
      {"GET /v1/regions/{name}/acks", {{{"name", "spec-source"}}, "?version=0&readers=1", nullptr}},
      {"PUT /v1/regions/{name}/manifest", {{{"name", "spec-source"}}, "", manifest}},
      {"GET /v1/regions/{name}/manifest", {{{"name", "spec-source"}}, "", nullptr}},
      {"POST /v1/regions/{name}/grants",
       {{{"name", "spec-source"}},
        "",
        {{"offset", 0}, {"length", 4096}, {"access", "read"}, {"ttlSeconds", 60}}}},
      {"POST /v1/regions/{name}/staging",
       {{{"name", "spec-source"}}, "", {{"offset", 0}, {"length", 4096}, {"direction", "toDevice"}}}},
      {"POST /v1/files/stat", {{}, "", {{"path", "spec-source.bin"}}}},
      {"POST /v1/grants",
       {{}, "", {{"ttlSeconds", 60}, {"save", {{"file", "spec-ring.bin"}, {"bytes", 4096}}}}}},
      {"POST /v1/grants/{id}/landed", {{{"id", grant["id"]}}, "", {{"offset", 0}, {"length", 4096}}}},
      {"POST /v1/grants/{id}/commit", {{{"id", saving_id}}, "", {{"bytes", 4096}}}},
      {"POST /v1/grants/{id}/checksum",
       {{{"id", grant["id"]}}, "", {{"rangesPacked", "AAAAAAAAAAAAEAAAAAAAAA=="}}}},  // [0, +4096)
      {"POST /v1/grants/{id}/renew", {{{"id", grant["id"]}}, "", {{"ttlSeconds", 3600}}}},
      {"GET /v1/grants/{id}", {{{"id", grant["id"]}}, "", nullptr}},
      {"DELETE /v1/grants/{id}", {{{"id", doomed_grant["id"]}}, "", nullptr}},
      {"POST /v1/transfers", {{}, "", transfer_body}},
      {"GET /v1/transfers/{id}", {{{"id", transfer_id}}, "", nullptr}},
      {"DELETE /v1/transfers/{id}", {{{"id", transfer_id}}, "", nullptr}},
      {"POST /v1/reshard/plans",
       {{},
        "",
        {{"sources", {{{"manifest", manifest}, {"rate", 1e9}}}}, {"targets", {{{"manifest", manifest}}}}}}},
  };

  for (const auto& op : spec_operations(spec)) {
    const std::string route = op.method + " " + op.path;
    Call call;
    if (auto it = calls.find(route); it != calls.end()) call = it->second;
    std::string path = op.path;
    for (const auto& [placeholder, value] : call.placeholders) {
      const std::string braced = "{" + placeholder + "}";
      path.replace(path.find(braced), braced.size(), value);
    }
    ASSERT_EQ(path.find('{'), std::string::npos) << route << ": the test has no value for a placeholder";
    const std::string body = call.body.is_null() ? "" : call.body.dump();
    const Reply r = send(agent.url(), op.method, path + call.query, body,
                         body.empty() ? "" : "application/json", bearer(agent.token()));

    ASSERT_NE(r.status, 0) << route << ": no answer";
    EXPECT_NE(r.code(), "RouteNotFound") << route << " is in the spec but not served";
    EXPECT_NE(r.code(), "MethodNotAllowed") << route << " is in the spec but not served";
    const YAML::Node response = resolve(spec, op.responses[std::to_string(r.status)]);
    if (!response) {
      ADD_FAILURE() << route << " answered " << r.status << ", which the spec does not list: " << r.text;
      continue;
    }
    EXPECT_LT(r.status, 400) << route << " failed: " << r.text;
    if (!response["content"]) {
      EXPECT_TRUE(r.text.empty()) << route << ": the spec promises no body";
      continue;
    }
    const auto media = response["content"].begin();
    const std::string media_type = media->first.as<std::string>();
    EXPECT_TRUE(r.header("Content-Type").starts_with(media_type))
        << route << ": " << r.header("Content-Type");
    if (media_type == "application/json") {
      EXPECT_EQ(schema_mismatch(spec, media->second["schema"], r.body, "body"), "")
          << route << ": " << r.text;
    }
  }

  // Errors fit the spec's Error schema too.
  const Reply missing = send(agent.url(), "GET", "/v1/regions/ghost", "", "", bearer(agent.token()));
  EXPECT_EQ(schema_mismatch(spec, spec["components"]["schemas"]["Error"], missing.body, "body"), "")
      << missing.text;
}

// ---------------------------------------------------------------------------------------------------------
// 4. Regions through the API: load a file, list, get, checksum, save, load the copy, delete.

TEST(AgentApi, RegionLoadSaveRoundTripIsByteIdentical) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  const std::uint64_t size = 3 * MiB + 123;  // a short last slice
  const auto data = testing::write_seeded(agent.data_dir() / "in.bin", size, 42);

  auto loaded = agent.post("/v1/regions", {{"name", "src"}, {"file", "in.bin"}, {"mode", "load"}});
  ASSERT_EQ(loaded.status, 201) << loaded.body.dump();
  EXPECT_EQ(loaded.body["name"], "src");
  EXPECT_EQ(loaded.body["bytes"], size);
  EXPECT_EQ(loaded.body["memory"], "host");
  // Which rails the region is registered on: tcp's rails share one interface, so all of them, no NIC named.
  ASSERT_EQ(loaded.body["rails"].size(), 1u) << loaded.body.dump();
  EXPECT_EQ(loaded.body["rails"][0]["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(loaded.body["rails"][0]["rails"], nlohmann::json::array({0}));
  EXPECT_EQ(loaded.body["rails"][0]["nics"], nlohmann::json::array());
  EXPECT_NE(loaded.body["rails"][0]["why"].get<std::string>().find("one interface"), std::string::npos);

  auto listed = agent.get("/v1/regions");
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body["items"].size(), 1u);
  EXPECT_EQ(listed.body["items"][0]["name"], "src");
  auto got = agent.get("/v1/regions/src");
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body["bytes"], size);

  auto sums = agent.get("/v1/regions/src/checksum?slice=" + std::to_string(MiB));
  ASSERT_EQ(sums.status, 200) << sums.body.dump();
  EXPECT_EQ(sums.body["length"], size);
  EXPECT_EQ(sums.body["crc32c"].get<std::vector<std::uint32_t>>(), crc32c_slices(data, MiB));
  auto part = agent.get("/v1/regions/src/checksum?offset=4096&length=8192&slice=8192");
  ASSERT_EQ(part.status, 200) << part.body.dump();
  EXPECT_EQ(part.body["crc32c"].get<std::vector<std::uint32_t>>(),
            std::vector<std::uint32_t>{crc32c(std::span(data).subspan(4096, 8192))});

  auto saved = agent.post("/v1/regions/src/save", {{"file", "copy.bin"}});
  ASSERT_EQ(saved.status, 200) << saved.body.dump();
  EXPECT_EQ(saved.body, json({{"region", "src"}, {"file", "copy.bin"}, {"bytes", size}}));
  EXPECT_EQ(read_file(agent.data_dir() / "copy.bin"), data);

  auto copy = agent.post("/v1/regions", {{"name", "copy"}, {"file", "copy.bin"}});
  ASSERT_EQ(copy.status, 201) << copy.body.dump();
  EXPECT_EQ(agent.get("/v1/regions/copy/checksum").body["crc32c"], sums.body["crc32c"]);

  for (const auto* name : {"src", "copy"}) {
    EXPECT_EQ(
        send(agent.url(), "DELETE", std::string("/v1/regions/") + name, "", "", bearer(agent.token())).status,
        204);
    EXPECT_EQ(agent.get(std::string("/v1/regions/") + name).status, 404);
  }
  EXPECT_EQ(agent.get("/v1/regions").body, json({{"items", json::array()}}));
}

TEST(AgentApi, RegionInUseByAGrantCannotBeDeletedUntilRevoked) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.post("/v1/regions", {{"name", "kv"}, {"bytes", MiB}, {"memory", "host"}}).status, 201);
  auto granted = agent.post("/v1/regions/kv/grants", {{"access", "write"}, {"ttlSeconds", 60}});
  ASSERT_EQ(granted.status, 201) << granted.body.dump();
  EXPECT_EQ(granted.body["length"], MiB);  // no length: the rest of the region
  EXPECT_EQ(granted.body["access"], "write");
  const std::string id = granted.body["id"];

  auto in_use = agent.del("/v1/regions/kv");
  EXPECT_EQ(in_use.status, 409);
  EXPECT_EQ(in_use.body["error"]["code"], "Conflict");
  auto grants = agent.get("/v1/grants");
  ASSERT_EQ(grants.body["items"].size(), 1u);
  EXPECT_EQ(grants.body["items"][0]["id"], id);
  EXPECT_EQ(agent.get("/v1/grants/" + id).body["region"], "kv");

  EXPECT_EQ(agent.del("/v1/grants/" + id).status, 204);
  EXPECT_EQ(agent.del("/v1/grants/" + id).status, 404);
  EXPECT_EQ(agent.del("/v1/regions/kv").status, 204);
}

}  // namespace
}  // namespace conduit
