#include "files/save_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "conduit/common/random.h"
#include "files/direct_io.h"

namespace conduit::agent {

namespace fs = std::filesystem;

namespace {

// write(2) moves at most ~2 GiB per call; 1 GiB pieces keep each call large without hitting that.
constexpr std::size_t kIoPiece = std::size_t{1} << 30;
// Dirty bytes a save may hold ahead of what the disk took (write_back).
constexpr std::uint64_t kWritebackLag = std::uint64_t{128} << 20;

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

}  // namespace

Error io_error(const std::string& what, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return make_error(ErrorCode::ResourceExhausted, what + ": " + std::strerror(err));
  }
  const bool path_shape = err == ENOTDIR || err == EISDIR || err == ELOOP || err == ENAMETOOLONG;
  return make_error(path_shape ? ErrorCode::InvalidArgument : ErrorCode::Io,
                    what + ": " + std::strerror(err));
}

Result<SaveFile> SaveFile::create(SaveDir dir, std::string file, bool direct) {
  SaveFile out;
  out.dir_ = std::move(dir);
  out.file_ = std::move(file);
  // Same directory as the final name, so the rename is atomic and never crosses a filesystem. O_EXCL: a
  // name that is there already, a link included, is never opened.
  std::string temp = out.dir_.name + ".tmp-" + random_hex(12);
  out.fd_.reset(::openat(out.dir_.dir.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out.fd_) return io_error("creating a temporary file for " + in_quotes(out.file_), errno);
  out.temp_ = std::move(temp);
  // A file system that refuses O_DIRECT refuses this open, and every write goes through the page cache.
  if (direct) out.direct_fd_ = direct_io::reopen(out.fd_.get(), O_WRONLY);
  return out;
}

Result<SaveFile> SaveFile::create(const fs::path& path, std::string file, bool direct) {
  auto where = DataDir(path.parent_path()).beneath(path.filename().string());
  if (!where) return where.error();
  auto dir = where->parent(/*make=*/false);
  if (!dir) return dir.error();
  return create(std::move(*dir), std::move(file), direct);
}

SaveFile::SaveFile(SaveFile&& other) noexcept
    : dir_(std::exchange(other.dir_, {})),
      temp_(std::exchange(other.temp_, {})),
      file_(std::move(other.file_)),
      fd_(std::move(other.fd_)),
      direct_fd_(std::move(other.direct_fd_)),
      end_(other.end_),
      written_(other.written_),
      flushed_(other.flushed_),
      committed_(other.committed_) {}

SaveFile& SaveFile::operator=(SaveFile&& other) noexcept {
  if (this != &other) {
    discard();
    dir_ = std::exchange(other.dir_, {});
    temp_ = std::exchange(other.temp_, {});
    file_ = std::move(other.file_);
    fd_ = std::move(other.fd_);
    direct_fd_ = std::move(other.direct_fd_);
    end_ = other.end_;
    written_ = other.written_;
    flushed_ = other.flushed_;
    committed_ = other.committed_;
  }
  return *this;
}

SaveFile::~SaveFile() { discard(); }

void SaveFile::discard() {
  direct_fd_.reset();
  fd_.reset();
  if (!committed_ && !temp_.empty()) ::unlinkat(dir_.dir.get(), temp_.c_str(), 0);
  temp_.clear();
  if (!committed_) {
    // Deepest first; a directory something else has put a file into since stays.
    for (const MadeDir& d : dir_.made) {
      if (::unlinkat(d.parent.get(), d.name.c_str(), AT_REMOVEDIR) != 0) break;
    }
  }
  dir_ = {};
}

Status SaveFile::write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
  if (committed_ || !fd_)
    return make_error(ErrorCode::Conflict, "file " + in_quotes(file_) + " is already saved");
  auto direct = write_direct(offset, bytes);
  if (!direct) return direct.error();
  written_.direct += *direct;
  end_ = std::max(end_, offset + bytes.size());
  const std::uint64_t from = offset + *direct;
  const auto rest = bytes.subspan(static_cast<std::size_t>(*direct));
  for (std::size_t done = 0; done < rest.size();) {
    const std::size_t n = std::min(kIoPiece, rest.size() - done);
    const ssize_t put = ::pwrite(fd_.get(), rest.data() + done, n, static_cast<off_t>(from + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      return io_error("writing " + in_quotes(file_), errno);
    }
    done += static_cast<std::size_t>(put);
  }
  written_.cached += rest.size();
  if (!rest.empty()) write_back(from, rest.size());
  return {};
}

Result<std::uint64_t> SaveFile::write_direct(std::uint64_t offset, std::span<const std::byte> bytes) {
  if (!direct_fd_ || !direct_io::aligned(offset, bytes.data())) return std::uint64_t{0};
  const std::uint64_t whole = direct_io::round_down(bytes.size());
  std::uint64_t done = 0;
  while (done < whole) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kIoPiece, whole - done));
    const ssize_t put = ::pwrite(direct_fd_.get(), bytes.data() + done, n, static_cast<off_t>(offset + done));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == EINVAL || errno == EFAULT)) {
      // This file system takes no O_DIRECT writes at this alignment, or the kernel cannot pin this memory
      // for the device (a driver's mapping, as some pinned CUDA host buffers are, where a copy still reads
      // it): the page cache from now on.
      direct_fd_.reset();
      break;
    }
    if (put < 0) return io_error("writing " + in_quotes(file_), errno);
    done += static_cast<std::uint64_t>(put);
    // A short write that ends inside a block leaves the rest to the page cache; one that wrote nothing
    // (it should not) too, rather than asking again forever.
    if (put == 0 || done % direct_io::kBlock != 0) break;
  }
  return done;
}

void SaveFile::write_back(std::uint64_t offset, std::uint64_t length) {
  // The disk starts on these bytes now, while the rest of the stream is still on the wire, instead of all
  // of them in the fsync at the end (measured: a 1 GiB save that waited 3 s in its commit). And what is
  // kWritebackLag behind is waited for, so a save holds at most that much dirty page cache: a target
  // whose disk is slower than the wire slows its source down instead of filling memory. Best effort: the
  // commit's fsync is what makes the bytes durable and reports any error.
  ::sync_file_range(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(length), SYNC_FILE_RANGE_WRITE);
  if (offset >= flushed_ + kWritebackLag) {
    const std::uint64_t upto = offset - kWritebackLag / 2;
    ::sync_file_range(fd_.get(), static_cast<off_t>(flushed_), static_cast<off_t>(upto - flushed_),
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    flushed_ = upto;
  }
}

Status SaveFile::append(std::span<const std::byte> bytes) { return write_at(end_, bytes); }

Status SaveFile::commit(std::uint64_t bytes) {
  if (committed_) return {};
  if (!fd_) return make_error(ErrorCode::Conflict, "file " + in_quotes(file_) + " was not opened");
  if (::ftruncate(fd_.get(), static_cast<off_t>(bytes)) != 0)
    return io_error("sizing " + in_quotes(file_), errno);
  if (::fsync(fd_.get()) != 0) return io_error("syncing " + in_quotes(file_), errno);
  if (const int err = fd_.close(); err != 0) return io_error("closing " + in_quotes(file_), err);
  if (::renameat(dir_.dir.get(), temp_.c_str(), dir_.dir.get(), dir_.name.c_str()) != 0)
    return io_error("renaming into " + in_quotes(file_), errno);
  committed_ = true;
  // Without this the rename itself may be lost on a crash, leaving the old file (or none).
  if (::fsync(dir_.dir.get()) != 0) return io_error("syncing the directory of " + in_quotes(file_), errno);
  return {};
}

}  // namespace conduit::agent
