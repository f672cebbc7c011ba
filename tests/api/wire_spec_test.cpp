// The wire types against agent/openapi.yaml itself: every body a client builds validates against its schema,
// equals the spec's example and reads back through the agent's strict reader, and every body and answer the
// spec describes decodes and re-encodes to itself, so a field renamed on either side (spec or code) fails
// here.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <variant>
#include <vector>

#include "build_paths.h"
#include "conduit/api/errors.h"
#include "conduit/api/grant.h"
#include "conduit/api/reasons.h"
#include "conduit/api/reshard_wire.h"
#include "conduit/api/transfer.h"
#include "conduit/api/wire.h"
#include "controller/store/yaml_json_reader.h"

namespace conduit::api {
namespace {

using nlohmann::json;

const json& spec() {
  static const json doc = [] {
    std::ifstream in(conduit::testing::source_dir() + "/agent/openapi.yaml");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = controller::parse_yaml(text);
    EXPECT_TRUE(parsed) << parsed.error().message;
    return parsed ? *parsed : json::object();
  }();
  return doc;
}

const json& schema(const std::string& name) { return spec()["components"]["schemas"][name]; }

const json& resolve(const json& s) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    const std::string prefix = "#/components/schemas/";
    EXPECT_EQ(ref.rfind(prefix, 0), 0u) << ref;
    return resolve(schema(ref.substr(prefix.size())));
  }
  return s;
}

// The subset of OpenAPI 3.0 schema keywords agent/openapi.yaml uses; each failure names the path.
void validate(const json& value, const json& raw, const std::string& path, std::vector<std::string>& errors) {
  const json& s = resolve(raw);
  if (s.contains("oneOf")) {
    int matched = 0;
    for (const auto& alternative : s["oneOf"]) {
      std::vector<std::string> e;
      validate(value, alternative, path, e);
      if (e.empty()) ++matched;
    }
    if (matched != 1) errors.push_back(path + ": matches " + std::to_string(matched) + " of oneOf");
    return;
  }
  if (value.is_null() && s.value("nullable", false)) return;
  const std::string type = s.value("type", "");
  auto fail = [&](const std::string& why) {
    errors.push_back(path + ": " + why + " (" + value.dump() + ")");
  };
  if (type == "object") {
    if (!value.is_object()) return fail("not an object");
    const json required = s.value("required", json::array());
    for (const auto& r : required) {
      if (!value.contains(r.get<std::string>())) fail("lacks required " + r.get<std::string>());
    }
    const json props = s.value("properties", json::object());
    for (const auto& [key, v] : value.items()) {
      if (props.contains(key)) {
        validate(v, props[key], path + "." + key, errors);
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        fail("unknown field " + key);
      }
    }
  } else if (type == "array") {
    if (!value.is_array()) return fail("not an array");
    if (s.contains("minItems") && value.size() < s["minItems"].get<std::size_t>()) fail("too few items");
    if (s.contains("maxItems") && value.size() > s["maxItems"].get<std::size_t>()) fail("too many items");
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (s.contains("items")) validate(value[i], s["items"], path + "[" + std::to_string(i) + "]", errors);
    }
  } else if (type == "string") {
    if (!value.is_string()) return fail("not a string");
    const std::string text = value;
    if (s.contains("minLength") && text.size() < s["minLength"].get<std::size_t>()) fail("too short");
    if (s.contains("maxLength") && text.size() > s["maxLength"].get<std::size_t>()) fail("too long");
    if (s.contains("pattern") && !std::regex_search(text, std::regex(s["pattern"].get<std::string>()))) {
      fail("does not match " + s["pattern"].get<std::string>());
    }
  } else if (type == "integer") {
    if (!value.is_number_integer()) return fail("not an integer");
  } else if (type == "number") {
    if (!value.is_number()) return fail("not a number");
  } else if (type == "boolean") {
    if (!value.is_boolean()) return fail("not a boolean");
  }
  if (value.is_number()) {
    if (s.contains("minimum") && value.get<double>() < s["minimum"].get<double>()) fail("below minimum");
    if (s.contains("maximum") && value.get<double>() > s["maximum"].get<double>()) fail("above maximum");
  }
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), value) == s["enum"].end()) {
    fail("not one of " + s["enum"].dump());
  }
}

std::vector<std::string> errors_of(const json& value, const std::string& schema_name) {
  std::vector<std::string> errors;
  validate(value, schema(schema_name), schema_name, errors);
  return errors;
}

// An instance with every property the schema names, each from its example where the spec gives one.
json sample(const json& raw) {
  const json& s = resolve(raw);
  if (s.contains("example")) return s["example"];
  if (s.contains("enum")) return s["enum"][0];
  const std::string type = s.value("type", "");
  if (type == "object") {
    json out = json::object();
    const json props = s.value("properties", json::object());
    for (const auto& [key, p] : props.items()) out[key] = sample(p);
    return out;
  }
  if (type == "array") {
    json out = json::array();
    out.push_back(s.contains("items") ? sample(s["items"]) : json::object());
    return out;
  }
  if (type == "integer") return json(std::uint64_t{1});
  if (type == "number") return json(1.5);
  if (type == "boolean") return json(true);
  if (s.value("format", "") == "date-time") return json("2024-05-01T12:00:00Z");
  if (s.contains("pattern")) {
    const std::regex pattern(s["pattern"].get<std::string>());
    for (const char* candidate : {"a", "0", "00", "http://10.0.0.2:7070", "host"}) {
      if (std::regex_search(candidate, pattern)) return json(candidate);
    }
    ADD_FAILURE() << "no sample string for pattern " << s["pattern"];
  }
  return json("x");
}

const json& request_content(const std::string& path) {
  return spec()["paths"][path]["post"]["requestBody"]["content"]["application/json"];
}

json request_example(const std::string& path, const std::string& name = "") {
  const json& content = request_content(path);
  return name.empty() ? content["example"] : content["examples"][name]["value"];
}

// Against the schema of the body POST `path` takes (the renew route's is written inline, POST /v1/regions
// takes one of two).
std::vector<std::string> request_errors(const json& value, const std::string& path) {
  std::vector<std::string> errors;
  const json& s = request_content(path)["schema"];
  EXPECT_TRUE(s.is_object()) << "no request body schema for POST " << path;
  validate(value, s, "POST " + path, errors);
  return errors;
}

// A body as a client sends it is one the spec allows, and the agent's reader (from_json) gives it back.
template <typename T>
void expect_reads_back(const T& sent, const std::string& path) {
  const json body = sent.to_json();
  EXPECT_EQ(request_errors(body, path), std::vector<std::string>{}) << body.dump();
  const auto read = T::from_json(body);
  ASSERT_TRUE(read) << path << ": " << read.error().message << "\n  " << body.dump();
  EXPECT_EQ(read->to_json(), body) << path;
}

TEST(WireSpec, TheSpecParses) {
  ASSERT_TRUE(spec().contains("components")) << "agent/openapi.yaml did not parse";
  for (const char* name : {"AllocateRegion",
                           "LoadRegion",
                           "Region",
                           "RegionList",
                           "SaveRegion",
                           "SaveResult",
                           "Checksum",
                           "StagingRequest",
                           "CreateGrant",
                           "RemoteKey",
                           "Grant",
                           "TransferRequest",
                           "TransferTarget",
                           "TransferStatus",
                           "CreateRingGrant",
                           "LandedReport",
                           "CommitRequest",
                           "GrantChecksumRequest",
                           "GrantChecksum",
                           "StatFile",
                           "Ack",
                           "Acks"}) {
    EXPECT_TRUE(schema(name).is_object()) << name << " is not in the spec";
  }
}

TEST(WireSpec, RequestBodiesAreTheSpecsExamples) {
  EXPECT_EQ(CreateRegion({"kv-cache", 1073741824, "host"}).to_json(),
            request_example("/v1/regions", "allocate"));
  EXPECT_EQ(LoadRegion({"weights", "checkpoints/step-1000.bin"}).to_json(),
            request_example("/v1/regions", "load"));
  EXPECT_EQ(SaveRegion{"checkpoints/step-1000.bin"}.to_json(), request_example("/v1/regions/{name}/save"));
  EXPECT_EQ((StagingRequest{.offset = 0, .length = 33554432, .to_device = true}.to_json()),
            request_example("/v1/regions/{name}/staging"));
  EXPECT_EQ((Ack{.reader = "node-b/4242", .version = 3}.to_json()),
            request_example("/v1/regions/{name}/acks"));
  EXPECT_EQ((GrantRequest{.offset = 0, .length = 268435456, .access = "write", .ttl_seconds = 600}.to_json()),
            request_example("/v1/regions/{name}/grants"));
}

TEST(WireSpec, RequestBodiesValidate) {
  EXPECT_EQ(errors_of(CreateRegion{"kv-cache", 4096, "cuda:0"}.to_json(), "AllocateRegion"),
            std::vector<std::string>{});
  EXPECT_EQ(errors_of(LoadRegion{"weights", "a.bin"}.to_json(), "LoadRegion"), std::vector<std::string>{});
  EXPECT_EQ(errors_of(SaveRegion{"a.bin"}.to_json(), "SaveRegion"), std::vector<std::string>{});
  EXPECT_EQ(
      errors_of(StagingRequest{.offset = 4096, .length = 1, .to_device = false}.to_json(), "StagingRequest"),
      std::vector<std::string>{});
  EXPECT_EQ(
      errors_of(GrantRequest{.offset = 1, .length = 2, .access = "read", .ttl_seconds = 60, .provider = "tcp"}
                    .to_json(),
                "CreateGrant"),
      std::vector<std::string>{});

  TransferRequest request;
  request.source_region = "weights";
  request.offset = 4096;
  request.length = 1 << 20;
  const json key = sample(schema("RemoteKey"));
  ASSERT_EQ(errors_of(key, "RemoteKey"), std::vector<std::string>{}) << key.dump();
  request.targets.push_back({.grant = key,
                             .url = "http://10.0.0.3:7070",
                             .region = "weights",
                             .resume_offset = 8192,
                             .grant_id = "g-0123456789abcdef",
                             .ring_bytes = 1 << 26,
                             .save = true,
                             .release_grant = true});
  request.targets.push_back(
      {.grant = key, .url = "", .region = "", .offset = 4096, .region_offset = 1 << 20});
  request.verify = api::Verify::Crc32c;
  request.deadline_seconds = 60;
  request.max_bytes_per_second = 1 << 30;
  request.chain = true;  // a full body for the schema check; no agent would take a Chain with a ring target
  request.follow_grant = "g-fedcba9876543210";
  request.ops = {{.source_offset = 0, .target_offset = 4096, .length = 512}};
  request.ns = "team-a";
  request.manifest = Manifest{
      .tensors = {{.name = "lm_head.weight", .dtype = "F16", .shape = {256}, .offset = 0, .length = 512}}};
  const json body = request.to_json();
  EXPECT_EQ(errors_of(body, "TransferRequest"), std::vector<std::string>{}) << body.dump();
  // Every field the spec names is one we send: a field renamed in the spec shows up here. Except opsPacked,
  // the same ops for callers holding them in arrays (the Scatter tests send it), checked on its own.
  for (const auto& [field, _] : schema("TransferRequest")["properties"].items()) {
    if (field != "opsPacked") {
      EXPECT_TRUE(body.contains(field)) << field;
    }
  }
  json packed = body;
  packed.erase("ops");
  packed["opsPacked"] = "AAAAAAAAAAAAEAAAAAAAAAACAAAAAAAA";  // {0, 4096, 512}
  EXPECT_EQ(errors_of(packed, "TransferRequest"), std::vector<std::string>{}) << packed.dump();
  for (const auto& [field, _] : schema("TransferTarget")["properties"].items()) {
    EXPECT_TRUE(body["targets"][0].contains(field)) << field;
  }
  EXPECT_EQ(body["verify"], "crc32c");
  EXPECT_EQ(body["strategy"], "chain");
  EXPECT_EQ(body["source"]["followGrant"], "g-fedcba9876543210");
  EXPECT_EQ(body["targets"][0]["resumeOffset"], 8192);
  EXPECT_EQ(body["targets"][1]["regionOffset"], 1 << 20);
}

TEST(WireSpec, RequestBodiesReadBackWhatClientsSend) {
  expect_reads_back(CreateRegion{"kv-cache", 4096, "cuda:0", "team-a", {"team-b", "*"}}, "/v1/regions");
  expect_reads_back(CreateRegion{"kv-cache", 4096}, "/v1/regions");
  expect_reads_back(CreateRegion{.name = "weights", .bytes = 4096, .shareable = true}, "/v1/regions");
  expect_reads_back(LoadRegion{"weights", "a.bin", "team-a", {"*"}}, "/v1/regions");
  expect_reads_back(LoadRegion{"weights", "a.bin"}, "/v1/regions");
  expect_reads_back(SaveRegion{"a.bin", "team-a"}, "/v1/regions/{name}/save");
  expect_reads_back(SaveRegion{"a.bin"}, "/v1/regions/{name}/save");
  expect_reads_back(StatFile{"team-a/a.bin", "team-a"}, "/v1/files/stat");
  expect_reads_back(StagingRequest{.offset = 4096, .length = 1, .to_device = false},
                    "/v1/regions/{name}/staging");
  expect_reads_back(GrantRequest{.offset = 4096,
                                 .length = 1 << 20,
                                 .access = "write",
                                 .ttl_seconds = 86400,
                                 .provider = "tcp",
                                 .save = "team-a/a.bin",
                                 .writer = "team-a/job",
                                 .peer = "node-b",
                                 .ns = "team-a",
                                 .pod = "0d1e2f3a-4b5c"},
                    "/v1/regions/{name}/grants");
  expect_reads_back(GrantRequest{.access = "read", .ttl_seconds = 1}, "/v1/regions/{name}/grants");
  expect_reads_back(RingGrantRequest{.save = "a.bin",
                                     .bytes = 1 << 30,
                                     .ttl_seconds = 60,
                                     .provider = "tcp",
                                     .peer = "node-b",
                                     .ns = "ns"},
                    "/v1/grants");
  expect_reads_back(RingGrantRequest{.save = "a.bin", .bytes = 1}, "/v1/grants");
  expect_reads_back(RenewGrant{.ttl_seconds = 86400}, "/v1/grants/{id}/renew");
  expect_reads_back(LandedReport{.offset = 1 << 20,
                                 .length = 2 << 20,
                                 .slice = 1 << 20,
                                 .crc32c = {0, 0xffffffffU},
                                 .wait_for_previous = true},
                    "/v1/grants/{id}/landed");
  expect_reads_back(LandedReport{.offset = 0, .length = 1}, "/v1/grants/{id}/landed");
  expect_reads_back(CommitRequest{.bytes = 1 << 20}, "/v1/grants/{id}/commit");
  expect_reads_back(CommitRequest{.bytes = 16, .manifest = Manifest{.tensors = {{"b", "BOOL", {16}, 0, 16}}}},
                    "/v1/grants/{id}/commit");
  expect_reads_back(CommitRequest{.bytes = 4096, .version = 7}, "/v1/grants/{id}/commit");
  expect_reads_back(GrantChecksumRequest{.ranges = {{0, 1}, {1ULL << 40, 4096}}}, "/v1/grants/{id}/checksum");
  expect_reads_back(Ack{.reader = "node-b/4242", .version = 3}, "/v1/regions/{name}/acks");

  // Absent is not 0: a grant with no length is to the end of the region, and stays so.
  const auto rest = GrantRequest::from_json(GrantRequest{.access = "write"}.to_json());
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_FALSE(rest->length.has_value());
  // Each form of POST /v1/regions reads as itself.
  const auto load = region_request_from_json(LoadRegion{"weights", "a.bin"}.to_json());
  ASSERT_TRUE(load) << load.error().message;
  EXPECT_TRUE(std::holds_alternative<LoadRegion>(*load));
  EXPECT_FALSE(CreateRegion::from_json(LoadRegion{"weights", "a.bin"}.to_json()));
  EXPECT_FALSE(LoadRegion::from_json(CreateRegion{"kv-cache", 4096}.to_json()));
  // A memfd is host memory: shareable device memory is the body's own mistake, named.
  const auto gpu = CreateRegion::from_json(
      CreateRegion{.name = "kv", .bytes = 4096, .memory = "cuda:0", .shareable = true}.to_json());
  ASSERT_FALSE(gpu);
  EXPECT_NE(gpu.error().message.find("shareable: applies only to host memory"), std::string::npos)
      << gpu.error().message;
  EXPECT_FALSE(LoadRegion::from_json({{"name", "w"}, {"file", "a.bin"}, {"shareable", true}}));
}

// Every field each request schema names is one the reader takes and the writer writes back.
TEST(WireSpec, RequestSchemasReadAndWriteBack) {
  const auto full = [](const std::string& schema_name, const auto& read) {
    const json instance = sample(schema(schema_name));
    ASSERT_EQ(errors_of(instance, schema_name), std::vector<std::string>{}) << instance.dump();
    const auto got = read(instance);
    ASSERT_TRUE(got) << schema_name << ": " << got.error().message << "\n  " << instance.dump();
    EXPECT_EQ(got->to_json(), instance) << schema_name;
  };
  full("AllocateRegion", CreateRegion::from_json);
  full("LoadRegion", LoadRegion::from_json);
  full("SaveRegion", SaveRegion::from_json);
  full("StatFile", StatFile::from_json);
  full("StagingRequest", StagingRequest::from_json);
  full("CreateGrant", GrantRequest::from_json);
  full("CreateRingGrant", RingGrantRequest::from_json);
  full("LandedReport", LandedReport::from_json);
  full("CommitRequest", CommitRequest::from_json);
  full("Ack", Ack::from_json);
  const json renew = sample(request_content("/v1/grants/{id}/renew")["schema"]);
  const auto read = RenewGrant::from_json(renew);
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->to_json(), renew);
}

// POST /v1/reshard/plans: the spec's example is a request the reader takes and the writer gives back, and a
// plan made from it answers as the ReshardPlan schema says, every property present.
TEST(WireSpec, ReshardPlanRequestAndAnswerAreTheSpecs) {
  const json example = request_example("/v1/reshard/plans");
  EXPECT_EQ(request_errors(example, "/v1/reshard/plans"), std::vector<std::string>{});
  const auto request = ReshardPlanRequest::from_json(example);
  ASSERT_TRUE(request) << request.error().message;
  json written = example;  // a manifest is written with its metadata, {} when it has none
  for (const char* side : {"sources", "targets"}) {
    for (json& rank : written[side]) rank["manifest"]["metadata"] = json::object();
  }
  EXPECT_EQ(request->to_json(), written);
  ASSERT_TRUE(request->sources[0].manifest.tensors[0].placement);
  const auto plan = plan_reshard(request->sources, request->targets);
  ASSERT_TRUE(plan) << plan.error().message;
  const json answer = reshard_plan_to_json(*plan, false);
  EXPECT_EQ(errors_of(answer, "ReshardPlan"), std::vector<std::string>{}) << answer.dump();
  for (const auto& [field, _] : schema("ReshardPlan")["properties"].items()) {
    EXPECT_TRUE(answer.contains(field)) << field;
  }
  for (const auto& [field, _] : schema("ReshardBatch")["properties"].items()) {
    EXPECT_TRUE(answer["batches"][0].contains(field)) << field;
  }
  // Rows [0, 2) of the source 0 are the first two rows of each target's two columns: one strided op of 2
  // runs of 4 bytes, 8 apart in the source and 4 in the target.
  EXPECT_EQ(answer["batches"][0]["ops"], 1);
  EXPECT_EQ(answer["batches"][0]["runs"], 2);
  const auto ops = parse_packed_scatter_ops(answer["batches"][0]["opsPacked"]);
  ASSERT_TRUE(ops) << ops.error().message;
  ASSERT_EQ(ops->size(), 1u);
  EXPECT_EQ((*ops)[0].source_offset, 0u);
  EXPECT_EQ((*ops)[0].target_offset, 0u);
  EXPECT_EQ((*ops)[0].length, 4u);
  EXPECT_EQ((*ops)[0].count, 2u);
  EXPECT_EQ((*ops)[0].source_stride, 8u);
  EXPECT_EQ((*ops)[0].target_stride, 4u);

  // A tensor with a placement is one the Tensor schema takes.
  Manifest m{.tensors = {{.name = "w", .dtype = "F32", .shape = {1, 2}, .offset = 0, .length = 8}}};
  m.tensors[0].placement = Placement{{2, 2}, {1, 0}};
  EXPECT_EQ(errors_of(m.to_json(), "Manifest"), std::vector<std::string>{}) << m.to_json().dump();

  const auto error_of = [](const json& body) {
    const auto got = ReshardPlanRequest::from_json(body);
    return got ? std::string("accepted") : got.error().message;
  };
  json negative = example;
  negative["sources"][1]["rate"] = -1;
  EXPECT_EQ(error_of(negative), "sources[1].rate: must be a number of bytes per second >= 0 (0: unknown)");
  json no_manifest = example;
  no_manifest["targets"][0].erase("manifest");
  EXPECT_EQ(error_of(no_manifest), "targets[0].manifest: is required");
  json wrong = example;
  wrong["targets"][1]["manifest"]["tensors"][0]["placement"]["start"] = {0, 3};
  EXPECT_EQ(
      error_of(wrong),
      "targets[1].manifest.tensors[0] (model.layers.0.mlp.down_proj.weight): placement: start [0,3] + shape "
      "[4,2] passes globalShape [4,4] in dimension 1");
}

// The readers refuse what the agent refuses, naming the field (the agent answers 400 with the message).
TEST(WireSpec, RequestReadersNameTheField) {
  const auto error_of = [](const auto& read, const json& body) {
    const auto got = read(body);
    return got ? std::string("accepted") : got.error().message;
  };
  EXPECT_EQ(error_of(region_request_from_json, {{"name", "a"}, {"bytes", 1}, {"file", "a.bin"}}),
            "bytes: give exactly one of bytes (allocate) or file (load)");
  EXPECT_EQ(error_of(region_request_from_json, {{"name", "a"}, {"file", "a.bin"}, {"memory", "host"}}),
            "memory: applies only with bytes");
  EXPECT_EQ(error_of(region_request_from_json, {{"name", "a"}, {"bytes", 1}, {"sharedWith", {"A"}}}),
            "sharedWith: each item must be a namespace name or \"*\"");
  EXPECT_EQ(error_of(GrantRequest::from_json, {{"access", "rw"}}),
            "access: must be \"write\" or \"read\", not \"rw\"");
  EXPECT_EQ(error_of(GrantRequest::from_json, {{"access", "write"}, {"length", 0}}),
            "length: must be positive (leave it out for the rest of the region)");
  EXPECT_EQ(error_of(GrantRequest::from_json, {{"access", "read"}, {"save", {{"file", "a.bin"}}}}),
            "save: applies only with access write");
  EXPECT_EQ(error_of(RingGrantRequest::from_json, {{"save", {{"file", "a.bin"}}}}),
            "save.bytes: is required");
  EXPECT_EQ(error_of(RenewGrant::from_json, json::object()), "ttlSeconds: is required");
  EXPECT_EQ(error_of(LandedReport::from_json, {{"offset", 0}, {"length", 1}, {"crc32c", {1U}}}),
            "slice: is required with crc32c");
  EXPECT_EQ(error_of(StagingRequest::from_json, {{"offset", 0}, {"length", 1}, {"direction", "up"}}),
            "direction: must be \"toDevice\" or \"toHost\", not \"up\"");
  EXPECT_EQ(error_of(SaveRegion::from_json, {{"file", "a.bin"}, {"colour", 1}}), "colour: unknown field");
  EXPECT_EQ(error_of(Ack::from_json, {{"reader", ""}, {"version", 1}}), "reader: must not be empty");
  EXPECT_EQ(error_of(Ack::from_json, {{"reader", std::string(254, 'r')}, {"version", 1}}),
            "reader: is longer than 253 characters");
  EXPECT_EQ(error_of(Ack::from_json, {{"reader", "r"}}), "version: is required");
}

// from_json then to_json gives back every field of a full instance of the schema, and nothing else.
template <typename Decode>
void expect_round_trip(const std::string& schema_name, Decode decode) {
  const json instance = sample(schema(schema_name));
  ASSERT_EQ(errors_of(instance, schema_name), std::vector<std::string>{}) << instance.dump();
  const json again = decode(instance);
  EXPECT_EQ(again, instance) << schema_name << "\n  spec: " << instance.dump()
                             << "\n  ours: " << again.dump();
  EXPECT_EQ(errors_of(again, schema_name), std::vector<std::string>{});
}

TEST(WireSpec, AnswersDecodeAndReencode) {
  expect_round_trip("Region", [](const json& j) { return Region::from_json(j).to_json(); });
  expect_round_trip("RegionList", [](const json& j) { return regions_to_json(regions_from_json(j)); });
  expect_round_trip("Acks", [](const json& j) { return Acks::from_json(j).to_json(); });
  expect_round_trip("SaveResult", [](const json& j) { return SaveResult::from_json(j).to_json(); });
  expect_round_trip("Grant", [](const json& j) { return Grant::from_json(j).to_json(); });
  expect_round_trip("TransferStatus", [](const json& j) { return TransferStatus::from_json(j).to_json(); });
  expect_round_trip("Checksum", [](const json& j) {
    auto c = Checksum::from_json(j);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->to_json() : json();
  });
  expect_round_trip("GrantChecksum", [](const json& j) {
    auto c = GrantChecksum::from_json(j);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->to_json() : json();
  });
}

TEST(WireSpec, TheExamplesInTheAnswersAreRead) {
  // The property examples the spec gives (memory: host, the key's provider: tcp;ofi_rxm) land in our types.
  EXPECT_EQ(Region::from_json(sample(schema("Region"))).memory, "host");
  const Grant g = Grant::from_json(sample(schema("Grant")));
  EXPECT_EQ(g.key["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(g.id, "x");
}

TEST(WireSpec, TransferStatusStatesAndGpuPathsAreTheSpecs) {
  std::vector<std::string> states;
  for (const auto& s : schema("TransferState")["enum"]) states.push_back(s.get<std::string>());
  EXPECT_EQ(states, (std::vector<std::string>{"Queued", "Running", "Succeeded", "Failed", "Cancelled"}));
  for (const auto& state : states) {
    const bool finished = state == "Succeeded" || state == "Failed" || state == "Cancelled";
    EXPECT_EQ(TransferStatus::from_json({{"state", state}}).finished(), finished) << state;
  }
  for (const auto& path : schema("TransferStatus")["properties"]["gpuPath"]["enum"]) {
    EXPECT_EQ(TransferStatus::from_json({{"gpuPath", path}}).gpu_path, path);
  }
  EXPECT_EQ(TransferStatus::from_json({{"gpuPath", "warp-drive"}}).gpu_path, "");
}

TEST(WireSpec, EveryReasonIsInTheSpec) {
  const std::string described = schema("TransferStatus")["properties"]["reason"]["description"];
  for (const std::string reason : reason::kAll) {
    EXPECT_NE(described.find(reason), std::string::npos) << reason;
  }
}

TEST(WireSpec, ErrorCodesRoundTripAndTheirStatusesAreTheSpecs) {
  const std::string described = spec()["info"]["description"];
  for (const ErrorCode c : {ErrorCode::InvalidArgument, ErrorCode::NotFound, ErrorCode::AlreadyExists,
                            ErrorCode::Conflict, ErrorCode::ResourceExhausted, ErrorCode::Unsupported,
                            ErrorCode::Unavailable, ErrorCode::Io, ErrorCode::Forbidden}) {
    EXPECT_EQ(error_code_from_wire(wire_code(c)), c) << wire_code(c);
    EXPECT_NE(described.find("`" + std::string(wire_code(c)) + "`"), std::string::npos) << wire_code(c);
  }
  // The agent's failures beyond itself are the agent's failure to its caller.
  for (const ErrorCode c : {ErrorCode::Provider, ErrorCode::PeerUnreachable, ErrorCode::RemoteAccess,
                            ErrorCode::TimedOut, ErrorCode::Cancelled}) {
    EXPECT_EQ(error_code_from_wire(wire_code(c)), ErrorCode::Provider) << wire_code(c);
    EXPECT_EQ(http_status(c), 500) << wire_code(c);
  }
  EXPECT_EQ(error_code_from_wire(code::kUnauthorized), ErrorCode::RemoteAccess);
  EXPECT_EQ(error_code_from_http_status(401), ErrorCode::RemoteAccess);
  // A 403 is the same answer at every retry (a 401 may not be: a token mid-rotation).
  EXPECT_EQ(error_code_from_wire(code::kForbidden), ErrorCode::Forbidden);
  EXPECT_EQ(error_code_from_http_status(403), ErrorCode::Forbidden);
  EXPECT_EQ(error_code_from_http_status(404), ErrorCode::NotFound);
  EXPECT_EQ(error_code_from_http_status(502), ErrorCode::Provider);
  // "`Code` (status)" or "`A`, `B` (status)" as the spec's description lists them.
  const std::vector<std::pair<ErrorCode, std::string>> statuses{
      {ErrorCode::InvalidArgument, "400"},   {ErrorCode::NotFound, "404"},
      {ErrorCode::Conflict, "409"},          {ErrorCode::AlreadyExists, "409"},
      {ErrorCode::ResourceExhausted, "422"}, {ErrorCode::Unsupported, "422"},
      {ErrorCode::Unavailable, "503"},       {ErrorCode::Forbidden, "403"}};
  for (const auto& [c, status] : statuses) {
    EXPECT_EQ(std::to_string(http_status(c)), status) << wire_code(c);
    const auto at = described.find("`" + std::string(wire_code(c)) + "`");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(described.substr(described.find('(', at) + 1, 3), status) << wire_code(c);
  }
  for (const char* c :
       {code::kUnauthorized, code::kMalformedJson, code::kRouteNotFound, code::kMethodNotAllowed,
        code::kLengthRequired, code::kPayloadTooLarge, code::kUnsupportedMediaType, code::kInternal}) {
    EXPECT_NE(described.find("`" + std::string(c) + "`"), std::string::npos) << c;
  }
}

}  // namespace
}  // namespace conduit::api
