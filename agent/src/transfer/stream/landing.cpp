#include "transfer/stream/landing.h"

#include <string>

#include "conduit/crc32c.h"

namespace conduit::agent {

namespace {

constexpr std::uint64_t kMaxSlices = 65536;
// How long a report past what was saved waits for the writer's report before it: that one is being
// checked and written (a 16 MiB segment: milliseconds), or it found slices to re-send and comes again
// once they are. Past this the writer is taken to be gone, or out of order: Conflict, as without waiting.
constexpr std::chrono::seconds kOrderWait{5};
// Clean reports kept past confirmed_: a writer has two in flight; more are a writer out of order.
constexpr std::size_t kMaxAhead = 16;

// Asked both before a save waits its turn and again under the write lock (a commit may come between).
Error already_committed() {
  return make_error(ErrorCode::Conflict, "the save of this grant is already committed");
}

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

}  // namespace

Landing::Landing(std::span<std::byte> memory, std::uint64_t stream_bytes, bool ring,
                 std::optional<SaveFile> save, std::string writer)
    : memory_(memory),
      stream_bytes_(stream_bytes),
      ring_(ring),
      save_(std::move(save)),
      writer_(std::move(writer)) {}

Result<Landing::Report> Landing::landed(std::uint64_t offset, std::uint64_t length, std::uint64_t slice,
                                        const std::vector<std::uint32_t>& crc32c, bool wait_for_previous) {
  if (length == 0) return make_error(ErrorCode::InvalidArgument, "length must be at least 1 byte");
  if (offset > stream_bytes_ || length > stream_bytes_ - offset) {
    return make_error(ErrorCode::InvalidArgument, "range " + range_text(offset, length) + " is outside the " +
                                                      std::to_string(stream_bytes_) + " bytes of the grant");
  }
  const std::uint64_t size = memory_.size();
  const std::uint64_t at = ring_ ? offset % size : offset;
  if (length > size - at) {
    return make_error(ErrorCode::InvalidArgument, "range " + range_text(offset, length) +
                                                      " wraps around the " + std::to_string(size) +
                                                      "-byte ring: a segment must fit between ring offset " +
                                                      std::to_string(at) + " and its end");
  }
  if (!crc32c.empty()) {
    if (slice == 0) return make_error(ErrorCode::InvalidArgument, "slice must be at least 1 byte");
    const std::uint64_t count = (length - 1) / slice + 1;
    if (count > kMaxSlices || count != crc32c.size()) {
      return make_error(ErrorCode::InvalidArgument, std::to_string(crc32c.size()) + " checksums for " +
                                                        std::to_string(count) + " slices of " +
                                                        std::to_string(slice) + " bytes (at most " +
                                                        std::to_string(kMaxSlices) + ")");
    }
  }

  // Checked outside the lock, so two reports are checked side by side.
  const auto bytes = memory_.subspan(at, length);
  Report report;
  if (!crc32c.empty()) {
    const auto mine = crc32c_slices(bytes, slice);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] != crc32c[i]) report.mismatched.push_back(i);
    }
  }
  std::unique_lock lock(mu_);
  reported_ = true;
  if (report.mismatched.empty()) note_clean(offset, offset + length);
  if (!save_ || !report.mismatched.empty()) return report;
  if (wait_for_previous) {
    const std::uint64_t failed = failed_saves_;
    order_cv_.wait_for(lock, kOrderWait,
                       [&] { return offset <= saved_end_ || committed_ || failed_saves_ != failed; });
  }
  if (committed_) return already_committed();
  if (offset > saved_end_) {
    return make_error(ErrorCode::Conflict, "bytes " + range_text(offset, length) + " landed before [" +
                                               std::to_string(saved_end_) + ", " + std::to_string(offset) +
                                               "): a save is written in order");
  }
  lock.unlock();
  Status written;
  {
    std::lock_guard write(write_mu_);
    if (save_->committed()) {
      written = already_committed();
    } else {
      const WrittenBytes before = save_->written();
      written = save_->write_at(offset, bytes);
      report.written = {save_->written().direct - before.direct, save_->written().cached - before.cached};
    }
  }
  lock.lock();
  if (!written) {
    ++failed_saves_;
    order_cv_.notify_all();
    return written.error();
  }
  saved_end_ = std::max(saved_end_, offset + length);
  order_cv_.notify_all();
  report.saved = true;
  return report;
}

void Landing::note_clean(std::uint64_t offset, std::uint64_t end) {
  reported_end_ = std::max(reported_end_, end);
  if (ring_ || end <= confirmed_) return;
  if (offset > confirmed_) {
    if (clean_ahead_.size() < kMaxAhead || clean_ahead_.contains(offset))
      clean_ahead_[offset] = std::max(clean_ahead_[offset], end);
    return;
  }
  confirmed_ = end;
  while (!clean_ahead_.empty() && clean_ahead_.begin()->first <= confirmed_) {
    confirmed_ = std::max(confirmed_, clean_ahead_.begin()->second);
    clean_ahead_.erase(clean_ahead_.begin());
  }
  confirmed_cv_.notify_all();
}

Result<bool> Landing::commit(std::uint64_t bytes) {
  std::lock_guard write(write_mu_);
  std::lock_guard lock(mu_);
  if (committed_) return false;
  // A save needs the whole stream; a write into memory may cover the grant's range up to `bytes` only.
  const std::uint64_t landed = save_ ? saved_end_ : reported_end_;
  if ((save_ ? bytes != stream_bytes_ : bytes > stream_bytes_) || landed < bytes) {
    return make_error(ErrorCode::Conflict, "asked to commit " + std::to_string(bytes) + " bytes; " +
                                               std::to_string(landed) + " of the grant's " +
                                               std::to_string(stream_bytes_) + " were reported landed");
  }
  if (save_) {
    if (auto s = save_->commit(bytes); !s) return s.error();
  }
  committed_ = true;
  return true;
}

bool Landing::reported() const {
  std::lock_guard lock(mu_);
  return reported_;
}

std::uint64_t Landing::confirmed() const {
  std::lock_guard lock(mu_);
  return confirmed_;
}

std::uint64_t Landing::wait_confirmed(std::uint64_t end, std::chrono::milliseconds wait) const {
  std::unique_lock lock(mu_);
  confirmed_cv_.wait_for(lock, wait, [&] { return confirmed_ >= end; });
  return confirmed_;
}

nlohmann::json Landing::to_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json j{
      {"ring", ring_}, {"streamBytes", stream_bytes_}, {"savedBytes", saved_end_}, {"committed", committed_}};
  if (save_) j["file"] = save_->file();
  return j;
}

}  // namespace conduit::agent
