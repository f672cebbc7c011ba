// A file under the agent's data directory written the crash-safe way: bytes go to a temporary file next to
// the final name, then fsync, rename, fsync of the directory. Until commit() the final name is untouched
// (an old file stays whole, or there is none); a SaveFile destroyed uncommitted removes its temporary file.
// Used by POST /v1/regions/{name}/save (the whole region at once) and by a grant that saves bytes as they
// land (stream/landing.h). Directories it had to create are removed again (when empty) if it is never
// committed, so a refused request leaves the data directory as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"

namespace conduit::agent {

// An errno as the API error a caller can act on: a path of the wrong shape (a file where a directory should
// be, a link loop, a name too long) is InvalidArgument, a full disk or quota ResourceExhausted ("no space
// left on device"), the rest Io.
Error io_error(const std::string& what, int err);

class SaveFile {
 public:
  // `path`: resolved under the data directory (RegionStore::data_path); `file`: the name the caller gave,
  // for messages. Creates the parent directories and the temporary file.
  static Result<SaveFile> create(const std::filesystem::path& path, std::string file);

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

 private:
  SaveFile() = default;
  void discard();
  void write_back(std::uint64_t offset, std::uint64_t length);

  std::filesystem::path final_;
  std::filesystem::path temp_;
  std::vector<std::filesystem::path> created_dirs_;  // deepest first
  std::string file_;
  UniqueFd fd_;
  std::uint64_t end_ = 0;
  std::uint64_t flushed_ = 0;  // written back to the disk up to here (sync_file_range), not yet fsynced
  bool committed_ = false;
};

}  // namespace conduit::agent
