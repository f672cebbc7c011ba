// Reshard plans by fingerprint: manifests' digests and the plans' fingerprint (canonical JSON streamed
// through OpenSSL's SHA-256), and the LRU cache of plans keyed by it.
#include <charconv>
#include <nlohmann/json.hpp>

#include "conduit/api/reshard_plan.h"
#include "conduit/common/openssl.h"

namespace conduit::api {

namespace {

// Canonical JSON written as it is hashed, in 64 KiB pieces: 96 ranks of a 1,000-tensor model are ~10 MB of
// tensor tables, written by hand (std::to_chars, no nlohmann::json objects) rather than built and dumped.
class CanonicalDigest {
 public:
  CanonicalDigest() : ctx_(EVP_MD_CTX_new()) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
    buffer_.reserve(kFlush + 4096);
  }

  void text(std::string_view s) { buffer_.append(s); }
  void number(std::uint64_t n) {
    char digits[24];
    buffer_.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
  }
  void dims(const std::vector<std::uint64_t>& d) {
    buffer_.push_back('[');
    for (std::size_t i = 0; i < d.size(); ++i) {
      if (i) buffer_.push_back(',');
      number(d[i]);
    }
    buffer_.push_back(']');
  }
  void zeros(std::size_t n) {
    buffer_.push_back('[');
    for (std::size_t i = 0; i < n; ++i) buffer_.append(i ? ",0" : "0");
    buffer_.push_back(']');
  }
  // A JSON string: '"' and '\' escaped, control characters as \u00XX, every other byte as it is (names are
  // UTF-8 from any reader; bytes that are not stay distinct rather than replaced).
  void string(std::string_view s) {
    buffer_.push_back('"');
    unsigned escapes = 0;  // no early exit: the compiler vectorizes it, and names rarely need any
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      escapes |= static_cast<unsigned>(u < 0x20) | static_cast<unsigned>(u == '"') |
                 static_cast<unsigned>(u == '\\');
    }
    if (escapes == 0) {
      buffer_.append(s);
      buffer_.push_back('"');
      return;
    }
    std::size_t plain = 0;  // the start of the run of bytes written as they are
    for (std::size_t i = 0; i < s.size(); ++i) {
      const auto u = static_cast<unsigned char>(s[i]);
      if (u >= 0x20 && u != '"' && u != '\\') continue;
      buffer_.append(s.substr(plain, i - plain));
      plain = i + 1;
      if (u >= 0x20) {
        buffer_.push_back('\\');
        buffer_.push_back(static_cast<char>(u));
      } else {
        static constexpr char kHex[] = "0123456789abcdef";
        buffer_.append("\\u00");
        buffer_.push_back(kHex[u >> 4]);
        buffer_.push_back(kHex[u & 15]);
      }
    }
    buffer_.append(s.substr(plain));
    buffer_.push_back('"');
  }
  // Hands what is written so far to the digest once it is 64 KiB.
  void maybe_flush() {
    if (buffer_.size() >= kFlush) flush();
  }

  std::string hex() {
    flush();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &n);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out.push_back(kHex[digest[i] >> 4]);
      out.push_back(kHex[digest[i] & 15]);
    }
    return out;
  }

 private:
  static constexpr std::size_t kFlush = 64 << 10;
  void flush() {
    EVP_DigestUpdate(ctx_.get(), buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  ossl::MdCtx ctx_;
  std::string buffer_;
};

void side(CanonicalDigest& out, const std::vector<ReshardSideKey>& ranks) {
  out.text("[");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    out.text(r ? ",{\"manifest\":" : "{\"manifest\":");
    out.string(ranks[r].manifest_digest);
    out.text(",\"rate\":");
    out.text(nlohmann::json(ranks[r].rate_bytes_per_second).dump());
    out.text("}");
  }
  out.text("]");
}

std::vector<ReshardSideKey> keys(const std::vector<ReshardSide>& ranks) {
  std::vector<ReshardSideKey> out;
  out.reserve(ranks.size());
  for (const ReshardSide& r : ranks) out.push_back({manifest_digest(r.manifest), r.rate_bytes_per_second});
  return out;
}

}  // namespace

std::string manifest_digest(const Manifest& manifest) {
  CanonicalDigest out;
  out.text("[");
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    const Tensor& t = manifest.tensors[i];
    out.text(i ? ",[" : "[");
    out.string(t.name);
    out.text(",");
    out.string(t.dtype);
    out.text(",");
    out.dims(t.shape);
    out.text(",");
    out.number(t.offset);
    out.text(",");
    out.number(t.length);
    out.text(",");
    if (t.placement) {
      out.dims(t.placement->global_shape);
      out.text(",");
      out.dims(t.placement->start);
    } else {
      out.dims(t.shape);
      out.text(",");
      out.zeros(t.shape.size());
    }
    out.text("]");
    out.maybe_flush();
  }
  out.text("]");
  return out.hex();
}

std::string reshard_fingerprint(const std::vector<ReshardSideKey>& sources,
                                const std::vector<ReshardSideKey>& targets) {
  CanonicalDigest out;
  out.text("{\"v\":1,\"sources\":");
  side(out, sources);
  out.text(",\"targets\":");
  side(out, targets);
  out.text("}");
  return out.hex();
}

std::string reshard_fingerprint(const std::vector<ReshardSide>& sources,
                                const std::vector<ReshardSide>& targets) {
  return reshard_fingerprint(keys(sources), keys(targets));
}

ReshardPlanner::ReshardPlanner(std::size_t max_plans, std::uint64_t max_cached_ops, ReshardLimits limits)
    : max_plans_(max_plans), max_cached_ops_(max_cached_ops), limits_(limits) {}

std::shared_ptr<const ReshardPlan> ReshardPlanner::touch(const std::string& fingerprint) {
  const auto found = by_fingerprint_.find(fingerprint);
  if (found == by_fingerprint_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, found->second);
  return found->second->second;
}

std::shared_ptr<const ReshardPlan> ReshardPlanner::find(const std::string& fingerprint) {
  const std::lock_guard lock(mutex_);
  return touch(fingerprint);
}

std::size_t ReshardPlanner::size() const {
  const std::lock_guard lock(mutex_);
  return lru_.size();
}

Result<ReshardPlanner::Planned> ReshardPlanner::plan(const std::vector<ReshardSide>& sources,
                                                     const std::vector<ReshardSide>& targets) {
  const std::string fingerprint = reshard_fingerprint(sources, targets);
  if (auto cached = find(fingerprint)) return Planned{std::move(cached), true};
  auto made = plan_reshard(sources, targets, limits_, fingerprint);
  if (!made) return made.error();
  auto plan = std::make_shared<const ReshardPlan>(std::move(*made));
  const std::uint64_t ops = plan->ops();
  const std::lock_guard lock(mutex_);
  if (auto first = touch(fingerprint)) return Planned{std::move(first), false};  // another miss kept it first
  if (max_plans_ == 0 || ops > max_cached_ops_) return Planned{std::move(plan), false};
  while (!lru_.empty() && (lru_.size() >= max_plans_ || cached_ops_ + ops > max_cached_ops_)) {
    cached_ops_ -= lru_.back().second->ops();
    by_fingerprint_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(fingerprint, plan);
  by_fingerprint_.emplace(fingerprint, lru_.begin());
  cached_ops_ += ops;
  return Planned{std::move(plan), false};
}

}  // namespace conduit::api
