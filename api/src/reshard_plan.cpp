// The reshard planner: target slices cut into pieces by the source slices of the same tensor, each piece
// given to a source, then turned into byte runs per (source, target) pair, then batches.
#include "conduit/api/reshard_plan.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string_view>

namespace conduit::api {

namespace {

using Dims = std::vector<std::uint64_t>;

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }
Error too_big(const std::string& what) { return make_error(ErrorCode::ResourceExhausted, what); }

// A name as an error quotes it: whole unless it is long (names run to 1 KiB).
std::string quoted(const std::string& name) {
  return "\"" + (name.size() <= 128 ? name : name.substr(0, 128) + "...") + "\"";
}

std::string dims_text(const Dims& d) { return nlohmann::json(d).dump(); }

const Dims& global_of(const Tensor& t) { return t.placement ? t.placement->global_shape : t.shape; }

// Where `t`'s slice starts in dimension d.
std::uint64_t start_of(const Tensor& t, std::size_t d) { return t.placement ? t.placement->start[d] : 0; }

// [a:b, c:d] in the tensor's global coordinates.
std::string box_text(const std::uint64_t* lo, const std::uint64_t* hi, std::size_t rank) {
  std::string out = "[";
  for (std::size_t d = 0; d < rank; ++d) {
    out += (d ? ", " : "") + std::to_string(lo[d]) + ":" + std::to_string(hi[d]);
  }
  return out + "]";
}

// A source's slice of one tensor.
struct Holder {
  std::uint32_t source;
  const Tensor* tensor;
};

// The sources holding one tensor, by source index.
struct Held {
  std::vector<Holder> holders;
  bool agreed = false;  // checked to hold the same dtype and global shape
};

// A piece of one target slice that one set of sources holds whole: its box [lo, hi) lives in Planning::boxes.
struct Piece {
  std::uint32_t target;
  const Tensor* tensor;
  std::size_t box;  // lo at boxes[box], hi at boxes[box + rank]
  std::uint64_t bytes;
  std::uint32_t first;  // candidates at candidates[first, first + count), by source index
  std::uint32_t count;
  std::uint32_t chosen;  // the candidate it is taken from
};

// The ops of one (source, target) pair as they are made.
struct PairOps {
  std::uint32_t source;
  std::uint32_t target;
  std::vector<ScatterOp> ops;
  std::uint64_t bytes = 0;

  void add(std::uint64_t source_offset, std::uint64_t target_offset, std::uint64_t length) {
    bytes += length;
    if (!ops.empty()) {
      ScatterOp& last = ops.back();
      if (last.source_offset + last.length == source_offset &&
          last.target_offset + last.length == target_offset) {
        last.length += length;
        return;
      }
    }
    ops.push_back({source_offset, target_offset, length});
  }
};

class Planning {
 public:
  Planning(const std::vector<ReshardSide>& sources, const std::vector<ReshardSide>& targets,
           const ReshardLimits& limits)
      : sources_(sources), targets_(targets), limits_(limits) {}

  Result<ReshardPlan> run() {
    if (auto ok = check_sides(); !ok) return ok.error();
    index_sources();
    for (std::size_t t = 0; t < targets_.size(); ++t) {
      for (const Tensor& tensor : targets_[t].manifest.tensors) {
        if (auto ok = cut(static_cast<std::uint32_t>(t), tensor); !ok) return ok.error();
      }
    }
    assign();
    if (auto ok = count_runs(); !ok) return ok.error();
    pairs_index_.assign(sources_.size() * targets_.size(), -1);
    for (const Piece& p : pieces_) emit(p);
    return finish();
  }

 private:
  Status check_sides() const {
    if (sources_.empty()) return bad("sources: give at least one manifest");
    if (targets_.empty()) return bad("targets: give at least one manifest");
    if (sources_.size() > kMaxReshardRanks || targets_.size() > kMaxReshardRanks) {
      return too_big("at most " + std::to_string(kMaxReshardRanks) + " sources and as many targets");
    }
    for (const auto* side : {&sources_, &targets_}) {
      const std::string name = side == &sources_ ? "sources" : "targets";
      for (std::size_t i = 0; i < side->size(); ++i) {
        const ReshardSide& s = (*side)[i];
        const std::string at = name + "[" + std::to_string(i) + "]";
        if (!std::isfinite(s.rate_bytes_per_second) || s.rate_bytes_per_second < 0) {
          return bad(at + ".rate: must be a finite number of bytes per second, 0 for unknown");
        }
        if (auto ok = s.manifest.check(s.manifest.data_bytes()); !ok) {
          return bad(at + ".manifest." + ok.error().message);
        }
      }
    }
    return {};
  }

  void index_sources() {
    std::size_t tensors = 0;
    for (const ReshardSide& s : sources_) tensors += s.manifest.tensors.size();
    holders_.reserve(tensors);
    for (std::size_t s = 0; s < sources_.size(); ++s) {
      for (const Tensor& t : sources_[s].manifest.tensors) {
        holders_[t.name].holders.push_back({static_cast<std::uint32_t>(s), &t});
      }
    }
  }

  // The same dtype and global shape, or both said.
  static Status same(const Tensor& a, const char* a_side, std::size_t a_index, const Tensor& b,
                     const char* b_side, std::size_t b_index) {
    if (a.dtype == b.dtype && global_of(a) == global_of(b)) return {};
    return bad("tensor " + quoted(a.name) + " is " + a.dtype + " " + dims_text(global_of(a)) + " in " +
               a_side + "[" + std::to_string(a_index) + "] but " + b.dtype + " " + dims_text(global_of(b)) +
               " in " + b_side + "[" + std::to_string(b_index) + "]");
  }

  // `tensor` of target `t` cut into pieces by the source slices that intersect it.
  Status cut(std::uint32_t t, const Tensor& tensor) {
    const auto found = holders_.find(tensor.name);
    const std::string what = "tensor " + quoted(tensor.name) + " of targets[" + std::to_string(t) + "]";
    if (found == holders_.end()) return bad(what + " is in no source's manifest");
    Held& held = found->second;
    if (!held.agreed) {  // once per name: every source holds the same tensor
      for (const Holder& h : held.holders) {
        if (auto ok = same(*held.holders[0].tensor, "sources", held.holders[0].source, *h.tensor, "sources",
                           h.source);
            !ok) {
          return ok.error();
        }
      }
      held.agreed = true;
    }
    if (auto ok = same(*held.holders[0].tensor, "sources", held.holders[0].source, tensor, "targets", t);
        !ok) {
      return ok.error();
    }
    const std::size_t rank = tensor.shape.size();
    for (std::size_t d = 0; d < rank; ++d) {
      if (tensor.shape[d] == 0) return {};  // matched, and nothing to move
    }
    // The target's box, the sources whose boxes meet it, and per dimension the cuts of those boxes in it.
    Dims lo(rank), hi(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      lo[d] = start_of(tensor, d);
      hi[d] = lo[d] + tensor.shape[d];
    }
    meeting_.clear();
    for (const Holder& h : held.holders) {
      bool meets = true;
      for (std::size_t d = 0; d < rank && meets; ++d) {
        const std::uint64_t s = start_of(*h.tensor, d);
        meets = s < hi[d] && lo[d] < s + h.tensor->shape[d];
      }
      if (meets) meeting_.push_back(h);
    }
    if (meeting_.empty())
      return bad(what + ": " + box_text(lo.data(), hi.data(), rank) + " is held by no source");
    std::vector<Dims> cuts(rank);
    std::uint64_t cells = 1;
    for (std::size_t d = 0; d < rank; ++d) {
      cuts[d] = {lo[d], hi[d]};
      for (const Holder& h : meeting_) {
        const std::uint64_t s = start_of(*h.tensor, d);
        if (s > lo[d]) cuts[d].push_back(s);
        if (s + h.tensor->shape[d] < hi[d]) cuts[d].push_back(s + h.tensor->shape[d]);
      }
      std::sort(cuts[d].begin(), cuts[d].end());
      cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
      cells *= cuts[d].size() - 1;  // at most (2 x 1024 + 1)^16: no overflow checked below, bounded first
      if (cells > limits_.max_ops) return too_many(what);
    }
    pieces_total_ += cells;
    work_ += cells * meeting_.size();
    if (pieces_total_ > limits_.max_ops || work_ > 64 * limits_.max_ops) return too_many(what);
    // Each meeting source's cells: [first, last) per dimension in the cuts.
    const std::size_t m = meeting_.size();
    spans_.assign(2 * m * rank, 0);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t d = 0; d < rank; ++d) {
        const std::uint64_t s = std::max(start_of(*meeting_[i].tensor, d), lo[d]);
        const std::uint64_t e =
            std::min(start_of(*meeting_[i].tensor, d) + meeting_[i].tensor->shape[d], hi[d]);
        spans_[(2 * i) * rank + d] = std::lower_bound(cuts[d].begin(), cuts[d].end(), s) - cuts[d].begin();
        spans_[(2 * i + 1) * rank + d] =
            std::lower_bound(cuts[d].begin(), cuts[d].end(), e) - cuts[d].begin();
      }
    }
    const std::uint32_t bits = *dtype_bits(tensor.dtype);
    std::vector<std::size_t> cell(rank, 0);
    for (std::uint64_t n = 0; n < cells; ++n) {
      const auto first = static_cast<std::uint32_t>(candidates_.size());
      for (std::size_t i = 0; i < m; ++i) {
        bool holds = true;
        for (std::size_t d = 0; d < rank && holds; ++d) {
          holds = spans_[(2 * i) * rank + d] <= cell[d] && cell[d] < spans_[(2 * i + 1) * rank + d];
        }
        if (holds) candidates_.push_back(meeting_[i]);
      }
      const std::size_t box = boxes_.size();
      std::uint64_t elements = 1;
      for (std::size_t d = 0; d < rank; ++d) boxes_.push_back(cuts[d][cell[d]]);
      for (std::size_t d = 0; d < rank; ++d) {
        boxes_.push_back(cuts[d][cell[d] + 1]);
        elements *= cuts[d][cell[d] + 1] - cuts[d][cell[d]];
      }
      const auto count = static_cast<std::uint32_t>(candidates_.size() - first);
      if (count == 0) {
        return bad(what + ": " + box_text(&boxes_[box], &boxes_[box + rank], rank) + " is held by no source");
      }
      // Sub-byte dtypes are placed only whole (Manifest::check): the piece is the tensor.
      const std::uint64_t bytes = bits % 8 == 0 ? elements * (bits / 8) : tensor.length;
      pieces_.push_back({t, &tensor, box, bytes, first, count, first});
      for (std::size_t d = rank; d-- > 0;) {  // the next cell, row-major
        if (++cell[d] < cuts[d].size() - 1) break;
        cell[d] = 0;
      }
    }
    return {};
  }

  Error too_many(const std::string& what) const {
    return too_big("the plan cuts into more than " + std::to_string(limits_.max_ops) + " pieces (at " + what +
                   "): the slices are too fine to move as byte runs");
  }

  // Pieces one source holds go to it; then those several hold, largest first, each to the source whose
  // egress ends least loaded.
  void assign() {
    load_.assign(sources_.size(), 0);
    std::vector<std::uint32_t> shared;
    for (std::uint32_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i].count == 1) {
        load_[candidates_[pieces_[i].first].source] += pieces_[i].bytes;
      } else {
        shared.push_back(i);
      }
    }
    std::stable_sort(shared.begin(), shared.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return pieces_[a].bytes > pieces_[b].bytes; });
    for (const std::uint32_t i : shared) {
      Piece& p = pieces_[i];
      bool timed = true;
      for (std::uint32_t c = p.first; c < p.first + p.count; ++c) {
        timed = timed && sources_[candidates_[c].source].rate_bytes_per_second > 0;
      }
      const auto after = [&](std::uint32_t c) {
        const std::uint32_t s = candidates_[c].source;
        const double bytes = static_cast<double>(load_[s]) + static_cast<double>(p.bytes);
        return timed ? bytes / sources_[s].rate_bytes_per_second : bytes;
      };
      std::uint32_t best = p.first;
      for (std::uint32_t c = p.first + 1; c < p.first + p.count; ++c) {
        if (after(c) < after(best)) best = c;
      }
      p.chosen = best;
      load_[candidates_[best].source] += p.bytes;
    }
  }

  // The runs of piece `p` from its chosen source: the innermost dimensions the piece spans whole in both
  // slices collapse into one run with the dimension outside them; every index of the dimensions outside that
  // starts a run. Calls f(source element, target element, elements) for each, in row-major order.
  template <typename F>
  static void runs(const Piece& p, const Tensor& source, const std::uint64_t* lo, const std::uint64_t* hi,
                   F&& f) {
    const Tensor& target = *p.tensor;
    const std::size_t rank = target.shape.size();
    if (rank == 0) return f(0, 0, 1);
    std::size_t j = rank - 1;
    while (j > 0 && hi[j] - lo[j] == source.shape[j] && hi[j] - lo[j] == target.shape[j]) --j;
    std::uint64_t run = 1;
    for (std::size_t d = j; d < rank; ++d) run *= hi[d] - lo[d];
    // Strides in elements, and where the piece starts in each slice.
    std::uint64_t source_stride[Manifest::kMaxRank], target_stride[Manifest::kMaxRank];
    std::uint64_t s0 = 0, t0 = 0;
    for (std::size_t d = rank, ss = 1, ts = 1; d-- > 0;) {
      source_stride[d] = ss;
      target_stride[d] = ts;
      s0 += (lo[d] - start_of(source, d)) * ss;
      t0 += (lo[d] - start_of(target, d)) * ts;
      ss *= source.shape[d];
      ts *= target.shape[d];
    }
    if (j == 0) return f(s0, t0, run);
    // Odometer over dimensions [0, j - 1), a plain loop over dimension j - 1.
    const std::size_t inner = j - 1;
    const std::uint64_t rows = hi[inner] - lo[inner];
    std::uint64_t index[Manifest::kMaxRank] = {};
    while (true) {
      std::uint64_t s = s0, t = t0;
      for (std::size_t d = 0; d < inner; ++d) {
        s += index[d] * source_stride[d];
        t += index[d] * target_stride[d];
      }
      for (std::uint64_t r = 0; r < rows; ++r) {
        f(s, t, run);
        s += source_stride[inner];
        t += target_stride[inner];
      }
      std::size_t d = inner;
      while (d > 0) {
        --d;
        if (++index[d] < hi[d] - lo[d]) break;
        index[d] = 0;
        if (d == 0) return;
      }
      if (inner == 0) return;
    }
  }

  // The runs the pieces make before merging, bounded before any is made.
  Status count_runs() const {
    std::uint64_t total = 0;
    for (const Piece& p : pieces_) {
      const Tensor& source = *candidates_[p.chosen].tensor;
      const std::size_t rank = p.tensor->shape.size();
      const std::uint64_t* lo = &boxes_[p.box];
      const std::uint64_t* hi = lo + rank;
      std::size_t j = rank == 0 ? 0 : rank - 1;
      while (j > 0 && hi[j] - lo[j] == source.shape[j] && hi[j] - lo[j] == p.tensor->shape[j]) --j;
      std::uint64_t n = 1;
      for (std::size_t d = 0; d < j; ++d) n *= hi[d] - lo[d];  // <= the piece's elements: no overflow
      total += n;
      if (n > limits_.max_ops || total > limits_.max_ops) {
        return too_big("the plan takes more than " + std::to_string(limits_.max_ops) +
                       " byte runs (at tensor " + quoted(p.tensor->name) + " of targets[" +
                       std::to_string(p.target) + "]): the slices are too fine to move as byte runs");
      }
    }
    return {};
  }

  PairOps& pair(std::uint32_t source, std::uint32_t target) {
    std::int32_t& at = pairs_index_[source * targets_.size() + target];
    if (at < 0) {
      at = static_cast<std::int32_t>(pairs_.size());
      pairs_.push_back({source, target, {}, 0});
    }
    return pairs_[static_cast<std::size_t>(at)];
  }

  void emit(const Piece& p) {
    const Holder& from = candidates_[p.chosen];
    PairOps& ops = pair(from.source, p.target);
    const Tensor& source = *from.tensor;
    const Tensor& target = *p.tensor;
    const std::uint32_t bits = *dtype_bits(target.dtype);
    if (bits % 8 != 0) return ops.add(source.offset, target.offset, target.length);  // whole, as cut() says
    const std::uint64_t size = bits / 8;
    const std::uint64_t* lo = &boxes_[p.box];
    runs(p, source, lo, lo + target.shape.size(), [&](std::uint64_t s, std::uint64_t t, std::uint64_t n) {
      ops.add(source.offset + s * size, target.offset + t * size, n * size);
    });
  }

  Result<ReshardPlan> finish() {
    ReshardPlan plan;
    plan.source_bytes.assign(sources_.size(), 0);
    plan.target_bytes.assign(targets_.size(), 0);
    std::uint64_t pieces = 0;  // a run is cut at most once per batch it crosses
    std::uint64_t total = 0;
    for (const PairOps& p : pairs_) {
      pieces += p.ops.size() + p.bytes / kMaxScatterBytes;
      if (p.bytes > UINT64_MAX - total) return too_big("the plan moves more than 2^64 bytes");
      total += p.bytes;
      plan.source_bytes[p.source] += p.bytes;
      plan.target_bytes[p.target] += p.bytes;
    }
    if (pieces > limits_.max_ops) {
      return too_big("the plan takes more than " + std::to_string(limits_.max_ops) +
                     " ops once runs are cut at the " + std::to_string(kMaxScatterBytes) +
                     " bytes a batch moves");
    }
    for (std::size_t s = 0; s < sources_.size(); ++s) {
      for (std::size_t t = 0; t < targets_.size(); ++t) {
        const std::int32_t at = pairs_index_[s * targets_.size() + t];
        if (at >= 0) into_batches(pairs_[static_cast<std::size_t>(at)], plan.batches);
      }
    }
    plan.busiest = {ReshardLinkSide::Source, 0, plan.source_bytes[0]};
    std::optional<double> bound;
    const auto consider = [&](ReshardLinkSide side, std::size_t i, std::uint64_t bytes, double rate) {
      if (bytes > plan.busiest.bytes) plan.busiest = {side, i, bytes};
      if (rate > 0) bound = std::max(bound.value_or(0), static_cast<double>(bytes) / rate);
    };
    for (std::size_t s = 0; s < sources_.size(); ++s) {
      consider(ReshardLinkSide::Source, s, plan.source_bytes[s], sources_[s].rate_bytes_per_second);
    }
    for (std::size_t t = 0; t < targets_.size(); ++t) {
      consider(ReshardLinkSide::Target, t, plan.target_bytes[t], targets_[t].rate_bytes_per_second);
    }
    plan.lower_bound_seconds = bound;
    plan.fingerprint = reshard_fingerprint(sources_, targets_);
    return plan;
  }

  // A pair's ops as batches of at most kMaxScatterOps ops and kMaxScatterBytes bytes.
  static void into_batches(PairOps& p, std::vector<ReshardBatch>& out) {
    if (p.ops.size() <= kMaxScatterOps && p.bytes <= kMaxScatterBytes) {
      out.push_back({p.source, p.target, std::move(p.ops), p.bytes});
      return;
    }
    ReshardBatch batch{p.source, p.target, {}, 0};
    for (const ScatterOp& op : p.ops) {
      for (std::uint64_t done = 0; done < op.length;) {
        if (batch.ops.size() == kMaxScatterOps || batch.bytes == kMaxScatterBytes) {
          out.push_back(std::move(batch));
          batch = {p.source, p.target, {}, 0};
        }
        const std::uint64_t n = std::min(op.length - done, kMaxScatterBytes - batch.bytes);
        batch.ops.push_back({op.source_offset + done, op.target_offset + done, n});
        batch.bytes += n;
        done += n;
      }
    }
    if (!batch.ops.empty()) out.push_back(std::move(batch));
  }

  const std::vector<ReshardSide>& sources_;
  const std::vector<ReshardSide>& targets_;
  const ReshardLimits limits_;
  std::unordered_map<std::string_view, Held> holders_;
  std::vector<Holder> meeting_;     // cut()'s, reused
  std::vector<std::size_t> spans_;  // cut()'s, reused
  std::vector<Piece> pieces_;
  std::vector<Holder> candidates_;
  std::vector<std::uint64_t> boxes_;
  std::uint64_t pieces_total_ = 0;
  std::uint64_t work_ = 0;
  std::vector<std::uint64_t> load_;
  std::vector<std::int32_t> pairs_index_;  // by source x targets + target: into pairs_, -1 for none yet
  std::vector<PairOps> pairs_;
};

}  // namespace

std::size_t ReshardPlan::ops() const {
  std::size_t n = 0;
  for (const ReshardBatch& b : batches) n += b.ops.size();
  return n;
}

Result<ReshardPlan> plan_reshard(const std::vector<ReshardSide>& sources,
                                 const std::vector<ReshardSide>& targets, const ReshardLimits& limits) {
  return Planning(sources, targets, limits).run();
}

}  // namespace conduit::api
