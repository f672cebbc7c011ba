// KubeClient: the Kubernetes REST calls the controller makes, over cpp-httplib (TLS) with JSON bodies.
// Errors are Results whose message carries the API server's own Status message (a CEL rule's text, "the
// object has been modified", ...). Thread-safe: calls share a small pool of keep-alive connections; a
// watch gets a connection of its own, so a long stream never blocks the other calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"
#include "kube_config.h"
#include "resource.h"
#include "watch_end.h"

namespace httplib {
class ClientImpl;
}

namespace conduit::kube_client {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};  // per read or write on the socket
  std::string user_agent = "conduit-controller";
  std::size_t max_idle_connections = 4;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int page_size = 500;  // pages are fetched and joined; the list's resourceVersion is the snapshot's
};

struct WatchOptions {
  std::string resource_version;  // where to start: the list's or the last event's (opaque)
  std::string label_selector;
  std::string field_selector;
  int timeout_seconds = 300;  // the server ends the stream after this; a normal end, not an error
};

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config, ClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }
  const ClientOptions& options() const { return options_; }

  Result<nlohmann::json> get(const Resource& r, const std::string& ns, const std::string& name,
                             const std::string& subresource = {});
  // The List object: items of every page, metadata.resourceVersion of the snapshot.
  Result<nlohmann::json> list(const Resource& r, const std::string& ns, const ListOptions& options = {});
  Result<nlohmann::json> create(const Resource& r, const std::string& ns, const nlohmann::json& object);
  // PUT: the object's metadata.resourceVersion is a precondition (409 Conflict when it is not current).
  Result<nlohmann::json> replace(const Resource& r, const std::string& ns, const std::string& name,
                                 const nlohmann::json& object, const std::string& subresource = {});
  // One application/merge-patch+json request. A metadata.resourceVersion in the patch is a precondition.
  Result<nlohmann::json> merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                     const nlohmann::json& patch, const std::string& subresource = {});

  // Optimistic concurrency: builds a merge patch from the object as last read (`current`, or a GET when
  // null), sends it with that object's resourceVersion as precondition, and on 409 Conflict re-reads and
  // rebuilds, up to kMaxConflictAttempts. `make_patch` returning nullopt means nothing to change.
  using PatchFn = std::function<std::optional<nlohmann::json>(const nlohmann::json& current)>;
  static constexpr int kMaxConflictAttempts = 5;
  Result<nlohmann::json> patch_with_retry(const Resource& r, const std::string& ns, const std::string& name,
                                          const std::string& subresource, const PatchFn& make_patch,
                                          const nlohmann::json* current = nullptr);

  Status delete_object(const Resource& r, const std::string& ns, const std::string& name);

  // Streams a watch of the collection. Each complete line (one JSON event) goes to `on_line` as it arrives;
  // `on_line` returning false ends the stream (Stopped). `stop` ends it promptly from another thread.
  WatchEnd watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                 const std::function<bool(std::string_view line)>& on_line, std::stop_token stop = {});

  // A GET of any path (readyz, discovery), body as text.
  Result<std::string> get_raw(const std::string& path);

  std::uint64_t conflict_retries() const { return conflict_retries_.load(); }

 private:
  struct Reply;
  Result<std::unique_ptr<httplib::ClientImpl>> connect(std::chrono::milliseconds read_timeout);
  Reply send(const char* method, const std::string& path, const std::string* body, const char* content_type);
  Result<nlohmann::json> json_call(const char* method, const std::string& path, const nlohmann::json* body,
                                   const char* content_type, const std::string& what);
  Result<std::vector<std::pair<std::string, std::string>>> auth_headers();

  KubeConfig config_;
  ClientOptions options_;
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle_;
  std::atomic<std::uint64_t> conflict_retries_{0};
};

// The API server's Status message from an error body (or the body itself, shortened, when it is not one).
std::string status_message(std::string_view body);
// ErrorCode for an HTTP status (and the Status reason, which tells AlreadyExists from other conflicts).
ErrorCode error_code_for(int http_status, std::string_view reason = {});

}  // namespace conduit::kube_client
