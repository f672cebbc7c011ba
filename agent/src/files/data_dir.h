// The agent's data directory as an open directory, and every file the API names opened beneath it with
// openat2(RESOLVE_BENEATH): the kernel refuses, at the moment of the open, any step out of the directory
// (a "..", an absolute link, a link that leads out), so a directory swapped for a link while a save runs
// cannot carry it outside. Checking a resolved name first and opening it after could be raced (issue 32).
//
// With --namespace-files a job's file is opened beneath its namespace's directory instead: "<ns>" is entered
// from the data directory without following any link, and the rest of the path resolved beneath that, so a
// link from team-a/ into team-b/ fails like one out of the data directory. Links that stay beneath the
// directory still work.
//
// Kernels before 5.6 have no openat2: there every component is opened with O_NOFOLLOW, one at a time, so
// no link is followed at all (a path through one is refused as InvalidArgument).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"

namespace conduit::agent {

// A directory a save made for itself, to remove again (when still empty) if the save is abandoned.
struct MadeDir {
  UniqueFd parent;
  std::string name;
};

// The directory a save writes into, open, and the name the file will have in it.
struct SaveDir {
  UniqueFd dir;
  std::string name;
  std::vector<MadeDir> made;  // deepest first
};

// A path that cannot leave `root` (the data directory, or a namespace's directory in it).
class Beneath {
 public:
  // Opens the file (openat2 beneath root). Errors: NotFound, InvalidArgument (outside the data directory,
  // a path of the wrong shape), Forbidden when it leaves a namespace's directory (the API's 403).
  Result<UniqueFd> open(int flags) const;
  // The directory the file goes in, opened beneath root; missing directories are made (mkdirat) when
  // `make`. Once: it hands on the directories made so far.
  Result<SaveDir> parent(bool make);
  const std::string& file() const { return file_; }

 private:
  friend class DataDir;
  Beneath(UniqueFd root, std::filesystem::path rest, std::string file, std::string ns)
      : root_(std::move(root)), rest_(std::move(rest)), file_(std::move(file)), ns_(std::move(ns)) {}
  Error error(const std::string& what, int err) const;

  UniqueFd root_;
  std::filesystem::path rest_;  // relative, lexically normal, no ".."
  std::string file_;            // as the caller gave it, for messages
  std::string ns_;              // whose directory root_ is; "" = the data directory's
  std::vector<MadeDir> made_;   // the namespace's directory, when made for a save
};

class DataDir {
 public:
  // Makes the directory where it is missing and opens it; where that fails, each use says why.
  explicit DataDir(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }

  // `file` as a path under the data directory, checked by its spelling alone: relative, no "..", no NUL,
  // within the lengths a save can use. Returns its lexically normal form; InvalidArgument why not.
  static Result<std::filesystem::path> normal(const std::string& file);

  // Where `file` (relative to the data directory) is opened: beneath the data directory, or with `ns`
  // beneath namespace ns's directory, which `file` must start with; `make` creates that directory when it
  // is missing (a save).
  Result<Beneath> beneath(const std::string& file, const std::string& ns = "", bool make = false) const;

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
  int open_errno_ = 0;
};

}  // namespace conduit::agent
