// The vocabulary of LIST + WATCH, and the narrow interface the Watcher drives: the API server implements it
// (KubeListWatch), tests implement it with scripted events, no network.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"
#include "kube_client/watch_end.h"

namespace conduit::kube {

struct WatchEvent {
  enum class Type { Added, Modified, Deleted, Bookmark, Error };
  Type type = Type::Added;
  nlohmann::json object;  // the object; a Status for ERROR; only metadata.resourceVersion for BOOKMARK
};

// One line of a watch stream ({"type": ..., "object": ...}); nullopt when it is not one.
std::optional<WatchEvent> parse_watch_event(std::string_view line);

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // of the snapshot: where the watch starts
};

class ListWatchSource {
 public:
  virtual ~ListWatchSource() = default;
  virtual Result<ListResult> list() = 0;
  // Events after `resource_version`, each passed to `on_event` as it arrives, until the stream ends;
  // `on_event` returning false ends it (Stopped). `stop` ends it promptly from another thread.
  virtual kube_client::WatchEnd watch(const std::string& resource_version,
                                      const std::function<bool(const WatchEvent&)>& on_event,
                                      std::stop_token stop) = 0;
};

}  // namespace conduit::kube
