// The source end of a pipelined transfer: its range cut into segments (one batch each), produced ahead of
// the wire by a thread of its own. From a file, each segment is read into one of a few registered slots;
// from host memory it is already in place and only checksummed. With verify, the CRC32C of each slice is
// computed here, as the bytes pass, so no second pass over memory follows. The consumer takes segments in
// order and gives each back once nothing needs its bytes any more (the target confirmed them), which frees
// its slot for a segment further on: a file source holds at most `slots` segments of memory, whatever
// its size. docs/pipelines.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/memory_region.h"
#include "conduit/transport.h"
#include "files/source_reader.h"

namespace conduit::agent {

class SegmentFeed {
 public:
  struct Segment {
    std::uint64_t offset = 0;  // into the range
    std::uint64_t length = 0;
    const Registration* local = nullptr;
    std::uint64_t local_offset = 0;
    std::span<const std::byte> bytes;   // where the segment's bytes are, for a re-send's checksum
    std::vector<std::uint32_t> crc32c;  // one per slice, when checksumming
  };

  struct Shape {
    std::uint64_t begin = 0;  // range offsets [begin, end)
    std::uint64_t end = 0;
    std::uint64_t segment = 0;  // bytes per segment (the last may be shorter)
    std::uint64_t slice = 0;    // CRC32C per this many bytes; 0: no checksums
    int slots = 4;              // segments produced ahead and held at most
    // Set: range bytes are there only as they arrive (a Chain hop forwarding what lands on it). Called
    // before each segment with its end; returns once [0, end) may be read, or the error that ends the
    // feed. It must return soon after `stopping()` turns true (the feed is being destroyed).
    std::function<Status(std::uint64_t end, const std::function<bool()>& stopping)> gate{};
  };

  // Host memory already registered: `range` is the whole range, `local` registers it (range offsets are
  // its offsets).
  static Result<std::unique_ptr<SegmentFeed>> over_memory(std::span<const std::byte> range,
                                                          const Registration& local, Shape shape);
  // A file: range offset 0 is `file_offset` of `fd` (which must outlive the feed). The slots are `slots`
  // (host memory of at least shape.segment x shape.slots bytes, kept by the caller while the feed lives),
  // registered with `transport` on `rails`. `direct`: what the page cache does not hold may be read
  // around it (SourceReader).
  static Result<std::unique_ptr<SegmentFeed>> over_file(int fd, std::uint64_t file_offset, bool direct,
                                                        const MemoryRegion& slots, Transport& transport,
                                                        std::span<const std::uint32_t> rails, Shape shape);

  SegmentFeed(const SegmentFeed&) = delete;
  SegmentFeed& operator=(const SegmentFeed&) = delete;
  ~SegmentFeed();  // stops the producer and waits for it

  // The next segment in order, waiting up to `wait` for it: null when not ready yet, or when every segment
  // was taken (done() says which). The error that stopped the producer (a short read, an I/O error).
  Result<const Segment*> next(std::chrono::milliseconds wait);
  bool done() const;
  // The oldest segment taken and not yet given back is no longer needed.
  void give_back();
  // Seconds the producer spent reading and checksumming: the read stage's own time.
  double busy_seconds() const;
  // A file's bytes read so far out of the page cache and around it (O_DIRECT).
  struct FileBytes {
    std::uint64_t cached = 0;
    std::uint64_t direct = 0;
  };
  FileBytes file_bytes() const;

 private:
  SegmentFeed() = default;
  void start();
  void produce();
  Status fill(Segment& s);

  Shape shape_;
  std::uint64_t count_ = 0;  // segments in the range
  // File sources.
  std::optional<SourceReader> reader_;
  std::uint64_t file_offset_ = 0;
  std::span<std::byte> slots_memory_;  // the caller's (over_file), kept while the feed lives
  Registration slots_registration_;
  // Memory sources.
  std::span<const std::byte> range_;
  const Registration* local_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Segment> ring_;     // slot i % slots holds segment i
  std::uint64_t produced_ = 0;    // segments ready
  std::uint64_t taken_ = 0;       // handed to the consumer
  std::uint64_t given_back_ = 0;  // no longer needed
  std::optional<Error> error_;
  bool stop_ = false;
  double busy_ = 0;
  FileBytes file_bytes_;
  std::thread producer_;
};

}  // namespace conduit::agent
