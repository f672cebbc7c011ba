#include "transfer/staged/target_path.h"

namespace conduit::agent {

namespace {

Error prefixed(const Error& e, const char* what) {
  return make_error(e.code, std::string(what) + ": " + e.message);
}

}  // namespace

LandingNotices::~LandingNotices() {
  if (pending_.valid()) pending_.wait();
}

Status LandingNotices::finish() {
  if (!pending_.valid()) return {};
  Status s = pending_.get();
  if (s) confirmed_end_ = pending_end_;
  return s;
}

Status LandingNotices::push(std::uint64_t offset, std::uint64_t length) {
  if (auto s = finish(); !s) return s;
  const std::uint64_t at = region_offset_ + offset;
  pending_end_ = offset + length;
  pending_ = std::async(std::launch::async, [this, at, length] {
    return api::AgentClient(url_, peers_)
        .staging(region_, {.offset = at, .length = length, .to_device = true});
  });
  return {};
}

TargetPath::TargetPath(const api::ClientOptions& peers, Target target, OpKind op, std::uint64_t begin)
    : peers_(peers),
      target_(std::move(target)),
      op_(op),
      begin_(begin),
      notices_(peers, target_.url, target_.region, target_.region_offset) {}

Status TargetPath::before(std::uint64_t offset, std::uint64_t length) {
  if (!target_.staged || op_ != OpKind::Read) return {};
  // The target copies the segment from its device into the staging buffer we read from.
  if (auto s = api::AgentClient(target_.url, peers_)
                   .staging(target_.region,
                            {.offset = target_.region_offset + offset, .length = length, .to_device = false});
      !s) {
    return prefixed(s.error(), "the target agent could not stage CUDA memory for reading");
  }
  return {};
}

Result<std::optional<std::uint64_t>> TargetPath::after(std::uint64_t offset, std::uint64_t length) {
  if (!notices()) return std::optional<std::uint64_t>(offset + length);
  // Landed in the target's staging buffer: the target copies it to its device while the next one goes.
  if (auto s = notices_.push(offset, length); !s) {
    return prefixed(s.error(), "the target agent could not copy landed bytes to CUDA memory");
  }
  if (notices_.confirmed_end() > begin_) return std::optional<std::uint64_t>(notices_.confirmed_end());
  return std::optional<std::uint64_t>();
}

Result<std::optional<std::uint64_t>> TargetPath::finish(std::uint64_t end) {
  if (!notices()) return std::optional<std::uint64_t>();
  if (auto s = notices_.finish(); !s) {
    return prefixed(s.error(), "the target agent could not copy landed bytes to CUDA memory");
  }
  if (end > begin_) return std::optional<std::uint64_t>(end);
  return std::optional<std::uint64_t>();
}

}  // namespace conduit::agent
