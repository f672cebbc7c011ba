#include "credentials.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "conduit/common/text.h"
#include "log.h"

namespace conduit::kube_client {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::Io, "cannot read " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- TokenSource ------------------------------------------------------------------------------------------

std::shared_ptr<TokenSource> TokenSource::fixed(std::string token) {
  auto source = std::make_shared<TokenSource>();
  source->token_ = std::move(token);
  source->have_token_ = true;
  return source;
}

std::shared_ptr<TokenSource> TokenSource::from_file(std::string path) {
  auto source = std::make_shared<TokenSource>();
  source->path_ = std::move(path);
  return source;
}

int TokenSource::reads() const {
  std::lock_guard lock(mutex_);
  return reads_;
}

Result<std::string> TokenSource::token() {
  std::lock_guard lock(mutex_);
  if (path_.empty()) return token_;
  struct stat st {};
  // stat follows the kubelet's ..data symlink, so a swapped directory shows up as a new inode.
  if (::stat(path_.c_str(), &st) != 0) {
    if (have_token_) return token_;
    return make_error(ErrorCode::Io, "token file " + path_ + ": " + std::strerror(errno));
  }
  Stamp now{st.st_mtim, st.st_size, st.st_ino};
  if (have_token_ && now == stamp_) return token_;
  auto text = read_file(path_);
  if (!text) {
    if (have_token_) return token_;
    return text.error();
  }
  ++reads_;
  std::string fresh(trim(*text));
  if (fresh.empty()) {
    // A file caught half-written: keep the last token and look again next time.
    if (have_token_) return token_;
    return make_error(ErrorCode::InvalidArgument, "token file " + path_ + " is empty");
  }
  if (have_token_ && fresh != token_)
    log(LogLevel::Info, "token file " + path_ + " changed: using the new token");
  token_ = std::move(fresh);
  stamp_ = now;
  have_token_ = true;
  return token_;
}

// ---- PrivateFiles -----------------------------------------------------------------------------------------

Result<std::shared_ptr<PrivateFiles>> PrivateFiles::create() {
  std::error_code ec;
  auto base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "conduit-kube-XXXXXX").string();
  // mkdtemp makes the directory 0700, so nothing inside is reachable by other users whatever its mode.
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return make_error(ErrorCode::Io, "mkdtemp " + tmpl + ": " + std::strerror(errno));
  }
  return std::shared_ptr<PrivateFiles>(new PrivateFiles(tmpl));
}

PrivateFiles::~PrivateFiles() {
  for (const auto& f : files_) ::unlink(f.c_str());
  ::rmdir(dir_.c_str());
}

Result<std::string> PrivateFiles::write(const std::string& name, const std::string& content) {
  std::lock_guard lock(mutex_);
  std::string path = dir_ + "/" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(ErrorCode::Io, "create " + path + ": " + std::strerror(errno));
  files_.push_back(path);
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return make_error(ErrorCode::Io, "write " + path + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return make_error(ErrorCode::Io, "close " + path + ": " + std::strerror(errno));
  return path;
}

}  // namespace conduit::kube_client
