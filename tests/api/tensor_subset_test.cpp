// The subset planner as a table: which bytes a `tensors:` list moves, and every refusal naming the tensor.
#include "conduit/api/tensor_subset.h"

#include <gtest/gtest.h>

#include <string>

namespace conduit::api {
namespace {

Tensor t(std::string name, std::string dtype, std::vector<std::uint64_t> shape, std::uint64_t offset,
         std::uint64_t length) {
  return {std::move(name), std::move(dtype), std::move(shape), offset, length};
}

// Layer 0 (two 16-byte tensors), layer 1 (one), an empty tensor, the head: back to back from 0.
Manifest model() {
  return {{t("model.layers.0.q.weight", "F32", {4}, 0, 16), t("model.layers.0.k.weight", "F32", {4}, 16, 16),
           t("model.layers.1.q.weight", "F32", {4}, 32, 16), t("model.none", "F32", {0}, 48, 0),
           t("lm_head.weight", "BF16", {8}, 48, 16)},
          {}};
}

bool same(const std::vector<ScatterOp>& got, const std::vector<ScatterOp>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].source_offset != want[i].source_offset || got[i].target_offset != want[i].target_offset ||
        got[i].length != want[i].length)
      return false;
  }
  return true;
}

TEST(TensorSubset, MovesOnlyTheNamedTensorsMergingRunsBackToBackOnBothSides) {
  auto ops = plan_subset(model(), model(), {"model.layers.0.*", "lm_head.weight"});
  ASSERT_TRUE(ops) << ops.error().message;
  EXPECT_TRUE(same(*ops, {{0, 0, 32}, {48, 48, 16}})) << "layer 0 is one range; layer 1 stays";
}

TEST(TensorSubset, LandsAtTheTargetsOwnOffsetsInSourceOrder) {
  // The same tensors laid out in another order (and with a gap) in the target.
  Manifest target{
      {t("lm_head.weight", "BF16", {8}, 0, 16), t("model.layers.1.q.weight", "F32", {4}, 16, 16),
       t("model.layers.0.k.weight", "F32", {4}, 64, 16), t("model.layers.0.q.weight", "F32", {4}, 80, 16)},
      {}};
  auto ops = plan_subset(model(), target, {"model.layers.0.?.weight", "lm_head.weight"});
  ASSERT_TRUE(ops) << ops.error().message;
  EXPECT_TRUE(same(*ops, {{0, 80, 16}, {16, 64, 16}, {48, 0, 16}}))
      << "contiguous at the source only: not merged";
}

TEST(TensorSubset, GlobsAreFnmatchAcrossDots) {
  EXPECT_TRUE(tensor_name_matches("model.*", "model.layers.0.q.weight"));
  EXPECT_TRUE(tensor_name_matches("model.layers.[01].*", "model.layers.1.q.weight"));
  EXPECT_FALSE(tensor_name_matches("model.layers.[!01].*", "model.layers.1.q.weight"));
  EXPECT_TRUE(tensor_name_matches("*/x", "a/b/x")) << "no FNM_PATHNAME";
  EXPECT_FALSE(tensor_name_matches("model", "model.layers.0.q.weight")) << "a name matches whole";
  EXPECT_TRUE(tensor_name_matches("weird\\*", "weird*"));
}

TEST(TensorSubset, EmptyTensorsMustMatchButMoveNothing) {
  auto ops = plan_subset(model(), model(), {"model.none", "lm_head.weight"});
  ASSERT_TRUE(ops) << ops.error().message;
  EXPECT_TRUE(same(*ops, {{48, 48, 16}}));

  Manifest target = model();
  target.tensors[3].shape = {2, 0};
  auto bad = plan_subset(model(), target, {"model.none"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("model.none"), std::string::npos) << bad.error().message;

  auto nothing = plan_subset(model(), model(), {"model.none"});
  ASSERT_FALSE(nothing);
  EXPECT_NE(nothing.error().message.find("nothing to move"), std::string::npos) << nothing.error().message;
}

TEST(TensorSubset, RefusesEveryMismatchNamingTheTensor) {
  Manifest other_dtype = model();
  other_dtype.tensors[4].dtype = "F16";
  Manifest other_shape = model();
  other_shape.tensors[0].shape = {2, 2};
  Manifest missing = model();
  missing.tensors.erase(missing.tensors.begin() + 2);
  struct Case {
    const char* what;
    Manifest target;
    std::vector<std::string> patterns;
    const char* says;
  };
  const Case cases[] = {
      {"no patterns", model(), {}, "name at least one tensor"},
      {"matches nothing",
       model(),
       {"lm_head.weight", "model.layers.9.*"},
       "tensors[1]: \"model.layers.9.*\" matches no tensor in the source"},
      {"missing in the target",
       missing,
       {"model.layers.*"},
       "\"model.layers.1.q.weight\" is not in the target region's manifest"},
      {"dtype differs",
       other_dtype,
       {"lm_head.weight"},
       "\"lm_head.weight\" is BF16 [8] in the source but F16 [8] in the target"},
      {"shape differs",
       other_shape,
       {"model.layers.0.q.weight"},
       "\"model.layers.0.q.weight\" is F32 [4] in the source but F32 [2,2] in the target"},
  };
  for (const Case& c : cases) {
    auto ops = plan_subset(model(), c.target, c.patterns);
    ASSERT_FALSE(ops) << c.what << " was planned";
    EXPECT_EQ(ops.error().code, ErrorCode::InvalidArgument) << c.what;
    EXPECT_NE(ops.error().message.find(c.says), std::string::npos) << c.what << ": " << ops.error().message;
  }
}

TEST(TensorSubset, RefusesMoreOpsThanOneScatterBatchTakes) {
  // One-byte tensors with a gap between each: no two merge.
  Manifest many;
  for (std::uint64_t i = 0; i <= kMaxScatterOps; ++i)
    many.tensors.push_back(t("t" + std::to_string(i), "U8", {1}, 2 * i, 1));
  auto ops = plan_subset(many, many, {"t*"});
  ASSERT_FALSE(ops);
  EXPECT_NE(ops.error().message.find("more than 65536"), std::string::npos) << ops.error().message;
  EXPECT_NE(ops.error().message.find("\"t65536\""), std::string::npos) << ops.error().message;
}

}  // namespace
}  // namespace conduit::api
