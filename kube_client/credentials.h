// Credentials that outlive one request: a bearer token that may rotate underneath us, and private copies
// of inline certificates (cpp-httplib loads certificates and keys by path only).
#pragma once

#include <sys/types.h>

#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::kube_client {

// A bearer token, fixed or read from a file. Projected service-account tokens are rewritten by the kubelet
// (about hourly), so a file is re-read whenever its mtime, size or inode changes, never cached for the
// process lifetime. Thread-safe.
class TokenSource {
 public:
  static std::shared_ptr<TokenSource> fixed(std::string token);
  static std::shared_ptr<TokenSource> from_file(std::string path);

  // The token to send now. A file that cannot be read keeps the last good token (the kubelet swaps the
  // file by renaming a symlink; a request in between must not go out unauthenticated).
  Result<std::string> token();
  const std::string& path() const { return path_; }  // empty for a fixed token
  int reads() const;                                 // how often the file was read (tests)

 private:
  struct Stamp {
    timespec mtime{};
    off_t size = -1;
    ino_t inode = 0;
    bool operator==(const Stamp& o) const {
      return mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec && size == o.size &&
             inode == o.inode;
    }
  };

  std::string path_;
  mutable std::mutex mutex_;
  std::string token_;
  Stamp stamp_;
  bool have_token_ = false;
  int reads_ = 0;
};

// Files only this process can read (0600 inside a fresh 0700 directory under $TMPDIR), removed with the
// object. Shared by every copy of a config that points into it.
class PrivateFiles {
 public:
  static Result<std::shared_ptr<PrivateFiles>> create();
  ~PrivateFiles();
  PrivateFiles(const PrivateFiles&) = delete;
  PrivateFiles& operator=(const PrivateFiles&) = delete;

  // Writes `content` to a new file named `name` and returns its path.
  Result<std::string> write(const std::string& name, const std::string& content);
  const std::string& dir() const { return dir_; }

 private:
  explicit PrivateFiles(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::mutex mutex_;
  std::vector<std::string> files_;
};

// Reads a whole small file (tokens, namespaces, certificates).
Result<std::string> read_file(const std::string& path);

}  // namespace conduit::kube_client
