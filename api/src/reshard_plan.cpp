// The reshard planner: target slices cut into pieces by the source slices of the same tensor, each piece
// given to a source, then turned into byte runs per (source, target) pair, then batches.
#include "conduit/api/reshard_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
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

// The sources holding one tensor. Once a target asks for it, checked to agree (dtype, global shape) and
// sorted along the dimension their starts differ most in, so a target's slice finds the few it meets by
// binary search rather than a scan of every rank.
struct Held {
  std::vector<Holder> holders;  // by source index, then (indexed) by start along `dim`, then source index
  bool indexed = false;
  std::size_t dim = 0;
  std::vector<std::uint64_t> starts;  // holders[i]'s start along dim
  std::vector<std::uint64_t> reach;   // the furthest end along dim of holders[0..i]
  // holders[i]'s box (lo at [2 i rank, +rank), hi at [(2 i + 1) rank, +rank)) and its tensor's offset: what
  // cut() and emit() need of a source, in two arrays rather than scattered over the manifests.
  std::vector<std::uint64_t> boxes;
  std::vector<std::uint64_t> offsets;

  const std::uint64_t* lo(std::size_t i, std::size_t rank) const { return boxes.data() + 2 * i * rank; }
  const std::uint64_t* hi(std::size_t i, std::size_t rank) const { return boxes.data() + (2 * i + 1) * rank; }
};

// A piece of one target slice that one set of sources holds whole: its box [lo, hi) lives in Planning::boxes.
struct Piece {
  std::uint32_t target;
  std::uint32_t bits;  // the dtype's
  const Tensor* tensor;
  const Held* held;  // the sources holding the tensor
  std::size_t box;   // lo at boxes[box], hi at boxes[box + rank]
  std::uint64_t bytes;
  std::uint32_t first;  // candidates at candidates_[first, first + count): indices into held->holders
  std::uint32_t count;
  std::uint32_t chosen;  // the candidate it is taken from
};

// The ops of one (source, target) pair as they are made.
struct PairOps {
  std::uint32_t source;
  std::uint32_t target;
  std::vector<ScatterOp> ops;
  std::uint64_t bytes = 0;
  std::uint64_t runs = 0;     // the ops' counts together
  std::uint64_t reserve = 0;  // ops before merging: what ops may hold at most

  // `count` runs of `length` bytes, `source_stride`/`target_stride` apart (count 1: one run). Merged into
  // the op before when they continue it: back to back on both sides (plain runs, as rows are), or the next
  // runs of its progression (a column piece continued by the next outer index, or its first row's op).
  void add(std::uint64_t source_offset, std::uint64_t target_offset, std::uint64_t length,
           std::uint64_t count, std::uint64_t source_stride, std::uint64_t target_stride) {
    bytes += length * count;
    if (!ops.empty()) {
      ScatterOp& last = ops.back();
      if (last.count == 1 && count == 1) {
        if (last.source_offset + last.length == source_offset &&
            last.target_offset + last.length == target_offset) {
          last.length += length;
          return;
        }
      } else if (last.length == length) {
        // The progression's strides: the strided one's (both's, which must agree).
        const std::uint64_t ss = last.count > 1 ? last.source_stride : source_stride;
        const std::uint64_t ts = last.count > 1 ? last.target_stride : target_stride;
        if ((count == 1 || (source_stride == ss && target_stride == ts)) &&
            last.source_offset + last.count * ss == source_offset &&
            last.target_offset + last.count * ts == target_offset) {
          last.count += count;
          last.source_stride = ss;
          last.target_stride = ts;
          runs += count;
          return;
        }
      }
    }
    runs += count;
    ops.push_back({source_offset, target_offset, length, count, count > 1 ? source_stride : 0,
                   count > 1 ? target_stride : 0});
  }
};

class Planning {
 public:
  Planning(const std::vector<ReshardSide>& sources, const std::vector<ReshardSide>& targets,
           const ReshardLimits& limits)
      : sources_(sources), targets_(targets), limits_(limits) {}

  Result<ReshardPlan> run(std::string fingerprint) {
    if (auto ok = check_sides(); !ok) return ok.error();
    index_sources();
    std::size_t tensors = 0;
    for (const ReshardSide& t : targets_) tensors += t.manifest.tensors.size();
    pieces_.reserve(2 * tensors);
    candidates_.reserve(4 * tensors);
    boxes_.reserve(8 * tensors);
    for (std::size_t t = 0; t < targets_.size(); ++t) {
      for (const Tensor& tensor : targets_[t].manifest.tensors) {
        if (auto ok = cut(static_cast<std::uint32_t>(t), tensor); !ok) return ok.error();
      }
    }
    assign();
    pairs_index_.assign(sources_.size() * targets_.size(), -1);
    if (auto ok = count_runs(); !ok) return ok.error();
    for (PairOps& p : pairs_) p.ops.reserve(p.reserve);
    for (const Piece& p : pieces_) emit(p);
    return finish(std::move(fingerprint));
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

  // Checks that every source holds the same tensor, and sorts them for cut(). Once per name.
  static Status index(Held& held) {
    const Holder& first = held.holders[0];
    for (const Holder& h : held.holders) {
      if (auto ok = same(*first.tensor, "sources", first.source, *h.tensor, "sources", h.source); !ok)
        return ok;
    }
    held.indexed = true;
    const std::size_t rank = first.tensor->shape.size();
    if (rank == 0) {
      for (const Holder& h : held.holders) held.offsets.push_back(h.tensor->offset);
      return {};
    }
    std::size_t most = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      std::vector<std::uint64_t> starts;
      for (const Holder& h : held.holders) starts.push_back(start_of(*h.tensor, d));
      std::sort(starts.begin(), starts.end());
      const auto distinct =
          static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
      if (distinct > most) {
        most = distinct;
        held.dim = d;
      }
    }
    const std::size_t d = held.dim;
    std::stable_sort(held.holders.begin(), held.holders.end(), [d](const Holder& a, const Holder& b) {
      return start_of(*a.tensor, d) < start_of(*b.tensor, d);
    });
    std::uint64_t reach = 0;
    held.boxes.reserve(2 * rank * held.holders.size());
    for (const Holder& h : held.holders) {
      held.starts.push_back(start_of(*h.tensor, d));
      reach = std::max(reach, start_of(*h.tensor, d) + h.tensor->shape[d]);
      held.reach.push_back(reach);
      held.offsets.push_back(h.tensor->offset);
      for (std::size_t k = 0; k < rank; ++k) held.boxes.push_back(start_of(*h.tensor, k));
      for (std::size_t k = 0; k < rank; ++k)
        held.boxes.push_back(start_of(*h.tensor, k) + h.tensor->shape[k]);
    }
    return {};
  }

  // The same dtype and global shape, or both said.
  static Status same(const Tensor& a, const char* a_side, std::size_t a_index, const Tensor& b,
                     const char* b_side, std::size_t b_index) {
    if (a.dtype == b.dtype && global_of(a) == global_of(b)) return {};
    return bad("tensor " + quoted(a.name) + " is " + a.dtype + " " + dims_text(global_of(a)) + " in " +
               a_side + "[" + std::to_string(a_index) + "] but " + b.dtype + " " + dims_text(global_of(b)) +
               " in " + b_side + "[" + std::to_string(b_index) + "]");
  }

  static std::string what(std::uint32_t t, const Tensor& tensor) {
    return "tensor " + quoted(tensor.name) + " of targets[" + std::to_string(t) + "]";
  }

  // `tensor` of target `t` cut into pieces by the source slices that meet it.
  Status cut(std::uint32_t t, const Tensor& tensor) {
    const auto found = holders_.find(tensor.name);
    if (found == holders_.end()) return bad(what(t, tensor) + " is in no source's manifest");
    Held& held = found->second;
    if (!held.indexed) {
      if (auto ok = index(held); !ok) return ok;
    }
    const Holder& first = held.holders[0];
    if (auto ok = same(*first.tensor, "sources", first.source, tensor, "targets", t); !ok) return ok.error();
    const std::size_t rank = tensor.shape.size();
    std::uint64_t lo[Manifest::kMaxRank], hi[Manifest::kMaxRank];
    for (std::size_t d = 0; d < rank; ++d) {
      if (tensor.shape[d] == 0) return {};  // matched, and nothing to move
      lo[d] = start_of(tensor, d);
      hi[d] = lo[d] + tensor.shape[d];
    }
    // The sources whose boxes meet the target's, and whether they all hold it whole.
    meeting_.clear();
    bool all_whole = true;
    std::size_t from = 0, to = held.holders.size();
    if (rank > 0) {  // those starting before the slice ends, past the last that all end before it starts
      from = std::upper_bound(held.reach.begin(), held.reach.end(), lo[held.dim]) - held.reach.begin();
      to = std::lower_bound(held.starts.begin(), held.starts.end(), hi[held.dim]) - held.starts.begin();
    }
    for (std::size_t i = from; i < to; ++i) {
      const std::uint64_t *s = held.lo(i, rank), *e = held.hi(i, rank);
      bool meets = true, whole = true;
      for (std::size_t d = 0; d < rank && meets; ++d) {
        meets = s[d] < hi[d] && lo[d] < e[d];
        whole = whole && s[d] <= lo[d] && hi[d] <= e[d];
      }
      if (meets) {
        meeting_.push_back(static_cast<std::uint32_t>(i));
        all_whole = all_whole && whole;
      }
    }
    if (meeting_.empty())
      return bad(what(t, tensor) + ": " + box_text(lo, hi, rank) + " is held by no source");
    const std::uint32_t bits = *dtype_bits(tensor.dtype);
    if (all_whole) {  // one piece, any of them (a replicated tensor, a slice inside one source's)
      pieces_total_ += 1;
      work_ += meeting_.size();
      box_words_ += 2 * rank;
      if (over_bounds()) return too_many(t, tensor);
      return add_piece(t, tensor, bits, lo, hi, held, meeting_);
    }
    // Per dimension the cuts of the meeting boxes inside the target's, and the grid of cells they make.
    std::uint64_t cells = 1;
    for (std::size_t d = 0; d < rank; ++d) {
      std::vector<std::uint64_t>& c = cuts_[d];
      c.assign({lo[d], hi[d]});
      for (const std::uint32_t i : meeting_) {
        const std::uint64_t s = held.lo(i, rank)[d], e = held.hi(i, rank)[d];
        if (s > lo[d]) c.push_back(s);
        if (e < hi[d]) c.push_back(e);
      }
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      cells *= c.size() - 1;  // at most 2,049 a dimension: bounded before it could overflow
      if (cells > limits_.max_ops) return too_many(t, tensor);
    }
    pieces_total_ += cells;
    work_ += cells * meeting_.size();
    box_words_ += cells * 2 * rank;
    if (over_bounds()) return too_many(t, tensor);
    // Each meeting source's cells: [first, last) per dimension in the cuts.
    const std::size_t m = meeting_.size();
    spans_.resize(2 * m * rank);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t d = 0; d < rank; ++d) {
        const std::vector<std::uint64_t>& c = cuts_[d];
        const std::uint64_t s = std::max(held.lo(meeting_[i], rank)[d], lo[d]);
        const std::uint64_t e = std::min(held.hi(meeting_[i], rank)[d], hi[d]);
        spans_[(2 * i) * rank + d] = std::lower_bound(c.begin(), c.end(), s) - c.begin();
        spans_[(2 * i + 1) * rank + d] = std::lower_bound(c.begin(), c.end(), e) - c.begin();
      }
    }
    std::size_t cell[Manifest::kMaxRank] = {};
    std::uint64_t cell_lo[Manifest::kMaxRank], cell_hi[Manifest::kMaxRank];
    for (std::uint64_t n = 0; n < cells; ++n) {
      holding_.clear();
      for (std::size_t i = 0; i < m; ++i) {
        bool holds = true;
        for (std::size_t d = 0; d < rank && holds; ++d) {
          holds = spans_[(2 * i) * rank + d] <= cell[d] && cell[d] < spans_[(2 * i + 1) * rank + d];
        }
        if (holds) holding_.push_back(meeting_[i]);
      }
      for (std::size_t d = 0; d < rank; ++d) {
        cell_lo[d] = cuts_[d][cell[d]];
        cell_hi[d] = cuts_[d][cell[d] + 1];
      }
      if (holding_.empty()) {
        return bad(what(t, tensor) + ": " + box_text(cell_lo, cell_hi, rank) + " is held by no source");
      }
      if (auto ok = add_piece(t, tensor, bits, cell_lo, cell_hi, held, holding_); !ok) return ok;
      for (std::size_t d = rank; d-- > 0;) {  // the next cell, row-major
        if (++cell[d] < cuts_[d].size() - 1) break;
        cell[d] = 0;
      }
    }
    return {};
  }

  // The piece [lo, hi) of target `t`'s `tensor`, held by `held`'s sources `which`.
  Status add_piece(std::uint32_t t, const Tensor& tensor, std::uint32_t bits, const std::uint64_t* lo,
                   const std::uint64_t* hi, const Held& held, const std::vector<std::uint32_t>& which) {
    const std::size_t rank = tensor.shape.size();
    const auto first = static_cast<std::uint32_t>(candidates_.size());
    candidates_.insert(candidates_.end(), which.begin(), which.end());
    const std::size_t box = boxes_.size();
    boxes_.insert(boxes_.end(), lo, lo + rank);
    boxes_.insert(boxes_.end(), hi, hi + rank);
    std::uint64_t elements = 1;
    for (std::size_t d = 0; d < rank; ++d) elements *= hi[d] - lo[d];
    // Sub-byte dtypes are placed only whole (Manifest::check): the piece is the tensor.
    const std::uint64_t bytes = bits % 8 == 0 ? elements * (bits / 8) : tensor.length;
    const auto count = static_cast<std::uint32_t>(which.size());
    pieces_.push_back({t, bits, &tensor, &held, box, bytes, first, count, first});
    return {};
  }

  // The pieces' bounds, which are what cutting costs in memory and time: at most max_ops pieces; their
  // boxes' words (4 a piece of a matrix: 16 bytes a dimension); pieces times the sources meeting them (the
  // candidates kept, indexed by 32 bits, and the tests made): 16 a piece, the replicas of a norm held by 64
  // ranks being 64 a piece but few.
  bool over_bounds() const {
    return pieces_total_ > limits_.max_ops || box_words_ > 4 * limits_.max_ops ||
           work_ > std::min<std::uint64_t>(16 * limits_.max_ops, UINT32_MAX);
  }

  // Candidate c (an index into candidates_) of piece p.
  const Holder& holder(const Piece& p, std::uint32_t c) const { return p.held->holders[candidates_[c]]; }

  Error too_many(std::uint32_t t, const Tensor& tensor) const {
    return too_big("the plan cuts the targets into too many pieces for a plan of at most " +
                   std::to_string(limits_.max_ops) + " ops (at " + what(t, tensor) +
                   "): the slices are too fine, or too many ranks hold each piece");
  }

  // Pieces one source holds go to it; then those several hold, largest first, each to the source whose
  // egress ends least loaded.
  void assign() {
    load_.assign(sources_.size(), 0);
    std::vector<std::uint32_t> shared;
    for (std::uint32_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i].count == 1) {
        load_[holder(pieces_[i], pieces_[i].first).source] += pieces_[i].bytes;
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
        timed = timed && sources_[holder(p, c).source].rate_bytes_per_second > 0;
      }
      const auto after = [&](std::uint32_t c) {
        const std::uint32_t s = holder(p, c).source;
        const double bytes = static_cast<double>(load_[s]) + static_cast<double>(p.bytes);
        return timed ? bytes / sources_[s].rate_bytes_per_second : bytes;
      };
      std::uint32_t best = p.first;
      for (std::uint32_t c = p.first + 1; c < p.first + p.count; ++c) {
        const double here = after(c), there = after(best);
        if (here < there || (here == there && holder(p, c).source < holder(p, best).source)) best = c;
      }
      p.chosen = best;
      load_[holder(p, best).source] += p.bytes;
    }
  }

  // The runs of piece `p` from its chosen source: the innermost dimensions the piece spans whole in both
  // slices collapse into one run with the dimension outside them (j below); the dimension outside that
  // (j - 1) makes the runs of one strided op, and every index of the dimensions outside it starts an op.
  // Calls f(source element, target element, elements a run, runs, source stride, target stride) for each op
  // in row-major order, strides in elements.
  template <typename F>
  static void runs(const Piece& p, const std::uint64_t* source_lo, const std::uint64_t* source_hi,
                   const std::uint64_t* lo, const std::uint64_t* hi, F&& f) {
    const Tensor& target = *p.tensor;
    const std::size_t rank = target.shape.size();
    if (rank == 0) return f(0, 0, 1, 1, 0, 0);
    const std::size_t j = collapsed(p, source_lo, source_hi, lo, hi);
    std::uint64_t run = 1;
    for (std::size_t d = j; d < rank; ++d) run *= hi[d] - lo[d];
    // Strides in elements, and where the piece starts in each slice.
    std::uint64_t source_stride[Manifest::kMaxRank], target_stride[Manifest::kMaxRank];
    std::uint64_t s0 = 0, t0 = 0;
    for (std::size_t d = rank, ss = 1, ts = 1; d-- > 0;) {
      source_stride[d] = ss;
      target_stride[d] = ts;
      s0 += (lo[d] - source_lo[d]) * ss;
      t0 += (lo[d] - start_of(target, d)) * ts;
      ss *= source_hi[d] - source_lo[d];
      ts *= target.shape[d];
    }
    if (j == 0) return f(s0, t0, run, 1, 0, 0);
    // Odometer over dimensions [0, j - 1); dimension j - 1 is each op's runs.
    const std::size_t inner = j - 1;
    const std::uint64_t rows = hi[inner] - lo[inner];
    std::uint64_t index[Manifest::kMaxRank] = {};
    while (true) {
      std::uint64_t s = s0, t = t0;
      for (std::size_t d = 0; d < inner; ++d) {
        s += index[d] * source_stride[d];
        t += index[d] * target_stride[d];
      }
      f(s, t, run, rows, source_stride[inner], target_stride[inner]);
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

  // The first dimension of the run: the innermost dimensions piece [lo, hi) spans whole in both the source
  // slice [source_lo, source_hi) and the target's collapse into it.
  static std::size_t collapsed(const Piece& p, const std::uint64_t* source_lo, const std::uint64_t* source_hi,
                               const std::uint64_t* lo, const std::uint64_t* hi) {
    const std::size_t rank = p.tensor->shape.size();
    std::size_t j = rank == 0 ? 0 : rank - 1;
    while (j > 0 && hi[j] - lo[j] == source_hi[j] - source_lo[j] && hi[j] - lo[j] == p.tensor->shape[j]) --j;
    return j;
  }

  // The ops the pieces make before merging (one per index of the dimensions outside a strided op's),
  // bounded before any is made, and counted per pair so that each pair's ops are allocated once.
  Status count_runs() {
    std::uint64_t total = 0;
    for (const Piece& p : pieces_) {
      const std::size_t rank = p.tensor->shape.size();
      const std::uint32_t from = candidates_[p.chosen];
      const std::uint64_t *source_lo = p.held->lo(from, rank), *source_hi = p.held->hi(from, rank);
      const std::uint64_t* lo = boxes_.data() + p.box;
      const std::uint64_t* hi = lo + rank;
      const std::size_t j = collapsed(p, source_lo, source_hi, lo, hi);
      std::uint64_t n = 1;
      for (std::size_t d = 0; d + 1 < j; ++d) n *= hi[d] - lo[d];  // <= the piece's elements: no overflow
      total += n;
      pair(p.held->holders[from].source, p.target).reserve += n;
      if (n > limits_.max_ops || total > limits_.max_ops) {
        return too_big("the plan takes more than " + std::to_string(limits_.max_ops) + " ops (at tensor " +
                       quoted(p.tensor->name) + " of targets[" + std::to_string(p.target) +
                       "]): the slices are too fine to move as strided byte runs");
      }
    }
    return {};
  }

  PairOps& pair(std::uint32_t source, std::uint32_t target) {
    std::int32_t& at = pairs_index_[source * targets_.size() + target];
    if (at < 0) {
      at = static_cast<std::int32_t>(pairs_.size());
      pairs_.push_back({source, target, {}, 0, 0, 0});
    }
    return pairs_[static_cast<std::size_t>(at)];
  }

  void emit(const Piece& p) {
    const std::uint32_t from = candidates_[p.chosen];
    PairOps& ops = pair(p.held->holders[from].source, p.target);
    const std::uint64_t source_offset = p.held->offsets[from];
    const Tensor& target = *p.tensor;
    const std::size_t rank = target.shape.size();
    const std::uint32_t bits = p.bits;
    if (bits % 8 != 0) return ops.add(source_offset, target.offset, target.length, 1, 0, 0);  // whole (cut())
    const std::uint64_t size = bits / 8;
    const std::uint64_t* lo = boxes_.data() + p.box;
    runs(p, p.held->lo(from, rank), p.held->hi(from, rank), lo, lo + rank,
         [&](std::uint64_t s, std::uint64_t t, std::uint64_t n, std::uint64_t count, std::uint64_t ss,
             std::uint64_t ts) {
           ops.add(source_offset + s * size, target.offset + t * size, n * size, count, ss * size, ts * size);
         });
  }

  Result<ReshardPlan> finish(std::string fingerprint) {
    ReshardPlan plan;
    plan.source_bytes.assign(sources_.size(), 0);
    plan.target_bytes.assign(targets_.size(), 0);
    std::uint64_t pieces = 0;  // a run is cut at most once per batch it crosses
    std::uint64_t total = 0;
    for (const PairOps& p : pairs_) {
      pieces += p.ops.size() + p.bytes / kMaxScatterBytes + p.runs / kMaxScatterRuns;
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
    plan.fingerprint = std::move(fingerprint);
    return plan;
  }

  // A pair's ops as batches of at most kMaxScatterOps ops, kMaxScatterRuns runs and kMaxScatterBytes bytes:
  // a plain run is cut by bytes, a strided op by runs.
  static void into_batches(PairOps& p, std::vector<ReshardBatch>& out) {
    if (p.ops.size() <= kMaxScatterOps && p.bytes <= kMaxScatterBytes && p.runs <= kMaxScatterRuns) {
      out.push_back({p.source, p.target, std::move(p.ops), p.bytes, p.runs});
      return;
    }
    ReshardBatch batch{p.source, p.target, {}, 0, 0};
    const auto full = [&batch] {
      return batch.ops.size() == kMaxScatterOps || batch.bytes == kMaxScatterBytes ||
             batch.runs == kMaxScatterRuns;
    };
    const auto next = [&] {
      out.push_back(std::move(batch));
      batch = {p.source, p.target, {}, 0, 0};
    };
    const auto plain = [&](std::uint64_t source_offset, std::uint64_t target_offset, std::uint64_t length) {
      for (std::uint64_t done = 0; done < length;) {
        if (full()) next();
        const std::uint64_t n = std::min(length - done, kMaxScatterBytes - batch.bytes);
        batch.ops.push_back({source_offset + done, target_offset + done, n});
        batch.bytes += n;
        batch.runs += 1;
        done += n;
      }
    };
    for (const ScatterOp& op : p.ops) {
      if (op.count == 1 || op.length > kMaxScatterBytes) {  // runs too long to share a batch: each alone
        op.for_each_run(plain);
        continue;
      }
      for (std::uint64_t done = 0; done < op.count;) {
        if (full()) next();
        const std::uint64_t k = std::min(
            {op.count - done, kMaxScatterRuns - batch.runs, (kMaxScatterBytes - batch.bytes) / op.length});
        if (k == 0) {  // not one more run fits the bytes left
          next();
          continue;
        }
        batch.ops.push_back({op.source_offset + done * op.source_stride,
                             op.target_offset + done * op.target_stride, op.length, k,
                             k > 1 ? op.source_stride : 0, k > 1 ? op.target_stride : 0});
        batch.bytes += k * op.length;
        batch.runs += k;
        done += k;
      }
    }
    if (!batch.ops.empty()) out.push_back(std::move(batch));
  }

  const std::vector<ReshardSide>& sources_;
  const std::vector<ReshardSide>& targets_;
  const ReshardLimits limits_;
  std::unordered_map<std::string_view, Held> holders_;
  // cut()'s, reused from tensor to tensor.
  std::vector<std::uint32_t> meeting_;  // indices into the Held's holders
  std::vector<std::uint32_t> holding_;
  std::array<std::vector<std::uint64_t>, Manifest::kMaxRank> cuts_;
  std::vector<std::size_t> spans_;
  std::vector<Piece> pieces_;
  std::vector<std::uint32_t> candidates_;  // pieces' candidates, as indices into their Held's holders
  std::vector<std::uint64_t> boxes_;
  std::uint64_t pieces_total_ = 0;
  std::uint64_t work_ = 0;
  std::uint64_t box_words_ = 0;
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

std::uint64_t ReshardPlan::runs() const {
  std::uint64_t n = 0;
  for (const ReshardBatch& b : batches) n += b.runs;
  return n;
}

Result<ReshardPlan> plan_reshard(const std::vector<ReshardSide>& sources,
                                 const std::vector<ReshardSide>& targets, const ReshardLimits& limits) {
  return plan_reshard(sources, targets, limits, reshard_fingerprint(sources, targets));
}

Result<ReshardPlan> plan_reshard(const std::vector<ReshardSide>& sources,
                                 const std::vector<ReshardSide>& targets, const ReshardLimits& limits,
                                 std::string fingerprint) {
  return Planning(sources, targets, limits).run(std::move(fingerprint));
}

}  // namespace conduit::api
