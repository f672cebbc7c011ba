#include "stream/landing.h"

#include <string>

#include "conduit/crc32c.h"

namespace conduit::agent {

namespace {

constexpr std::uint64_t kMaxSlices = 65536;

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
                                        const std::vector<std::uint32_t>& crc32c) {
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

  std::lock_guard lock(mu_);
  const auto bytes = memory_.subspan(at, length);
  Report report;
  if (!crc32c.empty()) {
    const auto mine = crc32c_slices(bytes, slice);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (mine[i] != crc32c[i]) report.mismatched.push_back(i);
    }
  }
  if (report.mismatched.empty() && !ring_ && offset <= confirmed_ && offset + length > confirmed_) {
    confirmed_ = offset + length;
    confirmed_cv_.notify_all();
  }
  if (report.mismatched.empty()) reported_end_ = std::max(reported_end_, offset + length);
  if (!save_ || !report.mismatched.empty()) return report;
  if (committed_) return make_error(ErrorCode::Conflict, "the save of this grant is already committed");
  if (offset > saved_end_) {
    return make_error(ErrorCode::Conflict, "bytes " + range_text(offset, length) + " landed before [" +
                                               std::to_string(saved_end_) + ", " + std::to_string(offset) +
                                               "): a save is written in order");
  }
  const WrittenBytes before = save_->written();
  if (auto written = save_->write_at(offset, bytes); !written) return written.error();
  saved_end_ = std::max(saved_end_, offset + length);
  report.saved = true;
  report.written = {save_->written().direct - before.direct, save_->written().cached - before.cached};
  return report;
}

Result<bool> Landing::commit(std::uint64_t bytes) {
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
