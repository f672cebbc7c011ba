// POST /v1/reshard/plans on a real agent (docs/reshard.md): the batches it answers decode to the ops the
// planner gives in process, the second call for the same manifests comes from the cache, a refusal names the
// tensor, and the manifests of 96 ranks of a 1,000-tensor model fit the body this route takes (while every
// other route keeps --max-body-bytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "agent_process.h"
#include "conduit/api/reshard_plan.h"
#include "conduit/api/reshard_wire.h"
#include "conduit/api/transfer.h"

namespace conduit {
namespace {

using json = nlohmann::json;
using testing::AgentProcess;

// Rank `rank` of `ranks` holding its share of `tensors` tensors, each split on dimension `dim`.
json split_manifest(std::size_t tensors, std::uint64_t rows, std::uint64_t cols, std::size_t dim,
                    std::uint64_t rank, std::uint64_t ranks, const std::string& dtype = "BF16") {
  const std::uint64_t size = dtype == "BF16" ? 2 : 4;
  json list = json::array();
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors; ++i) {
    json shape = {rows, cols}, start = {0, 0};
    const std::uint64_t extent = (dim == 0 ? rows : cols) / ranks;
    shape[dim] = extent;
    start[dim] = rank * extent;
    const std::uint64_t length = shape[0].get<std::uint64_t>() * shape[1].get<std::uint64_t>() * size;
    list.push_back({{"name", "model.layers." + std::to_string(i) + ".weight"},
                    {"dtype", dtype},
                    {"shape", shape},
                    {"offset", offset},
                    {"length", length},
                    {"placement", {{"globalShape", {rows, cols}}, {"start", start}}}});
    offset += length;
  }
  return {{"tensors", std::move(list)}};
}

json side(std::size_t ranks, std::size_t tensors, std::uint64_t rows, std::uint64_t cols, std::size_t dim,
          double rate = 0) {
  json out = json::array();
  for (std::size_t r = 0; r < ranks; ++r) {
    json entry = {{"manifest", split_manifest(tensors, rows, cols, dim, r, ranks)}};
    if (rate > 0) entry["rate"] = rate;
    out.push_back(std::move(entry));
  }
  return out;
}

std::string message(const AgentProcess::Reply& r) { return r.body["error"].value("message", ""); }

class ReshardPlanHttp : public ::testing::Test {
 protected:
  AgentProcess a{testing::small_tcp_agent()};
};

TEST_F(ReshardPlanHttp, AnswersThePlannersOpsAndTheSecondCallFromTheCache) {
  ASSERT_TRUE(a.started());
  // TP4 by columns -> TP2 by rows, 3 tensors of [8, 16], the sources' egress known.
  const json body = {{"sources", side(4, 3, 8, 16, 1, 1e9)}, {"targets", side(2, 3, 8, 16, 0)}};
  const auto request = api::ReshardPlanRequest::from_json(body);
  ASSERT_TRUE(request) << request.error().message;
  const auto expected = api::plan_reshard(request->sources, request->targets);
  ASSERT_TRUE(expected) << expected.error().message;

  const auto first = a.post("/v1/reshard/plans", body);
  ASSERT_EQ(first.status, 200) << first.body.dump();
  EXPECT_EQ(first.body["cached"], false);
  EXPECT_EQ(first.body["fingerprint"], expected->fingerprint);
  ASSERT_EQ(first.body["batches"].size(), expected->batches.size());
  for (std::size_t i = 0; i < expected->batches.size(); ++i) {
    const json& b = first.body["batches"][i];
    const api::ReshardBatch& want = expected->batches[i];
    EXPECT_EQ(b["source"], want.source);
    EXPECT_EQ(b["target"], want.target);
    EXPECT_EQ(b["bytes"], want.bytes);
    EXPECT_EQ(b["ops"], want.ops.size());
    // The ops as POST /v1/transfers reads opsPacked.
    const auto ops = api::parse_packed_scatter_ops(b["opsPacked"]);
    ASSERT_TRUE(ops) << ops.error().message;
    ASSERT_EQ(ops->size(), want.ops.size());
    for (std::size_t k = 0; k < ops->size(); ++k) {
      EXPECT_EQ((*ops)[k].source_offset, want.ops[k].source_offset) << "batch " << i << " op " << k;
      EXPECT_EQ((*ops)[k].target_offset, want.ops[k].target_offset) << "batch " << i << " op " << k;
      EXPECT_EQ((*ops)[k].length, want.ops[k].length) << "batch " << i << " op " << k;
    }
  }
  ASSERT_EQ(first.body["sources"].size(), 4u);
  EXPECT_EQ(first.body["sources"][0]["bytes"], expected->source_bytes[0]);
  EXPECT_EQ(first.body["targets"][1]["bytes"], expected->target_bytes[1]);
  EXPECT_EQ(first.body["busiest"], json({{"side", "target"}, {"index", 0}, {"bytes", 3 * 4 * 16 * 2}}));
  ASSERT_TRUE(first.body.contains("lowerBoundSeconds"));
  EXPECT_DOUBLE_EQ(first.body["lowerBoundSeconds"].get<double>(), 3 * 8 * 4 * 2 / 1e9) << "a source's bytes";

  const auto second = a.post("/v1/reshard/plans", body);
  ASSERT_EQ(second.status, 200) << second.body.dump();
  EXPECT_EQ(second.body["cached"], true);
  EXPECT_EQ(second.body["batches"], first.body["batches"]);
  // Another rate is another plan.
  json slower = body;
  slower["sources"][0]["rate"] = 5e8;
  const auto third = a.post("/v1/reshard/plans", slower);
  ASSERT_EQ(third.status, 200) << third.body.dump();
  EXPECT_EQ(third.body["cached"], false);
  EXPECT_NE(third.body["fingerprint"], first.body["fingerprint"]);
}

TEST_F(ReshardPlanHttp, RefusalsNameTheTensorAndTheRange) {
  ASSERT_TRUE(a.started());
  // The sources hold the first half of the columns only.
  const json quarters = side(4, 1, 8, 16, 1);
  const json gap = {{"sources", json::array({quarters[0], quarters[1]})}, {"targets", side(1, 1, 8, 16, 0)}};
  const auto uncovered = a.post("/v1/reshard/plans", gap);
  EXPECT_EQ(uncovered.status, 400) << uncovered.body.dump();
  EXPECT_EQ(uncovered.body["error"]["code"], "InvalidArgument");
  EXPECT_EQ(message(uncovered),
            "tensor \"model.layers.0.weight\" of targets[0]: [0:8, 8:16] is held by no source");

  const json f32_source = {{"manifest", split_manifest(1, 8, 16, 0, 0, 1, "F32")}};
  const json f32 = {{"sources", json::array({f32_source})}, {"targets", side(1, 1, 8, 16, 0)}};
  const auto dtype = a.post("/v1/reshard/plans", f32);
  EXPECT_EQ(dtype.status, 400) << dtype.body.dump();
  EXPECT_EQ(message(dtype),
            "tensor \"model.layers.0.weight\" is F32 [8,16] in sources[0] but BF16 [8,16] in targets[0]");

  json broken = {{"sources", side(1, 1, 8, 16, 0)}, {"targets", side(1, 1, 8, 16, 0)}};
  broken["targets"][0]["manifest"]["tensors"][0]["length"] = 3;
  const auto length = a.post("/v1/reshard/plans", broken);
  EXPECT_EQ(length.status, 400) << length.body.dump();
  EXPECT_NE(message(length).find("targets[0].manifest.tensors[0] (model.layers.0.weight): length 3"),
            std::string::npos)
      << message(length);
  const auto unknown = a.post("/v1/reshard/plans", {{"sources", json::array()}, {"plan", 1}});
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(message(unknown), "plan: unknown field");
  const auto empty = a.post("/v1/reshard/plans", {{"sources", json::array()}, {"targets", json::array()}});
  EXPECT_EQ(empty.status, 400);
  EXPECT_EQ(message(empty), "sources: give 1 to 1024 manifests, got 0");
}

TEST_F(ReshardPlanHttp, NinetySixRanksOfAThousandTensorsFitThisRoutesBodyAlone) {
  ASSERT_TRUE(a.started());
  // 64 sources -> 32 targets, 1,000 tensors each, rows split: past the 1 MiB every other route takes.
  const json body = {{"sources", side(64, 1000, 64, 16, 0)}, {"targets", side(32, 1000, 64, 16, 0)}};
  const std::size_t size = body.dump().size();
  EXPECT_GT(size, 10u << 20);
  const auto planned = a.post("/v1/reshard/plans", body);
  ASSERT_EQ(planned.status, 200) << planned.body.dump().substr(0, 300);
  std::uint64_t ops = 0;
  for (const json& b : planned.body["batches"]) ops += b["ops"].get<std::uint64_t>();
  EXPECT_EQ(ops, 64u * 1000) << "each source's rows, tensor by tensor, to one target";
  std::cout << "[ info ] 96 manifests of 1,000 tensors: " << size / 1e6 << " MB of JSON\n";

  // Any other route still stops at --max-body-bytes, before reading the body.
  json big = {{"name", "big"}, {"bytes", 4096}, {"padding", std::string(2 << 20, 'x')}};
  const auto refused = a.post("/v1/regions", big);
  EXPECT_EQ(refused.status, 413) << refused.body.dump().substr(0, 300);
  EXPECT_EQ(refused.body["error"]["code"], "PayloadTooLarge");
}

}  // namespace
}  // namespace conduit
