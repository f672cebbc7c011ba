// The reshard planner as tables of layouts, each plan checked by a brute-force oracle: every source region is
// filled from the global tensors sliced the source's way, the plan's ops are applied as memcpys into target
// regions, and every target byte is compared with the global tensors sliced the target's way (and written
// exactly once).
#include "conduit/api/reshard_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace conduit::api {
namespace {

using Dims = std::vector<std::uint64_t>;

// One rank's slice of a tensor: [start, start + shape) of a tensor of `global` (empty: the whole, no
// placement written).
struct Slice {
  std::string name;
  std::string dtype;
  Dims shape;
  Dims start = {};
  Dims global = {};
};

// The slices laid out back to back, each aligned to its element size.
Manifest layout(const std::vector<Slice>& slices) {
  Manifest m;
  std::uint64_t offset = 0;
  for (const Slice& s : slices) {
    const std::uint32_t bits = *dtype_bits(s.dtype);
    const std::uint64_t align = std::max<std::uint64_t>(1, bits / 8);
    offset = (offset + align - 1) / align * align;
    std::uint64_t elements = 1;
    for (const auto d : s.shape) elements *= d;
    Tensor t{
        .name = s.name, .dtype = s.dtype, .shape = s.shape, .offset = offset, .length = elements * bits / 8};
    if (!s.global.empty() || !s.start.empty()) t.placement = Placement{s.global, s.start};
    offset += t.length;
    m.tensors.push_back(std::move(t));
  }
  EXPECT_TRUE(m.check(m.data_bytes())) << m.check(m.data_bytes()).error().message;
  return m;
}

std::vector<ReshardSide> sides(const std::vector<std::vector<Slice>>& ranks,
                               const std::vector<double>& rates = {}) {
  std::vector<ReshardSide> out;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out.push_back({layout(ranks[i]), i < rates.size() ? rates[i] : 0});
  return out;
}

// Byte k of element g of the global tensor `name`: a mix, so a byte taken from the wrong place shows.
unsigned char global_byte(const std::string& name, std::uint64_t byte_index) {
  std::uint64_t x = std::hash<std::string>{}(name) ^ (byte_index * 0x9e3779b97f4a7c15ULL);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<unsigned char>(x);
}

// A region holding `m`'s tensors as the global tensors sliced its way; `fill` elsewhere.
std::vector<unsigned char> region_of(const Manifest& m, unsigned char fill = 0xEE) {
  std::vector<unsigned char> out(m.data_bytes(), fill);
  for (const Tensor& t : m.tensors) {
    const std::uint32_t bits = *dtype_bits(t.dtype);
    if (bits % 8 != 0) {  // placed only whole: the bytes as they are
      for (std::uint64_t k = 0; k < t.length; ++k) out[t.offset + k] = global_byte(t.name, k);
      continue;
    }
    const std::uint64_t size = bits / 8;
    const Dims global = t.global_shape(), start = t.start();
    const std::size_t rank = t.shape.size();
    std::uint64_t elements = 1;
    for (const auto d : t.shape) elements *= d;
    for (std::uint64_t local = 0; local < elements; ++local) {
      // The local index's coordinates, then the global linear index.
      std::uint64_t rest = local, g = 0, stride = 1;
      Dims coord(rank);
      for (std::size_t d = rank; d-- > 0;) {
        coord[d] = rest % t.shape[d];
        rest /= t.shape[d];
      }
      for (std::size_t d = rank; d-- > 0;) {
        g += (start[d] + coord[d]) * stride;
        stride *= global[d];
      }
      for (std::uint64_t k = 0; k < size; ++k)
        out[t.offset + local * size + k] = global_byte(t.name, g * size + k);
    }
  }
  return out;
}

// The oracle: the plan's ops applied to regions filled the sources' way give exactly the targets' regions,
// each tensor byte written once, each batch within a scatter's limits, the byte counts the ops'.
void expect_moves_every_byte(const std::vector<ReshardSide>& sources, const std::vector<ReshardSide>& targets,
                             const ReshardPlan& plan) {
  std::vector<std::vector<unsigned char>> from, to, want;
  std::vector<std::vector<unsigned char>> writes;
  for (const auto& s : sources) from.push_back(region_of(s.manifest));
  for (const auto& t : targets) {
    to.emplace_back(t.manifest.data_bytes(), 0xEE);
    want.push_back(region_of(t.manifest));
    writes.emplace_back(t.manifest.data_bytes(), 0);
  }
  std::vector<std::uint64_t> source_bytes(sources.size()), target_bytes(targets.size());
  for (const ReshardBatch& b : plan.batches) {
    ASSERT_LT(b.source, sources.size());
    ASSERT_LT(b.target, targets.size());
    ASSERT_FALSE(b.ops.empty());
    EXPECT_LE(b.ops.size(), kMaxScatterOps);
    EXPECT_TRUE(check_scatter_op_limits(b.ops)) << "a batch within a scatter's limits (runs, bytes, strides)";
    std::uint64_t bytes = 0, runs = 0;
    for (const ScatterOp& op : b.ops) {
      ASSERT_GT(op.length, 0u);
      ASSERT_GE(op.count, 1u);
      runs += op.count;
      op.for_each_run([&](std::uint64_t s, std::uint64_t t, std::uint64_t n) {
        ASSERT_LE(s + n, from[b.source].size());
        ASSERT_LE(t + n, to[b.target].size());
        std::memcpy(&to[b.target][t], &from[b.source][s], n);
        for (std::uint64_t k = 0; k < n; ++k) ++writes[b.target][t + k];
        bytes += n;
      });
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_EQ(b.bytes, bytes);
    EXPECT_EQ(b.runs, runs);
    source_bytes[b.source] += bytes;
    target_bytes[b.target] += bytes;
  }
  EXPECT_EQ(plan.source_bytes, source_bytes);
  EXPECT_EQ(plan.target_bytes, target_bytes);
  for (std::size_t t = 0; t < targets.size(); ++t) {
    for (const Tensor& tensor : targets[t].manifest.tensors) {
      for (std::uint64_t k = tensor.offset; k < tensor.offset + tensor.length; ++k) {
        ASSERT_EQ(writes[t][k], 1) << "targets[" << t << "] tensor " << tensor.name << " byte "
                                   << k - tensor.offset << " written " << int(writes[t][k]) << " times";
        ASSERT_EQ(to[t][k], want[t][k])
            << "targets[" << t << "] tensor " << tensor.name << " byte " << k - tensor.offset;
      }
    }
  }
}

// Rows [a, b) of a [rows, cols] tensor, and columns.
Slice rows(const std::string& name, const std::string& dtype, Dims global, std::uint64_t a, std::uint64_t b) {
  Dims shape = global, start(global.size(), 0);
  shape[0] = b - a;
  start[0] = a;
  return {name, dtype, shape, start, global};
}
Slice cols(const std::string& name, const std::string& dtype, Dims global, std::uint64_t a, std::uint64_t b) {
  Dims shape = global, start(global.size(), 0);
  shape[1] = b - a;
  start[1] = a;
  return {name, dtype, shape, start, global};
}
Slice whole(const std::string& name, const std::string& dtype, Dims shape) { return {name, dtype, shape}; }

// torch.chunk's split of n into k: ceil(n / k) each, the last ones short or empty.
std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks(std::uint64_t n, std::uint64_t k) {
  const std::uint64_t each = (n + k - 1) / k;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::uint64_t i = 0; i < k; ++i) out.push_back({std::min(n, i * each), std::min(n, (i + 1) * each)});
  return out;
}

struct Layout {
  const char* what;
  std::vector<std::vector<Slice>> sources{};
  std::vector<std::vector<Slice>> targets{};
  std::size_t ops = 0;  // when not 0, the ops the plan takes
};

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  {  // TP4 rows -> TP2 rows: each target slice is two source slices back to back: one op a pair.
    Layout l{"TP4 dim 0 -> TP2", {}, {}, 4};
    for (std::uint64_t i = 0; i < 4; ++i) l.sources.push_back({rows("w", "F32", {8, 6}, 2 * i, 2 * i + 2)});
    for (std::uint64_t j = 0; j < 2; ++j) l.targets.push_back({rows("w", "F32", {8, 6}, 4 * j, 4 * j + 4)});
    out.push_back(l);
  }
  {  // TP4 columns -> TP2 columns: one strided op a pair (a run per row).
    Layout l{"TP4 dim 1 -> TP2", {}, {}, 4};
    for (std::uint64_t i = 0; i < 4; ++i) l.sources.push_back({cols("w", "BF16", {6, 8}, 2 * i, 2 * i + 2)});
    for (std::uint64_t j = 0; j < 2; ++j) l.targets.push_back({cols("w", "BF16", {6, 8}, 4 * j, 4 * j + 4)});
    out.push_back(l);
  }
  {  // TP4 columns -> TP2 rows: each source's column piece of a target's rows is one strided op.
    Layout l{"TP4 dim 1 -> TP2 dim 0", {}, {}, 8};
    for (std::uint64_t i = 0; i < 4; ++i) l.sources.push_back({cols("w", "F32", {6, 8}, 2 * i, 2 * i + 2)});
    for (std::uint64_t j = 0; j < 2; ++j) l.targets.push_back({rows("w", "F32", {6, 8}, 3 * j, 3 * j + 3)});
    out.push_back(l);
  }
  {  // FSDP: every tensor's dim 0 in 4 even shards -> TP2 (rows of one, columns of the other).
    Layout l{"FSDP even -> TP2"};
    for (std::uint64_t i = 0; i < 4; ++i) {
      l.sources.push_back({rows("q", "BF16", {8, 4}, 2 * i, 2 * i + 2), rows("o", "BF16", {4, 8}, i, i + 1)});
    }
    for (std::uint64_t j = 0; j < 2; ++j) {
      l.targets.push_back(
          {rows("q", "BF16", {8, 4}, 4 * j, 4 * j + 4), cols("o", "BF16", {4, 8}, 4 * j, 4 * j + 4)});
    }
    out.push_back(l);
  }
  {  // FSDP uneven as torch shards: 10 rows over 4 ranks are 3, 3, 3, 1; 5 rows are 2, 2, 1, 0.
    Layout l{"FSDP uneven -> TP2"};
    const auto ten = chunks(10, 4), five = chunks(5, 4);
    for (std::size_t i = 0; i < 4; ++i) {
      l.sources.push_back({rows("embed", "F32", {10, 3}, ten[i].first, ten[i].second),
                           rows("bias", "I8", {5}, five[i].first, five[i].second)});
    }
    for (std::uint64_t j = 0; j < 2; ++j) {
      l.targets.push_back({cols("embed", "F32", {10, 3}, j == 0 ? 0 : 2, j == 0 ? 2 : 3),
                           rows("bias", "I8", {5}, j == 0 ? 0 : 3, j == 0 ? 3 : 5)});
    }
    out.push_back(l);
  }
  {  // PP2: each stage its own layers, whole -> TP2 of everything.
    Layout l{"PP2 -> TP2"};
    l.sources = {{whole("layers.0.w", "BF16", {4, 6}), whole("layers.0.norm", "F32", {6})},
                 {whole("layers.1.w", "BF16", {4, 6}), whole("layers.1.norm", "F32", {6})}};
    for (std::uint64_t j = 0; j < 2; ++j) {
      l.targets.push_back(
          {rows("layers.0.w", "BF16", {4, 6}, 2 * j, 2 * j + 2), whole("layers.0.norm", "F32", {6}),
           cols("layers.1.w", "BF16", {4, 6}, 3 * j, 3 * j + 3), whole("layers.1.norm", "F32", {6})});
    }
    out.push_back(l);
  }
  {  // Prime dimensions, uneven both ways: rows 3/2/2 -> columns 5/4/4.
    Layout l{"[7, 13] rows -> columns"};
    for (const auto& [a, b] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 3}, {3, 5}, {5, 7}}) {
      l.sources.push_back({rows("p", "F32", {7, 13}, a, b)});
    }
    for (const auto& [a, b] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 5}, {5, 9}, {9, 13}}) {
      l.targets.push_back({cols("p", "F32", {7, 13}, a, b)});
    }
    out.push_back(l);
  }
  {  // 3-d: a [3, 4, 5] split on dim 2 -> dim 1; 0-d and 1-d beside it; a sub-byte tensor whole.
    Layout l{"3-d, 0-d, 1-d, F4"};
    const auto d2 = [](std::uint64_t a, std::uint64_t b) {
      return Slice{"cube", "I8", {3, 4, b - a}, {0, 0, a}, {3, 4, 5}};
    };
    l.sources = {
        {d2(0, 2), whole("step", "I8", {}), rows("bias", "BF16", {10}, 0, 4), whole("packed", "F4", {6})},
        {d2(2, 5), whole("step", "I8", {}), rows("bias", "BF16", {10}, 4, 10)}};
    l.targets = {{Slice{"cube", "I8", {3, 2, 5}, {0, 0, 0}, {3, 4, 5}}, whole("step", "I8", {}),
                  rows("bias", "BF16", {10}, 0, 5), whole("packed", "F4", {6})},
                 {Slice{"cube", "I8", {3, 2, 5}, {0, 2, 0}, {3, 4, 5}}, whole("step", "I8", {}),
                  rows("bias", "BF16", {10}, 5, 10)}};
    out.push_back(l);
  }
  {  // Columns 3 uneven -> columns 2 uneven: pairs whose column ranges meet, one strided op each.
    Layout l{"[9, 11] columns 4/4/3 -> columns 6/5", {}, {}, 4};
    for (const auto& [a, b] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 4}, {4, 8}, {8, 11}}) {
      l.sources.push_back({cols("c", "BF16", {9, 11}, a, b)});
    }
    for (const auto& [a, b] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 6}, {6, 11}}) {
      l.targets.push_back({cols("c", "BF16", {9, 11}, a, b)});
    }
    out.push_back(l);
  }
  {  // 3-d split on the middle dimension, 2 -> 1 (whole): each source's [3, 2, 5] is one op of 3 runs.
    Layout l{"3-d dim 1 -> whole", {}, {}, 2};
    for (std::uint64_t i = 0; i < 2; ++i)
      l.sources.push_back({Slice{"m", "F32", {3, 2, 5}, {0, 2 * i, 0}, {3, 4, 5}}});
    l.targets = {{whole("m", "F32", {3, 4, 5})}};
    out.push_back(l);
  }
  {  // 3-d split on the last dimension, uneven: the ops of successive outer indices continue one progression.
    Layout l{"3-d dim 2 -> dim 2", {}, {}, 3};
    l.sources = {{Slice{"k", "I8", {2, 3, 3}, {0, 0, 0}, {2, 3, 7}}},
                 {Slice{"k", "I8", {2, 3, 4}, {0, 0, 3}, {2, 3, 7}}}};
    l.targets = {{Slice{"k", "I8", {2, 3, 5}, {0, 0, 0}, {2, 3, 7}}},
                 {Slice{"k", "I8", {2, 3, 2}, {0, 0, 5}, {2, 3, 7}}}};
    out.push_back(l);
  }
  {  // Empty tensors match and move nothing; a source tensor no target holds is left out.
    Layout l{"empty and unused"};
    l.sources = {
        {whole("none", "F32", {0, 4}), whole("w", "U8", {4}), whole("optimizer.state", "F32", {16})}};
    l.targets = {{whole("none", "F32", {0, 4}), whole("w", "U8", {4})}};
    l.ops = 1;
    out.push_back(l);
  }
  return out;
}

TEST(ReshardPlan, EveryLayoutMovesEveryTargetByteFromTheRightPlace) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.what);
    const auto sources = sides(l.sources), targets = sides(l.targets);
    auto plan = plan_reshard(sources, targets);
    ASSERT_TRUE(plan) << plan.error().message;
    expect_moves_every_byte(sources, targets, *plan);
    if (l.ops != 0) {
      EXPECT_EQ(plan->ops(), l.ops);
    }
    EXPECT_EQ(plan->fingerprint.size(), 64u);
  }
}

// A random layout of one side: each tensor replicated on every rank, held whole by one rank (a pipeline
// stage), split along one dimension at random cuts (uneven, some slices empty), or split on a grid of two.
std::vector<std::vector<Slice>> random_side(std::mt19937_64& rng, const std::vector<Slice>& model,
                                            std::size_t ranks) {
  const auto below = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };
  const auto cuts = [&](std::uint64_t n, std::size_t k) {
    std::vector<std::uint64_t> at{0, n};
    for (std::size_t i = 1; i < k; ++i) at.push_back(below(n + 1));
    std::sort(at.begin(), at.end());
    return at;  // k + 1 points: slice i is [at[i], at[i + 1])
  };
  std::vector<std::vector<Slice>> out(ranks);
  for (const Slice& t : model) {
    const std::size_t rank = t.shape.size();
    const std::uint64_t scheme = rank == 0 ? below(2) : below(rank >= 2 ? 4 : 3);
    if (scheme == 0) {
      for (auto& r : out) r.push_back(t);
    } else if (scheme == 1) {
      out[below(ranks)].push_back(t);
    } else if (scheme == 2) {
      const std::size_t d = below(rank);
      const auto at = cuts(t.shape[d], ranks);
      for (std::size_t r = 0; r < ranks; ++r) {
        Slice s{t.name, t.dtype, t.shape, Dims(rank, 0), t.shape};
        s.shape[d] = at[r + 1] - at[r];
        s.start[d] = at[r];
        out[r].push_back(s);
      }
    } else {
      // A grid of a x b over dimensions d and e, rank r holding cell r (ranks past a x b hold none).
      const std::size_t d = below(rank), e = (d + 1 + below(rank - 1)) % rank;
      const std::size_t a = 1 + below(ranks), b = std::max<std::size_t>(1, ranks / a);
      const auto at = cuts(t.shape[d], a), bt = cuts(t.shape[e], b);
      for (std::size_t r = 0; r < a * b; ++r) {
        Slice s{t.name, t.dtype, t.shape, Dims(rank, 0), t.shape};
        s.shape[d] = at[r / b + 1] - at[r / b];
        s.start[d] = at[r / b];
        s.shape[e] = bt[r % b + 1] - bt[r % b];
        s.start[e] = bt[r % b];
        out[r].push_back(s);
      }
    }
  }
  return out;
}

TEST(ReshardPlan, RandomLayoutsMoveEveryTargetByteFromTheRightPlace) {
  std::mt19937_64 rng(20240611);
  const char* dtypes[] = {"I8", "BF16", "F32", "F64"};
  std::uint64_t strided = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<Slice> model;
    const std::size_t tensors = 1 + rng() % 4;
    for (std::size_t i = 0; i < tensors; ++i) {
      Dims shape(rng() % 4);
      for (auto& d : shape) d = rng() % 7 + (rng() % 8 == 0 ? 0 : 1);
      model.push_back({"t" + std::to_string(i), dtypes[rng() % 4], shape});
    }
    const auto sources = sides(random_side(rng, model, 1 + rng() % 5));
    const auto targets = sides(random_side(rng, model, 1 + rng() % 5));
    auto plan = plan_reshard(sources, targets);
    ASSERT_TRUE(plan) << "round " << round << ": " << plan.error().message;
    SCOPED_TRACE("round " + std::to_string(round));
    expect_moves_every_byte(sources, targets, *plan);
    if (::testing::Test::HasFatalFailure()) return;
    for (const ReshardBatch& b : plan->batches) {
      for (const ScatterOp& op : b.ops) strided += op.count > 1;
    }
  }
  // The layouts split on inner dimensions (columns, grids) are planned as strided ops, which the oracle
  // applied run by run: the rounds must have made many.
  EXPECT_GT(strided, 100u);
}

TEST(ReshardPlan, RowSlicesBackToBackAreOneOpAPair) {
  const Layout l = layouts()[0];
  auto plan = plan_reshard(sides(l.sources), sides(l.targets));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->batches.size(), 4u);
  // Source 1's rows [2, 4) are the second half of target 0's [0, 4).
  EXPECT_EQ(plan->batches[1].source, 1u);
  EXPECT_EQ(plan->batches[1].target, 0u);
  ASSERT_EQ(plan->batches[1].ops.size(), 1u);
  EXPECT_EQ(plan->batches[1].ops[0].source_offset, 0u);
  EXPECT_EQ(plan->batches[1].ops[0].target_offset, 2u * 6 * 4);
  EXPECT_EQ(plan->batches[1].ops[0].length, 2u * 6 * 4);
  EXPECT_EQ(plan->source_bytes, (std::vector<std::uint64_t>(4, 48)));
  EXPECT_EQ(plan->target_bytes, (std::vector<std::uint64_t>(2, 96)));
  EXPECT_EQ(plan->busiest.side, ReshardLinkSide::Target) << "each target takes twice what a source sends";
  EXPECT_EQ(plan->busiest.index, 0u);
  EXPECT_EQ(plan->busiest.bytes, 96u);
  EXPECT_FALSE(plan->lower_bound_seconds) << "no rate known";
}

TEST(ReshardPlan, ReplicasShareTheLoadAndTheLowerBoundIsTheBusiestLinksTime) {
  // Two replicas holding every tensor whole -> two TP ranks: each piece has two candidates.
  std::vector<Slice> model;
  for (int i = 0; i < 8; ++i) model.push_back(whole("layers." + std::to_string(i) + ".w", "BF16", {16, 8}));
  std::vector<Slice> t0, t1;
  for (int i = 0; i < 8; ++i) {
    t0.push_back(rows("layers." + std::to_string(i) + ".w", "BF16", {16, 8}, 0, 8));
    t1.push_back(rows("layers." + std::to_string(i) + ".w", "BF16", {16, 8}, 8, 16));
  }
  const auto sources = sides({model, model}), targets = sides({t0, t1});
  auto plan = plan_reshard(sources, targets);
  ASSERT_TRUE(plan) << plan.error().message;
  expect_moves_every_byte(sources, targets, *plan);
  EXPECT_EQ(plan->source_bytes, (std::vector<std::uint64_t>{1024, 1024})) << "both replicas, evenly";

  // A replica twice as fast takes about twice the bytes (11 pieces of 16: 704 ns against 640, where 10 would
  // be 640 against 768); the bound is the slowest link's time, the busiest the one with the most bytes.
  const auto rated = sides({model, model}, {2e9, 1e9});
  auto weighted = plan_reshard(rated, sides({t0, t1}, {4e9, 4e9}));
  ASSERT_TRUE(weighted) << weighted.error().message;
  EXPECT_EQ(weighted->source_bytes, (std::vector<std::uint64_t>{1408, 640}));
  ASSERT_TRUE(weighted->lower_bound_seconds);
  EXPECT_DOUBLE_EQ(*weighted->lower_bound_seconds, 1408 / 2e9);
  EXPECT_EQ(weighted->busiest.side, ReshardLinkSide::Source);
  EXPECT_EQ(weighted->busiest.bytes, 1408u);
  // A rate known for one link only bounds by that link.
  auto partly = plan_reshard(sides({model, model}), sides({t0, t1}, {0, 1e3}));
  ASSERT_TRUE(partly) << partly.error().message;
  EXPECT_DOUBLE_EQ(partly->lower_bound_seconds.value_or(0), 1024 / 1e3);
}

TEST(ReshardPlan, RefusesMismatchesAndGapsNamingTheTensor) {
  struct Case {
    const char* what;
    std::vector<std::vector<Slice>> sources, targets;
    const char* says;
  };
  const Case cases[] = {
      {"dtype",
       {{whole("w", "F32", {4})}},
       {{whole("w", "BF16", {4})}},
       "tensor \"w\" is F32 [4] in sources[0] but BF16 [4] in targets[0]"},
      {"global shape",
       {{rows("w", "F32", {8, 2}, 0, 4)}, {rows("w", "F32", {8, 2}, 4, 8)}},
       {{rows("w", "F32", {6, 2}, 0, 6)}},
       "tensor \"w\" is F32 [8,2] in sources[0] but F32 [6,2] in targets[0]"},
      {"sources disagree",
       {{rows("w", "F32", {8, 2}, 0, 4)}, {rows("w", "F32", {9, 2}, 4, 8)}},
       {{rows("w", "F32", {8, 2}, 0, 8)}},
       "tensor \"w\" is F32 [8,2] in sources[0] but F32 [9,2] in sources[1]"},
      {"a gap",
       {{rows("w", "F32", {8, 4}, 0, 2)}, {rows("w", "F32", {8, 4}, 4, 8)}},
       {{whole("w", "F32", {8, 4})}},
       "tensor \"w\" of targets[0]: [2:4, 0:4] is held by no source"},
      {"no source meets it",
       {{rows("w", "F32", {8, 4}, 0, 2)}},
       {{whole("x", "U8", {1})}, {rows("w", "F32", {8, 4}, 4, 8)}},
       "tensor \"x\" of targets[0] is in no source's manifest"},
      {"none of it held",
       {{rows("w", "F32", {8, 4}, 0, 2)}},
       {{rows("w", "F32", {8, 4}, 4, 8)}},
       "tensor \"w\" of targets[0]: [4:8, 0:4] is held by no source"},
  };
  for (const Case& c : cases) {
    auto plan = plan_reshard(sides(c.sources), sides(c.targets));
    ASSERT_FALSE(plan) << c.what << " was planned";
    EXPECT_EQ(plan.error().code, ErrorCode::InvalidArgument) << c.what;
    EXPECT_NE(plan.error().message.find(c.says), std::string::npos) << c.what << ": " << plan.error().message;
  }
  EXPECT_FALSE(plan_reshard({}, sides({{whole("w", "U8", {1})}})));
  EXPECT_FALSE(plan_reshard(sides({{whole("w", "U8", {1})}}), {}));
  auto nan = plan_reshard(sides({{whole("w", "U8", {1})}}, {-1}), sides({{whole("w", "U8", {1})}}));
  ASSERT_FALSE(nan);
  EXPECT_NE(nan.error().message.find("sources[0].rate"), std::string::npos) << nan.error().message;
  // A manifest that does not pass its own checks, named by side.
  auto broken = sides({{whole("w", "U8", {4})}});
  broken[0].manifest.tensors[0].length = 3;
  auto refused = plan_reshard(broken, sides({{whole("w", "U8", {4})}}));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("sources[0].manifest.tensors[0] (w): length 3"), std::string::npos)
      << refused.error().message;
}

TEST(ReshardPlan, MoreThanAScattersOpsIsSeveralBatches) {
  // A [70000, 3, 4] tensor on a 2 x 2 grid over dims 1 and 2, to whole: each source's piece is one op per
  // row of dim 0 (2 x 2 elements, whose next row does not continue the progression in the target), 70,000
  // ops a pair, two batches each.
  const Dims global{70000, 3, 4};
  std::vector<std::vector<Slice>> grid;
  for (const auto& [a, b] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 2}, {2, 3}}) {
    for (const auto& [c, d] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 2}, {2, 4}})
      grid.push_back({Slice{"w", "I8", {70000, b - a, d - c}, {0, a, c}, global}});
  }
  const auto sources = sides(grid);
  const auto targets = sides({{whole("w", "I8", global)}});
  auto plan = plan_reshard(sources, targets);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->batches.size(), 8u);
  EXPECT_EQ(plan->batches[0].ops.size(), kMaxScatterOps);
  EXPECT_EQ(plan->batches[0].ops[0].count, 2u) << "2 rows of dim 1 a op";
  EXPECT_EQ(plan->batches[1].ops.size(), 70000 - kMaxScatterOps);
  EXPECT_EQ(plan->batches[1].source, 0u) << "a pair's batches in order";
  expect_moves_every_byte(sources, targets, *plan);

  // Past the limits: refused before the ops are made.
  auto limited = plan_reshard(sources, targets, ReshardLimits{.max_ops = 100000});
  ASSERT_FALSE(limited);
  EXPECT_EQ(limited.error().code, ErrorCode::ResourceExhausted);
  EXPECT_NE(limited.error().message.find("more than 100000 ops (at tensor \"w\" of targets[0])"),
            std::string::npos)
      << limited.error().message;
}

TEST(ReshardPlan, AColumnSplitIsOneStridedOpAPairCutAtAScattersRuns) {
  // [3 kMaxScatterRuns, 2] by columns, to whole: one op a pair of that many one-byte runs, cut into batches
  // of kMaxScatterRuns runs (no memory is touched: the plan alone).
  const Dims global{3 * kMaxScatterRuns, 2};
  const auto sources = sides({{cols("w", "I8", global, 0, 1)}, {cols("w", "I8", global, 1, 2)}});
  auto plan = plan_reshard(sources, sides({{whole("w", "I8", global)}}));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->batches.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    const ReshardBatch& b = plan->batches[i];
    ASSERT_EQ(b.ops.size(), 1u);
    EXPECT_EQ(b.source, i / 3);
    EXPECT_EQ(b.runs, kMaxScatterRuns);
    EXPECT_EQ(b.bytes, kMaxScatterRuns);
    const ScatterOp& op = b.ops[0];
    EXPECT_EQ(op.length, 1u);
    EXPECT_EQ(op.count, kMaxScatterRuns);
    EXPECT_EQ(op.source_stride, 1u);
    EXPECT_EQ(op.target_stride, 2u);
    EXPECT_EQ(op.source_offset, (i % 3) * kMaxScatterRuns);
    EXPECT_EQ(op.target_offset, (i % 3) * kMaxScatterRuns * 2 + i / 3);
  }
  EXPECT_EQ(plan->ops(), 6u);
  EXPECT_EQ(plan->runs(), 6 * kMaxScatterRuns);
}

TEST(ReshardPlan, TooManyPiecesAreRefusedBeforeTheyAreMade) {
  // A [64, 64] target cut by 8 x 8 source blocks: 64 pieces, past a plan of at most 32 ops.
  std::vector<std::vector<Slice>> blocks;
  for (std::uint64_t r = 0; r < 8; ++r) {
    for (std::uint64_t c = 0; c < 8; ++c)
      blocks.push_back({Slice{"w", "U8", {8, 8}, {8 * r, 8 * c}, {64, 64}}});
  }
  auto plan =
      plan_reshard(sides(blocks), sides({{whole("w", "U8", {64, 64})}}), ReshardLimits{.max_ops = 32});
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code, ErrorCode::ResourceExhausted);
  EXPECT_NE(plan.error().message.find(
                "too many pieces for a plan of at most 32 ops (at tensor \"w\" of targets[0])"),
            std::string::npos)
      << plan.error().message;
  EXPECT_TRUE(
      plan_reshard(sides(blocks), sides({{whole("w", "U8", {64, 64})}}), ReshardLimits{.max_ops = 8 * 64}));
}

TEST(ReshardPlan, ARunPastAScattersBytesIsCutAtTheBatch) {
  // 40 GiB, whole to whole: no memory is touched, the plan alone.
  const auto sources = sides({{whole("huge", "U8", {40ULL << 30})}});
  auto plan = plan_reshard(sources, sides({{whole("huge", "U8", {40ULL << 30})}}));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->batches.size(), 3u);
  EXPECT_EQ(plan->batches[0].bytes, kMaxScatterBytes);
  EXPECT_EQ(plan->batches[1].ops[0].source_offset, kMaxScatterBytes);
  EXPECT_EQ(plan->batches[2].bytes, 8ULL << 30);
}

TEST(ReshardFingerprint, SameTablesSamePrintMetadataAside) {
  const auto a = sides({{rows("w", "F32", {8, 2}, 0, 8)}});
  auto b = sides({{whole("w", "F32", {8, 2})}});
  const auto t = sides({{whole("w", "F32", {8, 2})}});
  EXPECT_EQ(reshard_fingerprint(a, t), reshard_fingerprint(b, t)) << "a whole placement is no placement";
  b[0].manifest.metadata["step"] = "7";
  EXPECT_EQ(reshard_fingerprint(a, t), reshard_fingerprint(b, t)) << "metadata is not the layout";
  b[0].rate_bytes_per_second = 1e9;
  EXPECT_NE(reshard_fingerprint(a, t), reshard_fingerprint(b, t)) << "a rate changes the plan";
  const auto halves = sides({{rows("w", "F32", {8, 2}, 0, 4)}, {rows("w", "F32", {8, 2}, 4, 8)}});
  EXPECT_NE(reshard_fingerprint(halves, t), reshard_fingerprint(t, halves))
      << "sides are not interchangeable";
  auto renamed = sides({{whole("w\"", "F32", {8, 2})}});
  EXPECT_NE(reshard_fingerprint(renamed, t), reshard_fingerprint(a, t));
  // Fixed: SHA-256 of the canonical text, the same on every build (checked with Python's hashlib):
  // [["w","U8",[1],0,1,[1],[0]]], then {"v":1,"sources":[{"manifest":"8138...","rate":0.0}],"targets":[...]}.
  const auto one = sides({{whole("w", "U8", {1})}});
  const std::string digest = "8138d10aae4b1fc2da5d31bb479cc15deba345a57c3e36b12a03e58ecaf5fd77";
  EXPECT_EQ(manifest_digest(one[0].manifest), digest);
  EXPECT_EQ(reshard_fingerprint(one, one),
            "392da0112c0bb4d6266972539d58e87b47de5a6a23cb0a78cc19b59fc1ff8be2");
  // From kept digests, the same fingerprint without hashing the tables again.
  EXPECT_EQ(
      reshard_fingerprint(std::vector<ReshardSideKey>{{digest, 0}}, std::vector<ReshardSideKey>{{digest, 0}}),
      reshard_fingerprint(one, one));
}

TEST(ReshardPlanner, CachesByFingerprintAndDropsTheLeastRecentlyUsed) {
  ReshardPlanner planner(/*max_plans=*/2);
  const Layout l = layouts()[1];
  const auto sources = sides(l.sources), targets = sides(l.targets);
  auto first = planner.plan(sources, targets);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->cached);
  auto again = planner.plan(sources, targets);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->cached);
  EXPECT_EQ(again->plan.get(), first->plan.get()) << "the same plan object";
  EXPECT_EQ(planner.find(first->plan->fingerprint).get(), first->plan.get());

  auto moved = targets;
  moved[1].rate_bytes_per_second = 1e9;
  auto other = planner.plan(sources, moved);
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_FALSE(other->cached) << "another layout misses";
  EXPECT_NE(other->plan->fingerprint, first->plan->fingerprint);

  // A third plan drops the least recently used: the first (the other was made after its last use).
  const Layout third = layouts()[0];
  ASSERT_TRUE(planner.plan(sides(third.sources), sides(third.targets)));
  EXPECT_EQ(planner.size(), 2u);
  EXPECT_EQ(planner.find(first->plan->fingerprint), nullptr);
  EXPECT_NE(planner.find(other->plan->fingerprint), nullptr);

  // A refusal is not cached.
  EXPECT_FALSE(planner.plan(sides({{whole("w", "U8", {1})}}), sides({{whole("v", "U8", {1})}})));
  EXPECT_EQ(planner.size(), 2u);
}

}  // namespace
}  // namespace conduit::api
