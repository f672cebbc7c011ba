#include "kube_store.h"

#include <unistd.h>

#include <algorithm>

#include "kube_client/log.h"
#include "merge_patch.h"

namespace conduit::kube {

using nlohmann::json;

namespace {

std::string hostname() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

std::vector<std::string> watched_namespaces(std::vector<std::string> namespaces) {
  // "" anywhere means all namespaces, which one watch covers.
  if (namespaces.empty() || std::find(namespaces.begin(), namespaces.end(), "") != namespaces.end())
    return {""};
  std::sort(namespaces.begin(), namespaces.end());
  namespaces.erase(std::unique(namespaces.begin(), namespaces.end()), namespaces.end());
  return namespaces;
}

std::string rv_of(const json& object) { return kube_client::meta_string(object, "resourceVersion"); }

}  // namespace

KubeObjectStore::KubeObjectStore(kube_client::KubeClient& client, KubeStoreOptions options)
    : client_(client),
      options_(std::move(options)),
      events_(client, options_.component, options_.instance.empty() ? hostname() : options_.instance) {
  for (const std::string& ns : watched_namespaces(options_.namespaces)) {
    NamespaceWatch w;
    w.ns = ns;
    w.source = std::make_unique<KubeListWatch>(client_, kube_client::resources::transfer_jobs(), ns,
                                               std::string(), options_.watch_timeout_seconds);
    w.watcher = std::make_unique<Watcher>(
        *w.source, [this](const std::vector<controller::ObjectKey>& keys) { on_change(keys); },
        options_.watcher);
    watches_.push_back(std::move(w));
  }
}

KubeObjectStore::~KubeObjectStore() { stop(); }

void KubeObjectStore::start() {
  for (auto& w : watches_) w.watcher->start();
}

void KubeObjectStore::stop() {
  for (auto& w : watches_) w.watcher->stop();
}

bool KubeObjectStore::wait_synced(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& w : watches_) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!w.watcher->wait_synced(std::max(left, std::chrono::milliseconds(0)))) return false;
  }
  return true;
}

Watcher* KubeObjectStore::watcher_for(const std::string& ns) {
  for (auto& w : watches_) {
    if (w.ns.empty() || w.ns == ns) return w.watcher.get();
  }
  return nullptr;
}

std::optional<json> KubeObjectStore::cached(const controller::ObjectKey& key) {
  Watcher* w = watcher_for(key.ns);
  if (w == nullptr || !w->synced()) return std::nullopt;
  return w->get(key);
}

void KubeObjectStore::on_change(const std::vector<controller::ObjectKey>& keys) {
  {
    // The watch caught up with our write (or the job is gone): the cache is the hint again.
    std::lock_guard lock(written_mutex_);
    for (const auto& key : keys) {
      auto it = written_.find(key);
      if (it == written_.end()) continue;
      const auto now = cached(key);
      if (!now || rv_of(*now) == rv_of(it->second)) written_.erase(it);
    }
  }
  {
    std::lock_guard lock(changes_mutex_);
    pending_.insert(keys.begin(), keys.end());
  }
  changes_cv_.notify_all();
}

Result<std::vector<json>> KubeObjectStore::list_jobs() {
  std::vector<json> out;
  for (auto& w : watches_) {
    if (w.watcher->synced()) {
      auto objects = w.watcher->objects();
      out.insert(out.end(), std::make_move_iterator(objects.begin()), std::make_move_iterator(objects.end()));
      continue;
    }
    auto listed = w.source->list();
    if (!listed) return listed.error();
    out.insert(out.end(), std::make_move_iterator(listed->items.begin()),
               std::make_move_iterator(listed->items.end()));
  }
  return out;
}

Result<json> KubeObjectStore::get_job(const controller::ObjectKey& key) {
  if (auto obj = cached(key)) return *obj;
  return client_.get(kube_client::resources::transfer_jobs(), key.ns, key.name);
}

Result<json> KubeObjectStore::patch_job(const controller::ObjectKey& key, const std::string& subresource,
                                        const json& patch) {
  // The newest copy we know saves a GET; when it is stale the precondition fails (409) and the retry
  // re-reads. Ours is the newest unless the watch already shows that version (then both agree) or someone
  // wrote after us (then the 409 finds out).
  std::optional<json> hint = cached(key);
  {
    std::lock_guard lock(written_mutex_);
    if (auto it = written_.find(key); it != written_.end()) {
      const json& ours = it->second;
      if (hint && rv_of(*hint) == rv_of(ours)) {
        written_.erase(it);
      } else {
        hint = ours;
      }
    }
  }
  auto r = client_.patch_with_retry(
      kube_client::resources::transfer_jobs(), key.ns, key.name, subresource,
      [&patch](const json&) -> std::optional<json> { return patch; }, hint ? &*hint : nullptr);
  std::lock_guard lock(written_mutex_);
  if (r && r->is_object() && r->contains("metadata")) {
    written_[key] = *r;
  } else {
    written_.erase(key);
  }
  return r;
}

Result<json> KubeObjectStore::patch_job_status(const controller::ObjectKey& key, const json& status) {
  return patch_job(key, "status", json{{"status", status}});
}

Result<json> KubeObjectStore::patch_job_metadata(const controller::ObjectKey& key, const json& metadata) {
  return patch_job(key, "", json{{"metadata", metadata}});
}

Status KubeObjectStore::delete_job(const controller::ObjectKey& key) {
  Status s = client_.delete_object(kube_client::resources::transfer_jobs(), key.ns, key.name);
  if (!s && s.error().code == ErrorCode::NotFound) return {};
  return s;
}

Status KubeObjectStore::upsert_node(const std::string& name, const json& spec, const json& status) {
  const kube_client::Resource& r = kube_client::resources::fabric_nodes();
  auto current = client_.get(r, "", name);
  if (!current && current.error().code == ErrorCode::NotFound) {
    json node = {
        {"apiVersion", r.api_version()}, {"kind", r.kind}, {"metadata", {{"name", name}}}, {"spec", spec}};
    current = client_.create(r, "", node);  // status is ignored on create: written below through /status
    if (!current && current.error().code == ErrorCode::AlreadyExists) current = client_.get(r, "", name);
  }
  if (!current) return current.error();
  // Each write is the difference from what is stored, so fields we no longer report are removed ("replaced"),
  // and a node whose spec and status did not change costs no write at all.
  auto spec_written = client_.patch_with_retry(
      r, "", name, "",
      [&spec](const json& cur) -> std::optional<json> {
        json diff = merge_patch_diff(cur.value("spec", json::object()), spec);
        if (diff.is_object() && diff.empty()) return std::nullopt;
        return json{{"spec", diff}};
      },
      &*current);
  if (!spec_written) return spec_written.error();
  auto status_written = client_.patch_with_retry(
      r, "", name, "status",
      [&status](const json& cur) -> std::optional<json> {
        json diff = merge_patch_diff(cur.value("status", json::object()), status);
        if (diff.is_object() && diff.empty()) return std::nullopt;
        return json{{"status", diff}};
      },
      &*spec_written);
  if (!status_written) return status_written.error();
  return {};
}

void KubeObjectStore::record_event(const controller::ObjectKey& key, const std::string& type,
                                   const std::string& reason, const std::string& message) {
  const kube_client::Resource& r = kube_client::resources::transfer_jobs();
  // The cached job gives the event its uid (so `kubectl describe` finds it); a bare reference does otherwise.
  json involved = cached(key).value_or(json{{"metadata", {{"namespace", key.ns}, {"name", key.name}}}});
  involved["apiVersion"] = r.api_version();
  involved["kind"] = r.kind;
  events_.record(involved, type, reason, message);
}

std::vector<controller::ObjectKey> KubeObjectStore::wait_for_changes(std::chrono::milliseconds timeout) {
  std::unique_lock lock(changes_mutex_);
  changes_cv_.wait_for(lock, timeout, [this] { return !pending_.empty(); });
  std::vector<controller::ObjectKey> out(pending_.begin(), pending_.end());
  pending_.clear();
  return out;
}

}  // namespace conduit::kube
