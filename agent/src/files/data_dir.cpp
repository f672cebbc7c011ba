#include "files/data_dir.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <utility>

#include "files/save_file.h"

namespace conduit::agent {

namespace fs = std::filesystem;

namespace {

// The TransferJob CRD allows 1024 bytes; a component leaves room for the save's temporary suffix
// (".tmp-" + 12 hex) within the 255 bytes file systems allow, so a save never fails half-way on it.
constexpr std::size_t kMaxPathBytes = 1024;
constexpr std::size_t kMaxNameBytes = 255 - 17;

// Nothing the path names may leave the directory; /proc's fd links (which lead anywhere) are never followed.
constexpr std::uint64_t kBeneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
// A namespace's own directory: entered only as itself, never through a link.
constexpr std::uint64_t kNoLinks = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;

std::atomic<bool> g_no_openat2{false};

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

UniqueFd dup_fd(const UniqueFd& fd) { return UniqueFd(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0)); }

// Before openat2: one component at a time, none of them followed if it is a link.
UniqueFd open_walking(int dir, const fs::path& rest, int flags, int& err) {
  UniqueFd held;
  int at = dir;
  const fs::path last = rest.filename();
  for (const fs::path& part : rest.parent_path()) {
    held.reset(::openat(at, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!held) {
      err = errno;
      return held;
    }
    at = held.get();
  }
  UniqueFd out(::openat(at, last.c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
  err = out ? 0 : errno;
  return out;
}

// `rest` (relative, lexically normal) opened beneath `dir`; on failure `err` says why (EXDEV: it leads out).
UniqueFd open_beneath(int dir, const fs::path& rest, int flags, std::uint64_t resolve, int& err) {
  if (!g_no_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.resolve = resolve;
    // EAGAIN: a rename elsewhere raced the lookup and the kernel could not be sure it stayed beneath.
    for (int tries = 0; tries < 16; ++tries) {
      const long fd = ::syscall(SYS_openat2, dir, rest.c_str(), &how, sizeof how);
      if (fd >= 0) {
        err = 0;
        return UniqueFd(static_cast<int>(fd));
      }
      err = errno;
      if (err != EAGAIN) break;
    }
    if (err != ENOSYS) return UniqueFd();
    g_no_openat2.store(true, std::memory_order_relaxed);
  }
  return open_walking(dir, rest, flags, err);
}

}  // namespace

Error Beneath::error(const std::string& what, int err) const {
  if (err == EXDEV) {
    if (ns_.empty()) {
      return make_error(ErrorCode::InvalidArgument,
                        "path " + in_quotes(file_) + " is outside the data directory");
    }
    // The same answer at every retry: the API answers it 403.
    return make_error(
        ErrorCode::Forbidden,
        "file " + in_quotes(file_) + " resolves outside namespace " + ns_ + "'s directory \"" + ns_ +
            "/\" through a link: with --namespace-files a TransferJob reads and writes only the "
            "files of its namespace (docs/security.md)");
  }
  if (err == ENOENT) return make_error(ErrorCode::NotFound, what + ": " + std::strerror(err));
  return io_error(what, err);
}

Result<UniqueFd> Beneath::open(int flags) const {
  int err = 0;
  UniqueFd fd = open_beneath(root_.get(), rest_, flags, kBeneath, err);
  if (!fd) return error("opening " + in_quotes(file_), err);
  return fd;
}

Result<SaveDir> Beneath::parent(bool make) {
  const std::string what = "creating the directory of " + in_quotes(file_);
  const fs::path dir = rest_.parent_path();
  SaveDir out{.dir = {}, .name = rest_.filename().string(), .made = {}};
  int err = 0;
  out.dir =
      dir.empty() ? dup_fd(root_) : open_beneath(root_.get(), dir, O_RDONLY | O_DIRECTORY, kBeneath, err);
  if (!out.dir && err == ENOENT && make) {
    // Prefix by prefix from the root, each resolved beneath it as a whole (a link inside still leads where
    // it points), making the missing one in the directory just opened.
    UniqueFd at = dup_fd(root_);
    fs::path prefix;
    for (const fs::path& part : dir) {
      prefix /= part;
      UniqueFd next = open_beneath(root_.get(), prefix, O_RDONLY | O_DIRECTORY, kBeneath, err);
      if (!next && err == ENOENT) {
        if (::mkdirat(at.get(), part.c_str(), 0777) == 0) {
          out.made.insert(out.made.begin(), MadeDir{dup_fd(at), part.string()});
        } else if (errno != EEXIST) {
          return error(what, errno);
        }
        next = open_beneath(root_.get(), prefix, O_RDONLY | O_DIRECTORY, kBeneath, err);
      }
      if (!next) return error(what, err);
      at = std::move(next);
    }
    out.dir = std::move(at);
  }
  if (!out.dir) return error(dir.empty() ? what : "opening the directory of " + in_quotes(file_), err);
  // The rename would replace a link with the file (nothing escapes), but a name that resolves elsewhere is
  // refused as a load of it is, and one inside is not silently turned from a link into a file.
  struct stat st {};
  if (::fstatat(out.dir.get(), out.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    if (!open_beneath(root_.get(), rest_, O_PATH, kBeneath, err) && err == EXDEV) return error(what, EXDEV);
    return make_error(
        ErrorCode::InvalidArgument,
        "file " + in_quotes(file_) + " is a symbolic link: a save replaces only a regular file");
  }
  for (MadeDir& d : made_) out.made.push_back(std::move(d));
  made_.clear();
  return out;
}

DataDir::DataDir(fs::path path) : path_(std::move(path)) {
  std::error_code ec;
  fs::create_directories(path_, ec);
  fd_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  open_errno_ = fd_ ? 0 : errno;
}

Result<fs::path> DataDir::normal(const std::string& file) {
  const auto outside = [&] {
    return make_error(ErrorCode::InvalidArgument,
                      "path " + in_quotes(file) + " is outside the data directory");
  };
  if (file.empty()) return make_error(ErrorCode::InvalidArgument, "file path is empty");
  if (file.size() > kMaxPathBytes) {
    return make_error(ErrorCode::InvalidArgument, "file path is " + std::to_string(file.size()) +
                                                      " bytes, at most " + std::to_string(kMaxPathBytes) +
                                                      " are allowed");
  }
  // The OS would stop at an embedded NUL and open a different file than the one checked.
  if (file.find('\0') != std::string::npos) return outside();
  const fs::path given(file);
  if (given.has_root_name() || given.has_root_directory()) return outside();
  const fs::path normal = given.lexically_normal();
  if (!normal.empty() && *normal.begin() == "..") return outside();
  if (normal.empty() || normal == "." || !normal.has_filename()) {
    return make_error(ErrorCode::InvalidArgument, "path " + in_quotes(file) + " does not name a file");
  }
  for (const auto& part : normal) {
    if (part.native().size() > kMaxNameBytes) {
      return make_error(ErrorCode::InvalidArgument, "a name in file path " + in_quotes(file) + " is " +
                                                        std::to_string(part.native().size()) +
                                                        " bytes, at most " + std::to_string(kMaxNameBytes) +
                                                        " are allowed");
    }
  }
  return normal;
}

Result<Beneath> DataDir::beneath(const std::string& file, const std::string& ns, bool make) const {
  auto normal = DataDir::normal(file);
  if (!normal) return normal.error();
  if (!fd_) return io_error("opening the data directory " + in_quotes(path_.string()), open_errno_);
  if (ns.empty()) return Beneath(dup_fd(fd_), std::move(*normal), file, "");

  auto part = normal->begin();
  fs::path rest;
  for (auto it = std::next(part); it != normal->end(); ++it) rest /= *it;
  Beneath out(UniqueFd(), std::move(rest), file, ns);
  // file_refusal said so already, by the spelling; this is the same rule where the file is opened.
  if (*part != ns || out.rest_.empty()) return out.error("", EXDEV);
  int err = 0;
  out.root_ = open_beneath(fd_.get(), ns, O_RDONLY | O_DIRECTORY, kNoLinks, err);
  if (!out.root_ && err == ENOENT && make) {
    if (::mkdirat(fd_.get(), ns.c_str(), 0777) == 0) {
      out.made_.push_back(MadeDir{dup_fd(fd_), ns});
    } else if (errno != EEXIST) {
      return out.error("creating the directory of " + in_quotes(file), errno);
    }
    out.root_ = open_beneath(fd_.get(), ns, O_RDONLY | O_DIRECTORY, kNoLinks, err);
  }
  // ELOOP: the namespace's directory is itself a link, which is not followed.
  if (!out.root_) return out.error("opening " + in_quotes(file), err == ELOOP ? EXDEV : err);
  return out;
}

}  // namespace conduit::agent
