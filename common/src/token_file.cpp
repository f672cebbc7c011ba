#include "conduit/common/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "conduit/common/log.h"
#include "conduit/common/text.h"
#include "conduit/common/unique_fd.h"

namespace conduit {

namespace {

// A bearer token is tens of bytes; anything this large is the wrong file.
constexpr std::size_t kMaxTokenFileBytes = 64 * 1024;

bool same_time(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

bool TokenFile::Identity::operator==(const Identity& o) const {
  return dev == o.dev && ino == o.ino && size == o.size && same_time(mtime, o.mtime) &&
         same_time(ctime, o.ctime);
}

namespace {

template <typename Identity>
Identity identity_of(const struct stat& st) {
  Identity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime = st.st_mtim;
  id.ctime = st.st_ctim;
  return id;
}

}  // namespace

Result<std::unique_ptr<TokenFile>> TokenFile::open(const std::string& path) {
  std::unique_ptr<TokenFile> file(new TokenFile(path));
  if (auto read = file->reload(); !read) return read.error();
  return file;
}

Status TokenFile::reload() const {
  const UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return make_error(ErrorCode::Io, "token file " + path_ + " cannot be read: " + std::strerror(errno));
  }
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0) {
    return make_error(ErrorCode::Io, "token file " + path_ + " cannot be read: " + std::strerror(errno));
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return make_error(ErrorCode::Io, "token file " + path_ + " cannot be read: " + std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxTokenFileBytes) {
      return make_error(ErrorCode::InvalidArgument, "token file " + path_ + " is larger than 64 KiB");
    }
  }
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0 || !(identity_of<Identity>(before) == identity_of<Identity>(after))) {
    // Written while we read it: what we have may be half of it. The next call reads it again.
    return make_error(ErrorCode::Unavailable, "token file " + path_ + " changed while it was read");
  }
  std::string token(trim(text));
  if (token.empty()) return make_error(ErrorCode::InvalidArgument, "token file " + path_ + " is empty");
  token_ = std::move(token);
  seen_ = identity_of<Identity>(after);
  return {};
}

std::string TokenFile::current() const {
  std::lock_guard lock(mu_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && identity_of<Identity>(st) == seen_) return token_;
  // Never log the token itself: only that the file changed and whether it could be read.
  if (auto read = reload(); !read) {
    if (!warned_) {
      log::warn("token file cannot be re-read: the previous token stays valid until it can",
                {{"file", path_}, {"error", read.error().message}});
      warned_ = true;
    }
  } else {
    log::info("token file changed: token re-read", {{"file", path_}});
    warned_ = false;
  }
  return token_;
}

}  // namespace conduit
