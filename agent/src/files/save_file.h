// A file under the agent's data directory written the crash-safe way: bytes go to a temporary file next to
// the final name, then fsync, rename, fsync of the directory. Until commit() the final name is untouched
// (an old file stays whole, or there is none); a SaveFile destroyed uncommitted removes its temporary file.
// Used by POST /v1/regions/{name}/save (the whole region at once) and by a grant that saves bytes as they
// land (stream/landing.h). Directories it had to create are removed again (when empty) if it is never
// committed, so a refused request leaves the data directory as it was.
//
// Bytes are written around the page cache (O_DIRECT) where they can be: whole 4 KiB blocks at block
// offsets from block-aligned memory (a segment landed in a ring or a region), the rest through the page
// cache. A saved checkpoint is rarely read again soon, and a buffered write costs a copy on the CPUs the
// wire needs plus a page cache the size of the file, all of which the kernel must find memory for and
// write back: a 4 GiB file -> file job here took 4.4-11.9 s through the page cache and 2.3-2.9 s around it
// (docs/pipelines.md, "Saves around the page cache").
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"
#include "files/data_dir.h"

namespace conduit::agent {

// An errno as the API error a caller can act on: a path of the wrong shape (a file where a directory should
// be, a link loop, a name too long) is InvalidArgument, a full disk or quota ResourceExhausted ("no space
// left on device"), the rest Io.
Error io_error(const std::string& what, int err);

// Bytes a save wrote around the page cache (O_DIRECT) and through it.
struct WrittenBytes {
  std::uint64_t direct = 0;
  std::uint64_t cached = 0;
};

class SaveFile {
 public:
  // The temporary file in `dir` (DataDir, Beneath::parent), which the save keeps open: written there and
  // renamed there, it cannot land anywhere else whatever happens to the names above it. `file`: the name
  // the caller gave, for messages. `direct`: may write around the page cache (false: every byte through
  // it, for a reader right after; the agent's --save-page-cache). The file is 0600: only the agent reads
  // it back.
  static Result<SaveFile> create(SaveDir dir, std::string file, bool direct = true);
  // At `path`, wherever it is (tests): its directory is made where missing, and kept.
  static Result<SaveFile> create(const std::filesystem::path& path, std::string file, bool direct = true);

  SaveFile(SaveFile&& other) noexcept;
  SaveFile& operator=(SaveFile&&) noexcept;
  SaveFile(const SaveFile&) = delete;
  SaveFile& operator=(const SaveFile&) = delete;
  ~SaveFile();

  Status write_at(std::uint64_t offset, std::span<const std::byte> bytes);
  // Writes at the end of what was written so far.
  Status append(std::span<const std::byte> bytes);
  // Cuts the file to `bytes`, then fsync, rename into place, fsync of the directory.
  Status commit(std::uint64_t bytes);
  bool committed() const { return committed_; }
  const std::string& file() const { return file_; }
  // Bytes written so far, each way.
  const WrittenBytes& written() const { return written_; }

 private:
  SaveFile() = default;
  void discard();
  void write_back(std::uint64_t offset, std::uint64_t length);
  // Writes what it can of `bytes` at `offset` with O_DIRECT: the whole blocks, where the offset and the
  // memory are block-aligned. Returns how many bytes it wrote (0: none could go that way).
  Result<std::uint64_t> write_direct(std::uint64_t offset, std::span<const std::byte> bytes);

  SaveDir dir_;
  std::string temp_;  // its name in dir_; "" once gone
  std::string file_;
  UniqueFd fd_;
  UniqueFd direct_fd_;  // the temporary file again with O_DIRECT; invalid: every write uses the page cache
  std::uint64_t end_ = 0;
  WrittenBytes written_;
  std::uint64_t flushed_ = 0;  // written back to the disk up to here (sync_file_range), not yet fsynced
  bool committed_ = false;
};

}  // namespace conduit::agent
