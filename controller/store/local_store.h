// ObjectStore over a directory of YAML files, for local mode: every `*.yaml` holding a TransferJob is an
// object (namespace "default" when unset); status and metadata the controller writes go back into the same
// file atomically (a temporary file renamed over it, or exchanged with it so that a removal or edit made
// meanwhile is not undone), so `cat job.yaml` shows progress. Deleting the file deletes the
// job: while the job still carries finalizers it stays visible with metadata.deletionTimestamp set until the
// controller removes them, as an apiserver keeps it.
#pragma once

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "object_store.h"

namespace conduit::controller {

class LocalStore : public ObjectStore {
 public:
  explicit LocalStore(std::filesystem::path dir,
                      std::chrono::milliseconds poll_interval = std::chrono::milliseconds(200));

  Result<std::vector<nlohmann::json>> list_jobs() override;
  Result<nlohmann::json> get_job(const ObjectKey& key) override;
  Result<nlohmann::json> patch_job_status(const ObjectKey& key, const nlohmann::json& status) override;
  Result<nlohmann::json> patch_job_metadata(const ObjectKey& key, const nlohmann::json& metadata) override;
  Status delete_job(const ObjectKey& key) override;
  Status upsert_node(const std::string& name, const nlohmann::json& spec,
                     const nlohmann::json& status) override;
  void record_event(const ObjectKey& key, const std::string& type, const std::string& reason,
                    const std::string& message) override;
  std::vector<ObjectKey> wait_for_changes(std::chrono::milliseconds timeout) override;
  void wake() override;

  // Called with the job's key after each status or metadata write (and deletion) this store makes, outside
  // its lock: whoever waits for a job's outcome (--once-job) hears of it as it is written, not at its next
  // look. Set before the store is shared between threads.
  void on_write(std::function<void(const ObjectKey&)> hook) { on_write_ = std::move(hook); }

  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct FileStamp {
    std::filesystem::file_time_type mtime;
    std::uintmax_t size = 0;
    bool operator==(const FileStamp&) const = default;
  };
  struct Entry {
    std::filesystem::path path;
    nlohmann::json object;
    std::string text;  // the file as read, to tell our write from a person's edit
  };

  // Re-reads the directory: key -> file. Files that are not TransferJobs are skipped (and said so once).
  void scan_locked();
  // Where a job is now: the object being deleted (its file removed while finalizers hold it) or its file,
  // re-read; NotFound when neither. Exactly one of the two pointers is set.
  struct Found {
    nlohmann::json* deleting = nullptr;
    Entry* entry = nullptr;
  };
  Result<Found> find_locked(const ObjectKey& key);
  Status delete_locked(const ObjectKey& key);
  Result<nlohmann::json> patch_locked(const ObjectKey& key, const char* field, const nlohmann::json& patch);
  // `expected`: the job file's text the object was read from. Given, the write replaces only that text: a
  // removed file stays removed (NotFound) and an edit saved meanwhile stays (Conflict, to be read again).
  Status write_locked(const std::filesystem::path& path, const nlohmann::json& object,
                      const std::string* expected = nullptr);
  Status note_own_write(const std::filesystem::path& path);
  std::map<std::filesystem::path, FileStamp> stamps_locked() const;

  std::filesystem::path dir_;
  std::chrono::milliseconds poll_interval_;
  std::mutex mu_;
  std::map<ObjectKey, Entry> jobs_;
  std::map<ObjectKey, nlohmann::json> deleting_;     // file gone, finalizers left
  std::map<std::filesystem::path, FileStamp> seen_;  // as of the last wait_for_changes (or our own write)
  std::set<std::filesystem::path> warned_;
  std::condition_variable woken_cv_;  // with mu_: wake() ends the wait between directory looks
  bool woken_ = false;
  std::function<void(const ObjectKey&)> on_write_;
};

}  // namespace conduit::controller
