#include "conduit/api/agent_client.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cctype>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "conduit/api/errors.h"
#include "conduit/api/http_error.h"

namespace conduit::api {

using json = nlohmann::json;

TokenSource::TokenSource(std::string token) : current_([t = std::move(token)] { return t; }) {}

TokenSource::TokenSource(std::shared_ptr<const TokenFile> file) {
  if (file) current_ = [file = std::move(file)] { return file->current(); };
}

TokenSource::TokenSource(std::function<std::string()> current) : current_(std::move(current)) {}

namespace {

std::string without_trailing_slashes(std::string url) {
  while (url.ends_with('/')) url.pop_back();
  return url;
}

const char* verb(bool get, bool post) { return get ? "GET " : post ? "POST " : "DELETE "; }

// An answer decoded as T, or the call's error.
template <typename T>
Result<T> decoded(Result<json> answer) {
  if (!answer) return answer.error();
  return T::from_json(*answer);
}

// The call's error, or OK: for routes whose answer the caller does not need.
Status done(const Result<json>& answer) {
  if (!answer) return answer.error();
  return {};
}

// A name or id as one path segment: what it names may come from a record others can write (a TransferJob's
// run annotation), and a '?', '/' or '#' in it must not reach the query or another route.
std::string segment(const std::string& name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : name) {
    const bool plain = std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// "?namespace=ns" when a namespace is given (a DNS-1123 label: nothing to escape; the agent checks it).
std::string for_namespace(const std::string& ns, char sep = '?') {
  return ns.empty() ? std::string() : std::string(1, sep) + "namespace=" + segment(ns);
}

}  // namespace

AgentClient::AgentClient(std::string base_url, ClientOptions options, std::string who)
    : base_url_(without_trailing_slashes(std::move(base_url))),
      options_(std::move(options)),
      who_(who.empty() ? "agent at " + base_url_ : std::move(who)) {}

namespace {

// A client for `url`, or null when it is not http(s)://host[:port] (httplib throws for another scheme).
std::unique_ptr<httplib::Client> client_for(const std::string& url, const std::string& client_cert = "",
                                            const std::string& client_key = "") {
  try {
    auto client = client_cert.empty() ? std::make_unique<httplib::Client>(url)
                                      : std::make_unique<httplib::Client>(url, client_cert, client_key);
    if (client->is_valid()) return client;
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // namespace

namespace {

// Idle keep-alive connections to agents, taken by the next call to the same agent with the same TLS settings.
// Without them every call paid a TCP connect and, over https, a full TLS handshake (measured: 1,000 small
// jobs 25 s over http, 32 s over https with a handshake per call). An idle connection is kept at most
// kMaxIdle, well inside the agent's 5 s keep-alive timeout, so the agent has not closed it when it is taken.
class ConnectionPool {
 public:
  using Clock = std::chrono::steady_clock;
  struct Key {
    std::string url, ca_cert, server_name, client_cert;
    auto operator<=>(const Key&) const = default;
  };

  std::unique_ptr<httplib::Client> take(const Key& key) {
    std::lock_guard lock(mu_);
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    auto& list = it->second;
    while (!list.empty()) {
      Idle idle = std::move(list.back());
      list.pop_back();
      if (Clock::now() - idle.since < kMaxIdle) return std::move(idle.client);
    }
    idle_.erase(it);
    return nullptr;
  }

  void give_back(const Key& key, std::unique_ptr<httplib::Client> client) {
    std::lock_guard lock(mu_);
    auto& list = idle_[key];
    // Oldest first out: they would be the first to go stale.
    std::erase_if(list, [](const Idle& i) { return Clock::now() - i.since >= kMaxIdle; });
    if (list.size() < kMaxPerAgent) list.push_back({std::move(client), Clock::now()});
  }

 private:
  static constexpr auto kMaxIdle = std::chrono::seconds(2);
  static constexpr std::size_t kMaxPerAgent = 8;
  struct Idle {
    std::unique_ptr<httplib::Client> client;
    Clock::time_point since;
  };
  std::mutex mu_;
  std::map<Key, std::vector<Idle>> idle_;
};

// Never destroyed: its connections must not outlive OpenSSL's own cleanup at exit.
ConnectionPool& connections() {
  static auto* pool = new ConnectionPool;
  return *pool;
}

}  // namespace

bool AgentClient::valid_url(const std::string& url) {
  return client_for(without_trailing_slashes(url)) != nullptr;
}

struct AgentClient::Exchange {
  std::unique_ptr<httplib::Client> client;
  httplib::Result response{nullptr, httplib::Error::Unknown};
  bool fast_failure = false;   // failed writing, or reading within 100 ms: the request was never read
  std::optional<Error> error;  // the URL or the CA file is unusable
};

Result<json> AgentClient::call(Method method, const std::string& path, const json* body,
                               std::chrono::milliseconds read_timeout) const {
  const bool by_name = !options_.server_name.empty() && base_url_.starts_with("https://");
  const ConnectionPool::Key key{base_url_, options_.ca_cert, by_name ? options_.server_name : std::string(),
                                options_.client_cert};
  std::unique_ptr<httplib::Client> kept = connections().take(key);
  const bool reused = kept != nullptr;
  auto result = exchange(kept ? std::move(kept) : nullptr, method, path, body, read_timeout);
  if (!result.client && result.error) return *result.error;
  // A kept connection the agent closed meanwhile fails at once, before the agent read the request: sent
  // again on a new one. (A slow failure may be a request the agent is working on: never sent twice.)
  if (reused && !result.response && result.fast_failure) {
    result = exchange(nullptr, method, path, body, read_timeout);
    if (!result.client && result.error) return *result.error;
  }
  httplib::Result& answered = result.response;
  const std::string what = verb(method == Method::Get, method == Method::Post) + path;
  if (!answered) {
    std::string why = describe_http_error(answered.error());
    if (by_name && answered.error() == httplib::Error::SSLConnection) {
      why = "the server's certificate is not trusted (it must be signed by the CA and name \"" +
            options_.server_name + "\"), or TLS failed";
    }
    // A TLS failure is an agent that is there and that we do not trust (or that does not trust us):
    // Forbidden, which no retry fixes, not PeerUnreachable, which waiting may.
    const bool tls = answered.error() == httplib::Error::SSLConnection ||
                     answered.error() == httplib::Error::SSLServerVerification;
    return make_error(tls ? ErrorCode::Forbidden : ErrorCode::PeerUnreachable,
                      who_ + " did not answer " + what + ": " + why);
  }
  const int status = answered->status;
  std::string body_text = std::move(answered->body);
  connections().give_back(key, std::move(result.client));
  json answer = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (status >= 200 && status < 300) return answer.is_discarded() ? json::object() : answer;
  if (answer.is_object() && answer.contains("error") && answer["error"].is_object()) {
    const json& error = answer["error"];
    const std::string code =
        error.contains("code") && error["code"].is_string() ? error["code"].get<std::string>() : "Error";
    const std::string message =
        error.contains("message") && error["message"].is_string() ? error["message"].get<std::string>() : "";
    return make_error(error_code_from_wire(code), code + ": " + message);
  }
  return make_error(error_code_from_http_status(status),
                    who_ + " answered HTTP " + std::to_string(status) + " to " + what);
}

AgentClient::Exchange AgentClient::exchange(std::unique_ptr<httplib::Client> kept, Method method,
                                            const std::string& path, const json* body,
                                            std::chrono::milliseconds read_timeout) const {
  Exchange out;
  const bool kept_client = kept != nullptr;
  const bool with_cert = !options_.client_cert.empty() && base_url_.starts_with("https://");
  if (!kept_client && with_cert) {
    // httplib takes an unreadable pair for an unusable URL: say which file it was.
    for (const std::string* file : {&options_.client_cert, &options_.client_key}) {
      if (::access(file->c_str(), R_OK) != 0) {
        out.error = make_error(ErrorCode::InvalidArgument,
                               "cannot read the client certificate file \"" + *file + "\"");
        return out;
      }
    }
  }
  out.client = kept ? std::move(kept)
                    : client_for(base_url_, with_cert ? options_.client_cert : std::string(),
                                 with_cert ? options_.client_key : std::string());
  if (!out.client && with_cert) {
    out.error = make_error(ErrorCode::InvalidArgument, "the client certificate \"" + options_.client_cert +
                                                           "\" and key \"" + options_.client_key +
                                                           "\" do not load as a pair");
    return out;
  }
  if (!out.client) {
    out.error = make_error(ErrorCode::InvalidArgument,
                           "agent URL \"" + base_url_ + "\" is not http(s)://host[:port]");
    return out;
  }
  httplib::Client& client = *out.client;
  client.set_keep_alive(true);
  // Headers and body go out in two writes: without TCP_NODELAY the body waits for the ACK of the headers,
  // which the agent delays 40 ms (Nagle against delayed ACK), on every POST.
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(options_.connect_timeout);
  client.set_read_timeout(read_timeout);
  client.set_write_timeout(options_.write_timeout);
  const bool by_name = !options_.server_name.empty() && base_url_.starts_with("https://");
  if (!kept_client && by_name) {
    // httplib checks the certificate against the URL's host only; OpenSSL checks it against the name here,
    // during the handshake, with the chain against the CA (or the system's).
    client.enable_server_certificate_verification(false);
    SSL_CTX* ctx = client.ssl_context();
    const bool loaded =
        ctx != nullptr && (options_.ca_cert.empty()
                               ? SSL_CTX_set_default_verify_paths(ctx) == 1
                               : SSL_CTX_load_verify_locations(ctx, options_.ca_cert.c_str(), nullptr) == 1);
    if (!loaded) {
      out.client.reset();
      out.error =
          make_error(ErrorCode::InvalidArgument, "cannot read the CA file \"" + options_.ca_cert + "\"");
      return out;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(ctx), options_.server_name.c_str(),
                                options_.server_name.size());
  } else if (!kept_client && !options_.ca_cert.empty()) {
    client.set_ca_cert_path(options_.ca_cert);
  }
  // The token goes with each request, never on the client: a kept connection is taken by the next caller
  // of the same agent, who may hold another token or none.
  httplib::Headers headers;
  if (const std::string token = options_.token.current(); !token.empty()) {
    headers.emplace("Authorization", "Bearer " + token);
  }
  const auto started = std::chrono::steady_clock::now();
  out.response = [&] {
    switch (method) {
      case Method::Get:
        return client.Get(path, headers);
      case Method::Post:
        return client.Post(path, headers, body != nullptr ? body->dump() : "{}", "application/json");
      case Method::Delete:
        return client.Delete(path, headers);
    }
    return client.Get(path, headers);
  }();
  out.fast_failure =
      !out.response &&
      (out.response.error() == httplib::Error::Write || out.response.error() == httplib::Error::Read) &&
      std::chrono::steady_clock::now() - started < std::chrono::milliseconds(100);
  return out;
}

Result<json> AgentClient::node() const {
  return call(Method::Get, "/v1/node", nullptr, options_.read_timeout);
}

Result<std::vector<Region>> AgentClient::list_regions() const {
  auto r = call(Method::Get, "/v1/regions", nullptr, options_.read_timeout);
  if (!r) return r.error();
  return regions_from_json(*r);
}

Result<Region> AgentClient::create_region(const CreateRegion& request) const {
  const json body = request.to_json();
  return decoded<Region>(call(Method::Post, "/v1/regions", &body, options_.slow_timeout));
}

Result<Region> AgentClient::load_region(const LoadRegion& request) const {
  const json body = request.to_json();
  return decoded<Region>(call(Method::Post, "/v1/regions", &body, options_.slow_timeout));
}

Result<Region> AgentClient::get_region(const std::string& name) const {
  return decoded<Region>(call(Method::Get, "/v1/regions/" + name, nullptr, options_.read_timeout));
}

Result<Manifest> AgentClient::manifest(const std::string& region) const {
  auto body =
      call(Method::Get, "/v1/regions/" + segment(region) + "/manifest", nullptr, options_.read_timeout);
  if (!body) return body.error();
  // Checked by the agent against the region's bytes already; read here as strictly as any body.
  return Manifest::from_json(*body, UINT64_MAX);
}

Status AgentClient::delete_region(const std::string& name, const std::string& ns) const {
  return done(call(Method::Delete, "/v1/regions/" + segment(name) + for_namespace(ns), nullptr,
                   options_.read_timeout));
}

Result<SaveResult> AgentClient::save_region(const std::string& name, const SaveRegion& request) const {
  const json body = request.to_json();
  return decoded<SaveResult>(
      call(Method::Post, "/v1/regions/" + name + "/save", &body, options_.slow_timeout));
}

Result<Checksum> AgentClient::checksum(const std::string& region, const ChecksumQuery& query) const {
  auto r = call(Method::Get, "/v1/regions/" + region + "/checksum?" + query.query_string(), nullptr,
                options_.read_timeout);
  if (!r) return r.error();
  auto sums = Checksum::from_json(*r);
  if (!sums) {
    return make_error(ErrorCode::Provider,
                      who_ + " sent a malformed checksum answer: " + sums.error().message);
  }
  return sums;
}

Status AgentClient::staging(const std::string& region, const StagingRequest& request) const {
  const json body = request.to_json();
  return done(call(Method::Post, "/v1/regions/" + region + "/staging", &body, options_.read_timeout));
}

Result<Grant> AgentClient::create_grant(const std::string& region, const GrantRequest& request) const {
  const json body = request.to_json();
  return decoded<Grant>(
      call(Method::Post, "/v1/regions/" + region + "/grants", &body, options_.read_timeout));
}

Status AgentClient::revoke_grant(const std::string& id, const std::string& ns) const {
  return done(
      call(Method::Delete, "/v1/grants/" + segment(id) + for_namespace(ns), nullptr, options_.read_timeout));
}

Result<FileInfo> AgentClient::stat_file(const std::string& path, const std::string& ns) const {
  const json body = StatFile{.path = path, .ns = ns}.to_json();
  return decoded<FileInfo>(call(Method::Post, "/v1/files/stat", &body, options_.read_timeout));
}

Result<Grant> AgentClient::create_ring_grant(const RingGrantRequest& request) const {
  const json body = request.to_json();
  return decoded<Grant>(call(Method::Post, "/v1/grants", &body, options_.read_timeout));
}

Result<Landed> AgentClient::landed(const std::string& grant, const LandedReport& report) const {
  const json body = report.to_json();
  auto answer = call(Method::Post, "/v1/grants/" + grant + "/landed", &body, options_.read_timeout);
  if (!answer) return answer.error();
  return Landed::from_json(*answer);
}

Status AgentClient::commit(const std::string& grant, std::uint64_t bytes, const Manifest* manifest,
                           std::optional<std::uint64_t> version) const {
  CommitRequest request{.bytes = bytes, .version = version};
  if (manifest != nullptr) request.manifest = *manifest;
  const json body = request.to_json();
  // fsync of a whole checkpoint can take long on a slow disk.
  return done(call(Method::Post, "/v1/grants/" + grant + "/commit", &body, options_.slow_timeout));
}

Result<GrantChecksum> AgentClient::grant_checksum(const std::string& grant,
                                                  const GrantChecksumRequest& request) const {
  const json body = request.to_json();
  auto answer = call(Method::Post, "/v1/grants/" + grant + "/checksum", &body, options_.read_timeout);
  if (!answer) return answer.error();
  auto sum = GrantChecksum::from_json(*answer);
  if (!sum) {
    return make_error(ErrorCode::Provider,
                      who_ + " sent a malformed checksum answer: " + sum.error().message);
  }
  return sum;
}

Result<TransferStatus> AgentClient::start_transfer(const TransferRequest& request) const {
  const json body = request.to_json();
  return decoded<TransferStatus>(call(Method::Post, "/v1/transfers", &body, options_.read_timeout));
}

Result<TransferStatus> AgentClient::get_transfer(const std::string& id, const std::string& ns) const {
  return decoded<TransferStatus>(
      call(Method::Get, "/v1/transfers/" + segment(id) + for_namespace(ns), nullptr, options_.read_timeout));
}

Result<TransferStatus> AgentClient::wait_transfer(const std::string& id, std::chrono::seconds wait,
                                                  const std::string& ns) const {
  return decoded<TransferStatus>(call(Method::Get,
                                      "/v1/transfers/" + segment(id) + "?waitSeconds=" +
                                          std::to_string(wait.count()) + for_namespace(ns, '&'),
                                      nullptr, options_.read_timeout + wait));
}

Status AgentClient::cancel_transfer(const std::string& id, const std::string& ns) const {
  return done(call(Method::Delete, "/v1/transfers/" + segment(id) + for_namespace(ns), nullptr,
                   options_.read_timeout));
}

}  // namespace conduit::api
