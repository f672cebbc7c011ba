#include "local_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string_view>

#include "conduit/common/log.h"
#include "conduit/common/time.h"
#include "yaml_json.h"

namespace conduit::controller {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_object_file(const fs::directory_entry& e) {
  const auto name = e.path().filename().string();
  const auto ext = e.path().extension();
  return e.is_regular_file() && !name.empty() && name.front() != '.' && (ext == ".yaml" || ext == ".yml");
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The comment lines a person put at the top of the file: yaml-cpp drops comments, we keep these.
std::string leading_comments(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '#') break;
    out += line + "\n";
  }
  return out;
}

std::string key_text(const ObjectKey& key) { return key.ns + "/" + key.name; }

bool has_finalizers(const json& object) {
  const json& meta = object.value("metadata", json::object());
  return meta.contains("finalizers") && meta["finalizers"].is_array() && !meta["finalizers"].empty();
}

// As the apiserver: a metadata patch may not add a finalizer to an object being deleted.
bool adds_finalizer(const json& object, const json& metadata_patch) {
  if (!metadata_patch.is_object() || !metadata_patch.contains("finalizers")) return false;
  const json have = object.value("metadata", json::object()).value("finalizers", json::array());
  for (const auto& f : metadata_patch["finalizers"]) {
    if (std::find(have.begin(), have.end(), f) == have.end()) return true;
  }
  return false;
}

}  // namespace

LocalStore::LocalStore(fs::path dir, std::chrono::milliseconds poll_interval)
    : dir_(std::move(dir)), poll_interval_(poll_interval) {}

std::map<fs::path, LocalStore::FileStamp> LocalStore::stamps_locked() const {
  std::map<fs::path, FileStamp> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!is_object_file(e)) continue;
    std::error_code ec2;
    FileStamp stamp{fs::last_write_time(e.path(), ec2), fs::file_size(e.path(), ec2)};
    if (!ec2) out[e.path()] = stamp;
  }
  return out;
}

void LocalStore::scan_locked() {
  std::map<ObjectKey, Entry> found;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (is_object_file(e)) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    const auto text = read_file(path);
    if (!text) continue;
    auto parsed = parse_yaml(*text);
    auto skip = [&](const std::string& why) {
      if (warned_.insert(path).second) log::warn("skipping file", {{"file", path.string()}, {"why", why}});
    };
    if (!parsed) {
      skip("not YAML: " + parsed.error().message);
      continue;
    }
    json& object = *parsed;
    if (!object.is_object() || object.value("kind", "") != "TransferJob" ||
        object.value("apiVersion", "").rfind("conduit.dev/", 0) != 0) {
      skip("not a conduit.dev TransferJob");
      continue;
    }
    if (!object.contains("metadata") || !object["metadata"].is_object() ||
        !object["metadata"].contains("name") || !object["metadata"]["name"].is_string()) {
      skip("metadata.name is missing");
      continue;
    }
    warned_.erase(path);
    json& meta = object["metadata"];
    if (!meta.contains("namespace") || !meta["namespace"].is_string()) meta["namespace"] = "default";
    ObjectKey key{meta["namespace"].get<std::string>(), meta["name"].get<std::string>()};
    if (found.count(key) > 0) {
      skip("a second file for " + key_text(key) + " (first: " + found[key].path.string() + ")");
      continue;
    }
    found[key] = Entry{path, std::move(object), *text};
  }
  // A job whose file went away while it has finalizers is being deleted, not gone.
  for (auto& [key, entry] : jobs_) {
    if (found.count(key) > 0 || deleting_.count(key) > 0 || !has_finalizers(entry.object)) continue;
    json object = entry.object;
    object["metadata"]["deletionTimestamp"] = format_rfc3339(std::chrono::system_clock::now());
    deleting_[key] = std::move(object);
    log::info("job file removed: deleting the job", {{"job", key_text(key)}});
  }
  jobs_ = std::move(found);
}

Result<LocalStore::Found> LocalStore::find_locked(const ObjectKey& key) {
  if (auto it = deleting_.find(key); it != deleting_.end()) return Found{.deleting = &it->second};
  // The cached file first, re-read so the object is what is on disk now; a full scan when it moved.
  if (auto it = jobs_.find(key); it != jobs_.end()) {
    if (const auto text = read_file(it->second.path)) {
      auto parsed = parse_yaml(*text);
      if (parsed && parsed->is_object() && parsed->contains("metadata") &&
          (*parsed)["metadata"].is_object() && (*parsed)["metadata"].value("name", "") == key.name &&
          (*parsed)["metadata"].value("namespace", "default") == key.ns) {
        (*parsed)["metadata"]["namespace"] = key.ns;
        it->second.object = std::move(*parsed);
        it->second.text = *text;
        return Found{.entry = &it->second};
      }
    }
  }
  scan_locked();
  // The scan may just have found the file removed: the job is then being deleted, not gone.
  if (auto it = deleting_.find(key); it != deleting_.end()) return Found{.deleting = &it->second};
  if (auto it = jobs_.find(key); it != jobs_.end()) return Found{.entry = &it->second};
  return make_error(ErrorCode::NotFound, "no TransferJob " + key_text(key) + " in " + dir_.string());
}

Result<std::vector<json>> LocalStore::list_jobs() {
  std::lock_guard lock(mu_);
  scan_locked();
  std::vector<json> out;
  for (const auto& [key, object] : deleting_) out.push_back(object);
  for (const auto& [key, entry] : jobs_) {
    if (deleting_.count(key) == 0) out.push_back(entry.object);
  }
  return out;
}

Result<json> LocalStore::get_job(const ObjectKey& key) {
  std::lock_guard lock(mu_);
  auto found = find_locked(key);
  if (!found) return found.error();
  return found->deleting != nullptr ? *found->deleting : found->entry->object;
}

Status LocalStore::write_locked(const fs::path& path, const json& object, const std::string* expected) {
  std::string text;
  if (expected != nullptr) {
    text = leading_comments(*expected);
  } else if (const auto old = read_file(path)) {
    text = leading_comments(*old);
  }
  text += to_yaml(object);
  // Same directory, so rename(2) is atomic; the leading dot keeps scans from reading it half-written.
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(ErrorCode::Io, "cannot write " + tmp.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::Io, "writing " + tmp.string() + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (expected != nullptr) {
    // Rewriting a job the person owns: a plain rename would bring back a file they removed a moment ago
    // (the job would run on, its deletion lost) and drop an edit saved since we read it. Exchanging the
    // two names fails when the file is gone, and hands back what it held so an edit can be put back.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) {
      int err = errno;
      if (err == EINVAL && ::access(path.c_str(), F_OK) == 0) {
        // A file system without exchange (NFS): the plain rename, its window left open.
        if (::rename(tmp.c_str(), path.c_str()) == 0) return note_own_write(path);
        err = errno;
      }
      ::unlink(tmp.c_str());
      if (err == ENOENT) return make_error(ErrorCode::NotFound, path.string() + " was removed");
      return make_error(ErrorCode::Io, "replacing " + path.string() + ": " + std::strerror(err));
    }
    const auto displaced = read_file(tmp);
    if (!displaced || *displaced != *expected) {
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE);
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::Conflict, path.string() + " changed while its status was written");
    }
    ::unlink(tmp.c_str());
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::Io, "renaming " + tmp.string() + ": " + why);
  }
  return note_own_write(path);
}

Status LocalStore::note_own_write(const fs::path& path) {
  std::error_code ec;
  // Our own write is not a change to react to.
  seen_[path] = FileStamp{fs::last_write_time(path, ec), fs::file_size(path, ec)};
  return {};
}

Result<json> LocalStore::patch_locked(const ObjectKey& key, const char* field, const json& patch) {
  auto found = find_locked(key);
  if (!found) return found.error();
  if (found->deleting != nullptr) {
    json& object = *found->deleting;
    if (std::string_view(field) == "metadata" && adds_finalizer(object, patch)) {
      return make_error(ErrorCode::Conflict,
                        "job " + key_text(key) + " is being deleted: no new finalizer can be added to it");
    }
    if (!object.contains(field) || !object[field].is_object()) object[field] = json::object();
    object[field].merge_patch(patch);
    json result = object;
    if (!has_finalizers(object)) {
      deleting_.erase(key);  // the last finalizer is gone: so is the object
      log::info("job deleted", {{"job", key_text(key)}});
    }
    return result;
  }
  Entry& entry = *found->entry;
  json object = entry.object;
  if (!object.contains(field) || !object[field].is_object()) object[field] = json::object();
  object[field].merge_patch(patch);
  if (auto s = write_locked(entry.path, object, &entry.text); !s) {
    if (s.error().code != ErrorCode::NotFound) return s.error();
    // Removed under us: deleting now if finalizers hold it, and the patch goes to that object.
    scan_locked();
    if (deleting_.count(key) == 0) return s.error();
    return patch_locked(key, field, patch);
  }
  entry.object = object;
  return object;
}

Result<json> LocalStore::patch_job_status(const ObjectKey& key, const json& status) {
  auto patched = [&] {
    std::lock_guard lock(mu_);
    return patch_locked(key, "status", status);
  }();
  if (patched && on_write_) on_write_(key);
  return patched;
}

Result<json> LocalStore::patch_job_metadata(const ObjectKey& key, const json& metadata) {
  auto patched = [&] {
    std::lock_guard lock(mu_);
    return patch_locked(key, "metadata", metadata);
  }();
  if (patched && on_write_) on_write_(key);
  return patched;
}

Status LocalStore::delete_job(const ObjectKey& key) {
  auto deleted = [&] {
    std::lock_guard lock(mu_);
    return delete_locked(key);
  }();
  if (deleted && on_write_) on_write_(key);
  return deleted;
}

Status LocalStore::delete_locked(const ObjectKey& key) {
  auto found = find_locked(key);
  if (!found) return found.error();
  if (found->deleting != nullptr) return {};  // already being deleted
  const fs::path path = found->entry->path;
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return make_error(ErrorCode::Io, "removing " + path.string() + ": " + ec.message());
  seen_.erase(path);
  scan_locked();  // moves it to deleting_ when finalizers hold it
  return {};
}

Status LocalStore::upsert_node(const std::string& name, const json& spec, const json& status) {
  std::lock_guard lock(mu_);
  const fs::path dir = dir_ / "fabricnodes";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::Io, "creating " + dir.string() + ": " + ec.message());
  const json object{{"apiVersion", "conduit.dev/v1alpha1"},
                    {"kind", "FabricNode"},
                    {"metadata", {{"name", name}}},
                    {"spec", spec},
                    {"status", status}};
  const fs::path path = dir / (name + ".yaml");
  if (const auto old = read_file(path); old && *old == to_yaml(object)) return {};
  return write_locked(path, object);
}

void LocalStore::record_event(const ObjectKey& key, const std::string& type, const std::string& reason,
                              const std::string& message) {
  log::write(type == "Warning" ? log::Level::Warn : log::Level::Info, "event",
             {{"job", key_text(key)}, {"type", type}, {"reason", reason}, {"message", message}});
}

std::vector<ObjectKey> LocalStore::wait_for_changes(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      std::lock_guard lock(mu_);
      const auto now_stamps = stamps_locked();
      if (now_stamps != seen_) {
        std::map<fs::path, ObjectKey> before;
        for (const auto& [key, entry] : jobs_) before[entry.path] = key;
        const auto deleting_before = deleting_.size();
        scan_locked();
        std::set<ObjectKey> changed;
        for (const auto& [path, stamp] : now_stamps) {
          auto it = seen_.find(path);
          if (it != seen_.end() && it->second == stamp) continue;
          for (const auto& [key, entry] : jobs_) {
            if (entry.path == path) changed.insert(key);
          }
        }
        for (const auto& [path, key] : before) {
          if (now_stamps.count(path) == 0) changed.insert(key);
        }
        if (deleting_.size() != deleting_before) {
          for (const auto& [key, object] : deleting_) changed.insert(key);
        }
        seen_ = now_stamps;
        if (!changed.empty()) return {changed.begin(), changed.end()};
      }
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return {};
    std::unique_lock lock(mu_);
    const auto step = std::min<std::chrono::steady_clock::duration>(left, poll_interval_);
    if (woken_cv_.wait_for(lock, step, [this] { return woken_; })) {
      woken_ = false;
      return {};
    }
  }
}

void LocalStore::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  woken_cv_.notify_all();
}

}  // namespace conduit::controller
