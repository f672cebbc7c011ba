// The reshard planner alone (api/reshard_plan.h, docs/reshard.md): a 1,000-tensor transformer held by 64
// source ranks, planned for 32 target ranks. Per layer, as vLLM lays it out: the fused qkv_proj and
// gate_up_proj split on dim 0 (rows), o_proj and down_proj on dim 1 (columns), the two norms replicated on
// every rank; plus the embedding and lm_head (rows), the final norm and the rotary frequencies (replicated):
// 166 layers, 1,000 tensors. Two layouts of the same model:
//   rows     every split tensor by rows on both sides (FSDP-like dim-0 shards, TP rows): few, long runs;
//   columns  as above, o_proj and down_proj by columns on both sides (TP64 -> TP32): one run per row of
//            each column piece, which is what byte runs cost for a column split.
// For each, median [min, max] over --runs runs (wall time, and this thread's CPU time beside it): planning
// from scratch (ReshardPlanner with an empty cache: fingerprint, checks, cut, runs, batches); a cached lookup
// from the manifests (ReshardPlanner::plan again: every tensor table hashed, then a map lookup); and one from
// kept manifest digests (reshard_fingerprint of 96 digests, then ReshardPlanner::find); the ops, batches and
// bytes; and the size of the POST /v1/reshard/plans body that carries the manifests.
//
//   build/bin/conduit-reshard-plan-bench [--runs 20] [--hidden 4096] [--layout rows|columns|both]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "conduit/api/reshard_plan.h"
#include "conduit/api/reshard_wire.h"

namespace {

using conduit::api::Manifest;
using conduit::api::Placement;
using conduit::api::ReshardLimits;
using conduit::api::ReshardPlanner;
using conduit::api::ReshardSide;
using conduit::api::Tensor;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::string name;
  std::vector<std::uint64_t> dims;
  int split;  // -1: replicated; else the dimension split across ranks
};

std::vector<Shape> model(std::uint64_t hidden, bool columns) {
  const std::uint64_t kv = hidden / 4, intermediate = hidden * 7 / 2, vocab = 128256;
  const int col = columns ? 1 : 0;
  std::vector<Shape> out;
  out.push_back({"model.embed_tokens.weight", {vocab, hidden}, 0});
  for (int l = 0; l < 166; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {hidden}, -1});
    out.push_back({p + "self_attn.qkv_proj.weight", {hidden + 2 * kv, hidden}, 0});
    out.push_back({p + "self_attn.o_proj.weight", {hidden, hidden}, col});
    out.push_back({p + "post_attention_layernorm.weight", {hidden}, -1});
    out.push_back({p + "mlp.gate_up_proj.weight", {2 * intermediate, hidden}, 0});
    out.push_back({p + "mlp.down_proj.weight", {hidden, intermediate}, col});
  }
  out.push_back({"model.norm.weight", {hidden}, -1});
  out.push_back({"model.rotary_emb.inv_freq", {hidden / 64}, -1});
  out.push_back({"lm_head.weight", {vocab, hidden}, 0});
  return out;
}

// Rank `rank` of `ranks`: each split tensor's 1/ranks along its dimension, each replicated one whole, BF16
// back to back.
std::vector<ReshardSide> side(const std::vector<Shape>& shapes, std::uint64_t ranks) {
  std::vector<ReshardSide> out(ranks);
  for (std::uint64_t r = 0; r < ranks; ++r) {
    Manifest& m = out[r].manifest;
    m.tensors.reserve(shapes.size());
    std::uint64_t offset = 0;
    for (const Shape& s : shapes) {
      Tensor t{.name = s.name, .dtype = "BF16", .shape = s.dims, .offset = offset, .length = 0};
      if (s.split >= 0) {
        std::vector<std::uint64_t> start(s.dims.size(), 0);
        t.shape[s.split] = s.dims[s.split] / ranks;
        start[s.split] = r * t.shape[s.split];
        t.placement = Placement{s.dims, start};
      }
      std::uint64_t elements = 1;
      for (const auto d : t.shape) elements *= d;
      t.length = elements * 2;
      offset += t.length;
      m.tensors.push_back(std::move(t));
    }
    out[r].rate_bytes_per_second = 25e9;  // 200 Gbit/s
  }
  return out;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Stats {
  double median, min, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// This thread's CPU time: beside the wall time on a machine shared with other work.
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

void print(const char* what, const std::vector<double>& wall, const std::vector<double>& cpu,
           const char* goal) {
  const Stats w = stats(wall), c = stats(cpu);
  std::printf("  %-34s %8.3f ms [%.3f, %.3f]  cpu %8.3f ms   %s\n", what, w.median, w.min, w.max, c.median,
              goal);
}

void run(const char* layout, bool columns, std::uint64_t hidden, int runs) {
  const auto shapes = model(hidden, columns);
  const auto sources = side(shapes, 64), targets = side(shapes, 32);
  const ReshardLimits limits{.max_ops = 1ULL << 28};
  const std::size_t body = conduit::api::ReshardPlanRequest{sources, targets}.to_json().dump().size();
  // What a caller keeps between steps: each rank's manifest digest (unchanged manifests, unchanged digests).
  std::vector<conduit::api::ReshardSideKey> source_keys, target_keys;
  for (const auto& s : sources)
    source_keys.push_back({conduit::api::manifest_digest(s.manifest), s.rate_bytes_per_second});
  for (const auto& t : targets)
    target_keys.push_back({conduit::api::manifest_digest(t.manifest), t.rate_bytes_per_second});

  std::vector<double> fresh, fresh_cpu, cached, cached_cpu, kept, kept_cpu;
  std::size_t ops = 0, batches = 0;
  std::uint64_t bytes = 0, byte_runs = 0;
  double bound = 0;
  for (int i = 0; i < runs; ++i) {
    ReshardPlanner planner(64, UINT64_MAX, limits);
    const double c0 = cpu_ms();
    const auto t0 = Clock::now();
    auto planned = planner.plan(sources, targets);
    const auto t1 = Clock::now();
    const double c1 = cpu_ms();
    if (!planned) {
      std::fprintf(stderr, "%s: %s\n", layout, planned.error().message.c_str());
      return;
    }
    auto again = planner.plan(sources, targets);
    const auto t2 = Clock::now();
    const double c2 = cpu_ms();
    auto found = planner.find(conduit::api::reshard_fingerprint(source_keys, target_keys));
    const auto t3 = Clock::now();
    const double c3 = cpu_ms();
    if (!again || !again->cached || again->plan != planned->plan || found != planned->plan) {
      std::fprintf(stderr, "%s: the second call was not the cached plan\n", layout);
      return;
    }
    fresh.push_back(ms(t1 - t0));
    fresh_cpu.push_back(c1 - c0);
    cached.push_back(ms(t2 - t1));
    cached_cpu.push_back(c2 - c1);
    kept.push_back(ms(t3 - t2));
    kept_cpu.push_back(c3 - c2);
    ops = planned->plan->ops();
    byte_runs = planned->plan->runs();
    batches = planned->plan->batches.size();
    bytes = 0;
    for (const auto b : planned->plan->target_bytes) bytes += b;
    bound = planned->plan->lower_bound_seconds.value_or(0);
  }
  std::printf(
      "%s: %zu tensors, 64 -> 32 ranks, %.1f GB moved, %zu ops (%llu byte runs) in %zu batches, lower bound "
      "%.2f s at 25 GB/s a link; request body %.1f MB\n",
      layout, shapes.size(), static_cast<double>(bytes) / 1e9, ops,
      static_cast<unsigned long long>(byte_runs), batches, bound, static_cast<double>(body) / 1e6);
  print("plan from scratch", fresh, fresh_cpu, "(goal < 50 ms)");
  print("cached, from the manifests", cached, cached_cpu, "(goal < 1 ms; hashes every tensor table)");
  print("cached, from kept digests", kept, kept_cpu, "(goal < 1 ms)");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  std::uint64_t hidden = 4096;
  std::string layout = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--hidden")) hidden = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--layout")) layout = argv[i + 1];
  }
  if (hidden % 256 != 0) {
    std::fprintf(stderr, "--hidden must be a multiple of 256\n");
    return 2;
  }
  std::printf("conduit-reshard-plan-bench: %d runs each, hidden %llu, median [min, max]\n", runs,
              static_cast<unsigned long long>(hidden));
  if (layout == "rows" || layout == "both") run("rows", false, hidden, runs);
  if (layout == "columns" || layout == "both") run("columns", true, hidden, runs);
  return 0;
}
