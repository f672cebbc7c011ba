// How a source file's bytes reach registered memory: a copy out of the page cache where they already are,
// O_DIRECT (the disk's DMA straight into the slot) where they are not. Reading a cold file through the page
// cache costs CPU the wire needs (a 1 GiB file -> region job spent 0.1-0.15 CPU-seconds more that way, and
// ended 5-13% later: docs/pipelines.md, "A cold source file"); a warm one copies out of the cache far faster
// than any disk. So each read looks first at what the page cache holds of its range (mincore over a mapping
// that is never touched, so a file that shrinks cannot raise SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"

namespace conduit::agent {

class SourceReader {
 public:
  // `fd` (a regular file, open for reading) outlives the reader. `direct`: may read around the page cache;
  // false where others read the same bytes soon after (a Fanout's targets each read the file, and only the
  // page cache lets the disk be read once for all of them).
  SourceReader(int fd, bool direct);

  // [pos, pos + length) of the file into `into`, which may be written up to `room` bytes (>= length): a
  // direct read is whole 4 KiB blocks, so it may fill past `length`, never past `room` (a last partial
  // block whose whole block does not fit goes through the cache). Errors: Conflict when the file ends
  // before pos + length (it shrank while it was read), Io otherwise.
  Status read(std::byte* into, std::uint64_t room, std::uint64_t pos, std::uint64_t length);

  std::uint64_t cached_bytes() const { return cached_bytes_; }
  std::uint64_t direct_bytes() const { return direct_bytes_; }

 private:
  bool mostly_cached(std::uint64_t pos, std::uint64_t length) const;
  // Reads what it can directly; returns the bytes of [0, length) it read (less when the file ended, a read
  // came back short or this file system refused O_DIRECT: the rest goes through the page cache).
  // Called only where the whole blocks over [pos, pos + length) fit in `into`.
  Result<std::uint64_t> read_direct(std::byte* into, std::uint64_t pos, std::uint64_t length);
  // [pos, pos + length) where pos or `into` is not block-aligned (a .safetensors data section starts 8 + its
  // header's size into the file): whole blocks read directly into an aligned bounce buffer, then copied
  // out; returns the bytes of [0, length) it read, as read_direct.
  Result<std::uint64_t> read_bounced(std::byte* into, std::uint64_t pos, std::uint64_t length);

  int fd_;
  struct FreeAligned {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeAligned> bounce_;  // kBounceBytes, block-aligned; made on first use
  UniqueFd direct_fd_;  // the same open file again with O_DIRECT; invalid: every read uses the page cache
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t direct_bytes_ = 0;
};

}  // namespace conduit::agent
