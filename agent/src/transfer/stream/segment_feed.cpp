#include "transfer/stream/segment_feed.h"

#include <algorithm>
#include <string>
#include <system_error>

#include "conduit/crc32c.h"

namespace conduit::agent {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

Status check_shape(const SegmentFeed::Shape& s) {
  if (s.end <= s.begin || s.segment == 0 || s.slots < 2) {
    return make_error(ErrorCode::InvalidArgument,
                      "a segment feed needs a non-empty range, a segment size and "
                      "at least 2 slots");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SegmentFeed>> SegmentFeed::over_memory(std::span<const std::byte> range,
                                                              const Registration& local, Shape shape) {
  if (auto ok = check_shape(shape); !ok) return ok.error();
  if (shape.end > range.size()) return make_error(ErrorCode::InvalidArgument, "segment feed past its range");
  std::unique_ptr<SegmentFeed> feed(new SegmentFeed());
  feed->shape_ = shape;
  feed->range_ = range;
  feed->local_ = &local;
  feed->start();
  return feed;
}

Result<std::unique_ptr<SegmentFeed>> SegmentFeed::over_file(int fd, std::uint64_t file_offset, bool direct,
                                                            const MemoryRegion& slots, Transport& transport,
                                                            std::span<const std::uint32_t> rails,
                                                            Shape shape) {
  if (auto ok = check_shape(shape); !ok) return ok.error();
  const std::uint64_t bytes = shape.segment * static_cast<std::uint64_t>(shape.slots);
  if (slots.bytes().size() < bytes) {
    return make_error(ErrorCode::InvalidArgument, "read-ahead slots: " + std::to_string(slots.size()) +
                                                      " bytes of host memory for " + std::to_string(bytes));
  }
  std::unique_ptr<SegmentFeed> feed(new SegmentFeed());
  feed->shape_ = shape;
  feed->reader_.emplace(fd, direct);
  feed->file_offset_ = file_offset;
  feed->slots_memory_ = slots.bytes().first(bytes);
  auto reg = transport.register_memory(slots, Access::Local, 0, bytes, rails);
  if (!reg) return make_error(reg.error().code, "registering the read-ahead slots: " + reg.error().message);
  feed->slots_registration_ = std::move(*reg);
  feed->start();
  return feed;
}

void SegmentFeed::start() {
  count_ = (shape_.end - shape_.begin + shape_.segment - 1) / shape_.segment;
  ring_.resize(static_cast<std::size_t>(shape_.slots));
  producer_ = std::thread([this] { produce(); });
}

SegmentFeed::~SegmentFeed() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

Status SegmentFeed::fill(Segment& s) {
  if (reader_) {
    // The segment's slot: whole blocks of a direct read may fill it past the segment, never past the slot.
    std::byte* into = slots_memory_.data() + s.local_offset;
    if (auto read = reader_->read(into, shape_.segment, file_offset_ + s.offset, s.length); !read)
      return read.error();
    s.bytes = {into, s.length};
  } else {
    s.bytes = range_.subspan(s.offset, s.length);
  }
  s.crc32c = shape_.slice > 0 ? crc32c_slices(s.bytes, shape_.slice) : std::vector<std::uint32_t>{};
  return {};
}

void SegmentFeed::produce() {
  for (std::uint64_t i = 0; i < count_; ++i) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || i - given_back_ < static_cast<std::uint64_t>(shape_.slots); });
      if (stop_) return;
    }
    const std::size_t slot = static_cast<std::size_t>(i % static_cast<std::uint64_t>(shape_.slots));
    Segment s;
    s.offset = shape_.begin + i * shape_.segment;
    s.length = std::min(shape_.segment, shape_.end - s.offset);
    if (reader_) {
      s.local = &slots_registration_;
      s.local_offset = static_cast<std::uint64_t>(slot) * shape_.segment;
    } else {
      s.local = local_;
      s.local_offset = s.offset;
    }
    if (shape_.gate) {
      Status ready = shape_.gate(s.offset + s.length, [this] {
        std::lock_guard lock(mu_);
        return stop_;
      });
      if (!ready) {
        std::lock_guard lock(mu_);
        error_ = ready.error();
        cv_.notify_all();
        return;
      }
    }
    const auto began = std::chrono::steady_clock::now();
    Status filled = fill(s);
    std::lock_guard lock(mu_);
    busy_ += seconds_since(began);
    if (reader_) file_bytes_ = {reader_->cached_bytes(), reader_->direct_bytes()};
    if (!filled) {
      error_ = filled.error();
      cv_.notify_all();
      return;
    }
    ring_[slot] = std::move(s);
    ++produced_;
    cv_.notify_all();
  }
}

Result<const SegmentFeed::Segment*> SegmentFeed::next(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, wait, [&] { return taken_ < produced_ || error_ || taken_ == count_; });
  if (taken_ < produced_) {
    const Segment* s = &ring_[static_cast<std::size_t>(taken_ % static_cast<std::uint64_t>(shape_.slots))];
    ++taken_;
    return s;
  }
  if (error_) return *error_;
  return static_cast<const Segment*>(nullptr);
}

bool SegmentFeed::done() const {
  std::lock_guard lock(mu_);
  return taken_ == count_;
}

void SegmentFeed::give_back() {
  {
    std::lock_guard lock(mu_);
    if (given_back_ < taken_) ++given_back_;
  }
  cv_.notify_all();
}

double SegmentFeed::busy_seconds() const {
  std::lock_guard lock(mu_);
  return busy_;
}

SegmentFeed::FileBytes SegmentFeed::file_bytes() const {
  std::lock_guard lock(mu_);
  return file_bytes_;
}

}  // namespace conduit::agent
