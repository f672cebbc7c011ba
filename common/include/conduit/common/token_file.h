// A bearer token from a file (the agent's --token-file, the controller's and the CLI's), re-read whenever
// that file changes, so a token is rotated by rewriting the file (or swapping the symlink a Kubernetes
// Secret volume updates) without a restart: the new token works and the old one is refused from the first
// request after the change.
#pragma once

#include <sys/types.h>

#include <ctime>
#include <memory>
#include <mutex>
#include <string>

#include "conduit/common/result.h"

namespace conduit {

class TokenFile {
 public:
  // Reads `path` now. Io when it cannot be read, InvalidArgument when it holds only whitespace.
  static Result<std::unique_ptr<TokenFile>> open(const std::string& path);

  // The token the file holds now. One stat() per call; the file is read again only when its device, inode,
  // size, mtime or ctime changed. A file that turns unreadable or empty keeps the last token it held (a
  // rotation caught half way must not lock every client out) and is tried again on the next call.
  std::string current() const;

  const std::string& path() const { return path_; }

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    timespec ctime{};
    bool operator==(const Identity& o) const;
  };

  explicit TokenFile(std::string path) : path_(std::move(path)) {}
  // Reads the file; on success sets token_ and seen_. Caller holds mu_ (or is open()).
  Status reload() const;

  std::string path_;
  mutable std::mutex mu_;
  mutable std::string token_;
  mutable Identity seen_;        // the file as it was when token_ was read from it
  mutable bool warned_ = false;  // one warning per bad spell, not one per request
};

}  // namespace conduit
