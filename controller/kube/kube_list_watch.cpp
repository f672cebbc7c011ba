#include "kube_list_watch.h"

#include <random>

namespace conduit::kube {

std::optional<WatchEvent> parse_watch_event(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("object") ||
      !j["object"].is_object()) {
    return std::nullopt;
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  WatchEvent ev;
  if (type == "ADDED") {
    ev.type = WatchEvent::Type::Added;
  } else if (type == "MODIFIED") {
    ev.type = WatchEvent::Type::Modified;
  } else if (type == "DELETED") {
    ev.type = WatchEvent::Type::Deleted;
  } else if (type == "BOOKMARK") {
    ev.type = WatchEvent::Type::Bookmark;
  } else if (type == "ERROR") {
    ev.type = WatchEvent::Type::Error;
  } else {
    return std::nullopt;
  }
  ev.object = std::move(j["object"]);
  return ev;
}

namespace {

// managedFields (server-side apply bookkeeping) is often the bulk of an object and nothing the controller
// reads: the cache keeps every object, so it is dropped on arrival.
void strip(nlohmann::json& object) {
  if (!object.is_object()) return;
  auto meta = object.find("metadata");
  if (meta != object.end() && meta->is_object()) meta->erase("managedFields");
}

}  // namespace

KubeListWatch::KubeListWatch(kube_client::KubeClient& client, kube_client::Resource resource, std::string ns,
                             std::string label_selector, int timeout_seconds, std::string field_selector)
    : client_(client),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      label_selector_(std::move(label_selector)),
      timeout_seconds_(timeout_seconds),
      field_selector_(std::move(field_selector)) {}

Result<ListResult> KubeListWatch::list() {
  kube_client::ListOptions options;
  options.label_selector = label_selector_;
  options.field_selector = field_selector_;
  auto list = client_.list(resource_, ns_, options);
  if (!list) return list.error();
  ListResult out;
  out.resource_version = kube_client::meta_string(*list, "resourceVersion");
  for (auto& item : (*list)["items"]) {
    strip(item);
    // Items of a List carry no apiVersion/kind; the reconciler sees objects as a GET returns them.
    item["apiVersion"] = resource_.api_version();
    item["kind"] = resource_.kind;
    out.items.push_back(std::move(item));
  }
  return out;
}

kube_client::WatchEnd KubeListWatch::watch(const std::string& resource_version,
                                           const std::function<bool(const WatchEvent&)>& on_event,
                                           std::stop_token stop) {
  kube_client::WatchOptions options;
  options.resource_version = resource_version;
  options.label_selector = label_selector_;
  options.field_selector = field_selector_;
  options.timeout_seconds = timeout_seconds_;
  if (options.timeout_seconds <= 0) {
    thread_local std::minstd_rand rng(std::random_device{}());
    options.timeout_seconds = 300 + static_cast<int>(rng() % 300);
  }
  std::string bad_line;
  kube_client::WatchEnd end = client_.watch(
      resource_, ns_, options,
      [&](std::string_view line) {
        auto ev = parse_watch_event(line);
        if (!ev) {
          bad_line = std::string(line.substr(0, 200));
          return false;
        }
        strip(ev->object);
        return on_event(*ev);
      },
      stop);
  if (!bad_line.empty())
    return {kube_client::WatchEnd::Kind::Transport, end.http_status, "not a watch event: " + bad_line};
  return end;
}

}  // namespace conduit::kube
