// Debian's cpp-httplib is built with OpenSSL; its pkg-config flags say so, a hand build may not.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include "client.h"

#include <httplib.h>

#include <csignal>
#include <cstring>
#include <mutex>

#include "log.h"

namespace conduit::kube_client {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxWatchLine = 64u << 20;  // one event: an object can be a few MiB, never this
constexpr std::size_t kMaxErrorBody = 64u << 10;

std::string ns_name(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

}  // namespace

struct KubeClient::Reply {
  int status = 0;  // 0: no HTTP answer
  std::string body;
  std::string transport_error;
};

ErrorCode error_code_for(int http_status, std::string_view reason) {
  switch (http_status) {
    case 400:
    case 422:
      return ErrorCode::InvalidArgument;
    case 401:
    case 403:
      return ErrorCode::RemoteAccess;
    case 404:
    case 410:  // Gone: an expired resourceVersion or continue token; what it named no longer exists
      return ErrorCode::NotFound;
    case 409:
      return reason == "AlreadyExists" ? ErrorCode::AlreadyExists : ErrorCode::Conflict;
    case 429:
      return ErrorCode::ResourceExhausted;
    case 504:
      return ErrorCode::TimedOut;
    default:
      return http_status >= 500 ? ErrorCode::Unavailable : ErrorCode::Provider;
  }
}

std::string status_message(std::string_view body) {
  json status = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object() && status.value("kind", "") == "Status" && status.contains("message")) {
    return status["message"].get<std::string>();
  }
  std::string text(body.substr(0, 500));
  return text.empty() ? "(empty body)" : text;
}

KubeClient::KubeClient(KubeConfig config, ClientOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  // OpenSSL writes to sockets with plain write(): one the server (or our own stop()) already closed raises
  // SIGPIPE, which would kill the process. A network client gets EPIPE as an error instead.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { std::signal(SIGPIPE, SIG_IGN); });
}

KubeClient::~KubeClient() = default;

Result<std::unique_ptr<httplib::ClientImpl>> KubeClient::connect(std::chrono::milliseconds read_timeout) {
  const ServerAddress& a = config_.address;
  std::unique_ptr<httplib::ClientImpl> c;
  if (a.scheme == "https") {
    std::unique_ptr<httplib::SSLClient> ssl;
    if (!config_.client_cert_file.empty()) {
      ssl = std::make_unique<httplib::SSLClient>(a.host, a.port, config_.client_cert_file,
                                                 config_.client_key_file);
    } else {
      ssl = std::make_unique<httplib::SSLClient>(a.host, a.port);
    }
    // is_valid() is false when the client certificate or key did not load.
    if (!ssl->is_valid()) {
      return make_error(
          ErrorCode::InvalidArgument,
          "cannot load client certificate " + config_.client_cert_file + " / key " + config_.client_key_file);
    }
    if (!config_.ca_file.empty()) ssl->set_ca_cert_path(config_.ca_file);
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>(a.host, a.port);
  }
  c->set_connection_timeout(options_.connect_timeout);
  c->set_read_timeout(read_timeout);
  c->set_write_timeout(options_.request_timeout);
  c->set_keep_alive(true);
  // Headers and body are separate writes: without TCP_NODELAY every PATCH/POST waits ~40 ms for a delayed
  // ACK.
  c->set_tcp_nodelay(true);
  return c;
}

Result<std::vector<std::pair<std::string, std::string>>> KubeClient::auth_headers() {
  std::vector<std::pair<std::string, std::string>> h{{"Accept", "application/json"},
                                                     {"User-Agent", options_.user_agent}};
  if (config_.token) {
    // Asked on every request: a rotated token file takes effect on the next call.
    auto token = config_.token->token();
    if (!token) return token.error();
    h.emplace_back("Authorization", "Bearer " + *token);
  }
  return h;
}

KubeClient::Reply KubeClient::send(const char* method, const std::string& path, const std::string* body,
                                   const char* content_type) {
  Reply reply;
  auto headers = auth_headers();
  if (!headers) {
    reply.transport_error = headers.error().message;
    return reply;
  }
  const httplib::Headers h(headers->begin(), headers->end());
  const std::string full = config_.address.base_path + path;
  auto perform = [&](httplib::ClientImpl& c) {
    if (std::strcmp(method, "GET") == 0) return c.Get(full, h);
    if (std::strcmp(method, "POST") == 0) return c.Post(full, h, *body, content_type);
    if (std::strcmp(method, "PUT") == 0) return c.Put(full, h, *body, content_type);
    if (std::strcmp(method, "PATCH") == 0) return c.Patch(full, h, *body, content_type);
    return body ? c.Delete(full, h, *body, content_type) : c.Delete(full, h);
  };

  std::unique_ptr<httplib::ClientImpl> conn;
  {
    std::lock_guard lock(pool_mutex_);
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  const bool reused = conn != nullptr;
  httplib::Result res{nullptr, httplib::Error::Unknown};
  if (reused) {
    res = perform(*conn);
    // A pooled keep-alive connection the server closed while it sat idle fails on first use: once more on a
    // fresh one. Not for POST, whose first attempt might have landed.
    if (!res && std::strcmp(method, "POST") != 0) conn.reset();
  }
  if (!conn) {
    auto made = connect(options_.request_timeout);
    if (!made) {
      reply.transport_error = made.error().message;
      return reply;
    }
    conn = std::move(*made);
    res = perform(*conn);
  }
  if (!res) {
    // The connection is in an unknown state: it is dropped (closed by its destructor), not pooled.
    reply.transport_error = httplib::to_string(res.error());
    if (res.error() == httplib::Error::SSLServerVerification) {
      reply.transport_error += ": the server's certificate does not verify against " +
                               (config_.ca_file.empty() ? std::string("the system CAs") : config_.ca_file);
    }
    return reply;
  }
  reply.status = res->status;
  reply.body = std::move(res->body);
  std::lock_guard lock(pool_mutex_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(conn));
  return reply;
}

Result<json> KubeClient::json_call(const char* method, const std::string& path, const json* body,
                                   const char* content_type, const std::string& what) {
  std::string text = body ? body->dump() : std::string();
  Reply reply = send(method, path, body ? &text : nullptr, content_type);
  if (reply.status == 0) {
    return make_error(ErrorCode::PeerUnreachable,
                      what + ": no answer from " + config_.server + " (" + reply.transport_error + ")");
  }
  if (reply.status < 200 || reply.status >= 300) {
    json status = json::parse(reply.body, nullptr, false);
    std::string reason = status.is_object() ? status.value("reason", "") : "";
    return make_error(error_code_for(reply.status, reason),
                      what + ": HTTP " + std::to_string(reply.status) + ": " + status_message(reply.body));
  }
  json out = json::parse(reply.body, nullptr, false);
  if (out.is_discarded()) return make_error(ErrorCode::Provider, what + ": the answer is not JSON");
  return out;
}

Result<json> KubeClient::get(const Resource& r, const std::string& ns, const std::string& name,
                             const std::string& subresource) {
  return json_call("GET", object_path(r, ns, name, subresource), nullptr, nullptr,
                   "get " + r.plural + " " + ns_name(ns, name));
}

Result<json> KubeClient::list(const Resource& r, const std::string& ns, const ListOptions& options) {
  json all;
  std::string token;
  do {
    std::string path = collection_path(r, ns) + "?limit=" + std::to_string(options.page_size);
    if (!options.label_selector.empty()) path += "&labelSelector=" + url_encode(options.label_selector);
    if (!options.field_selector.empty()) path += "&fieldSelector=" + url_encode(options.field_selector);
    if (!token.empty()) path += "&continue=" + url_encode(token);
    auto page =
        json_call("GET", path, nullptr, nullptr, "list " + r.plural + (ns.empty() ? "" : " in " + ns));
    if (!page) return page.error();
    if (all.is_null()) {
      all = std::move(*page);
      if (!all.contains("items") || all["items"].is_null()) all["items"] = json::array();
    } else {
      for (auto& item : (*page)["items"]) all["items"].push_back(std::move(item));
      all["metadata"] = (*page)["metadata"];
    }
    if (!all["metadata"].is_object()) all["metadata"] = json::object();
    token = all["metadata"].value("continue", "");
  } while (!token.empty());
  all["metadata"].erase("continue");
  return all;
}

Result<json> KubeClient::create(const Resource& r, const std::string& ns, const json& object) {
  std::string name = object.contains("metadata") ? object["metadata"].value("name", "") : "";
  return json_call("POST", collection_path(r, ns), &object, "application/json",
                   "create " + r.plural + " " + ns_name(ns, name));
}

Result<json> KubeClient::replace(const Resource& r, const std::string& ns, const std::string& name,
                                 const json& object, const std::string& subresource) {
  return json_call("PUT", object_path(r, ns, name, subresource), &object, "application/json",
                   "update " + r.plural + " " + ns_name(ns, name));
}

Result<json> KubeClient::merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                     const json& patch, const std::string& subresource) {
  return json_call(
      "PATCH", object_path(r, ns, name, subresource), &patch, "application/merge-patch+json",
      "patch " + r.plural + " " + ns_name(ns, name) + (subresource.empty() ? "" : "/" + subresource));
}

Result<json> KubeClient::patch_with_retry(const Resource& r, const std::string& ns, const std::string& name,
                                          const std::string& subresource, const PatchFn& make_patch,
                                          const json* current) {
  json object;
  if (current != nullptr) {
    object = *current;
  } else {
    auto got = get(r, ns, name);
    if (!got) return got.error();
    object = std::move(*got);
  }
  for (int attempt = 1;; ++attempt) {
    std::optional<json> patch = make_patch(object);
    if (!patch) return object;
    (*patch)["metadata"]["resourceVersion"] = object["metadata"]["resourceVersion"];
    auto patched = merge_patch(r, ns, name, *patch, subresource);
    if (patched || patched.error().code != ErrorCode::Conflict || attempt == kMaxConflictAttempts)
      return patched;
    // Someone wrote since we read: read again and rebuild the patch from what is there now.
    ++conflict_retries_;
    auto got = get(r, ns, name);
    if (!got) return got.error();
    object = std::move(*got);
  }
}

Status KubeClient::delete_object(const Resource& r, const std::string& ns, const std::string& name) {
  // Background propagation: return at once and let the garbage collector remove dependents (as kubectl does).
  json options = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"propagationPolicy", "Background"}};
  auto res = json_call("DELETE", object_path(r, ns, name), &options, "application/json",
                       "delete " + r.plural + " " + ns_name(ns, name));
  if (!res) return res.error();
  return {};
}

Result<std::string> KubeClient::get_raw(const std::string& path) {
  Reply reply = send("GET", path, nullptr, nullptr);
  if (reply.status == 0) {
    return make_error(ErrorCode::PeerUnreachable, "GET " + path + ": " + reply.transport_error);
  }
  if (reply.status != 200) {
    return make_error(error_code_for(reply.status), "GET " + path + ": HTTP " + std::to_string(reply.status) +
                                                        ": " + status_message(reply.body));
  }
  return reply.body;
}

WatchEnd KubeClient::watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                           const std::function<bool(std::string_view line)>& on_line, std::stop_token stop) {
  auto headers = auth_headers();
  if (!headers) return {WatchEnd::Kind::Transport, 0, headers.error().message};
  // The server sends nothing while nothing changes, so the read timeout must outlast its own timeout.
  auto made = connect(std::chrono::seconds(options.timeout_seconds + 30));
  if (!made) return {WatchEnd::Kind::Transport, 0, made.error().message};
  std::unique_ptr<httplib::ClientImpl> conn = std::move(*made);

  std::string path =
      config_.address.base_path + collection_path(r, ns) +
      "?watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(options.timeout_seconds);
  if (!options.resource_version.empty()) path += "&resourceVersion=" + url_encode(options.resource_version);
  if (!options.label_selector.empty()) path += "&labelSelector=" + url_encode(options.label_selector);
  if (!options.field_selector.empty()) path += "&fieldSelector=" + url_encode(options.field_selector);

  int status = 0;
  std::string buffer;  // bytes of a line not yet complete
  std::string error_body;
  bool consumer_stopped = false;
  bool oversized = false;
  // stop() shuts the socket down under httplib's own lock, which is the one thread-safe way to break a
  // blocked read. A stop before the socket exists is caught by the response handler below.
  std::stop_callback on_stop(stop, [&conn] { conn->stop(); });
  httplib::Headers h(headers->begin(), headers->end());
  auto res = conn->Get(
      path, h,
      [&](const httplib::Response& response) {
        status = response.status;
        return !stop.stop_requested();
      },
      [&](const char* data, std::size_t n) {
        if (stop.stop_requested()) return false;
        if (status != 200) {
          if (error_body.size() < kMaxErrorBody) error_body.append(data, n);
          return true;
        }
        buffer.append(data, n);
        std::size_t start = 0;
        for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(buffer.data() + start, nl - start);
          if (!line.empty() && !on_line(line)) {
            consumer_stopped = true;
            return false;
          }
        }
        buffer.erase(0, start);
        if (buffer.size() > kMaxWatchLine) {
          oversized = true;
          return false;
        }
        return true;
      });
  if (stop.stop_requested() || consumer_stopped) return {WatchEnd::Kind::Stopped, status, {}};
  if (oversized) return {WatchEnd::Kind::Transport, status, "watch event larger than 64 MiB"};
  if (!res)
    return {WatchEnd::Kind::Transport, status, "watch " + r.plural + ": " + httplib::to_string(res.error())};
  if (status != 200) {
    return {WatchEnd::Kind::HttpError, status,
            "watch " + r.plural + ": HTTP " + std::to_string(status) + ": " + status_message(error_body)};
  }
  if (buffer.find_first_not_of(" \r\n\t") != std::string::npos && !on_line(buffer)) {
    return {WatchEnd::Kind::Stopped, status, {}};
  }
  return {WatchEnd::Kind::Closed, status, {}};
}

}  // namespace conduit::kube_client
