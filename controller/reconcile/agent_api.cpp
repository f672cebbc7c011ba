#include "agent_api.h"

#include <httplib.h>

#include <fstream>
#include <sstream>

#include "conduit/http_error.h"

namespace conduit::controller {

using json = nlohmann::json;

void AgentDirectory::set(const std::string& node, const std::string& url) {
  std::lock_guard lock(mu_);
  urls_[node] = url;
}

void AgentDirectory::remove(const std::string& node) {
  std::lock_guard lock(mu_);
  urls_.erase(node);
}

std::optional<std::string> AgentDirectory::url(const std::string& node) const {
  std::lock_guard lock(mu_);
  const auto it = urls_.find(node);
  if (it == urls_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> AgentDirectory::nodes() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [node, url] : urls_) out.push_back(node);
  return out;
}

TransferInfo TransferInfo::from_json(const json& body) {
  TransferInfo t;
  t.id = body.value("id", "");
  t.state = body.value("state", "");
  t.bytes_total = body.value("bytesTotal", std::uint64_t{0});
  t.bytes_done = body.value("bytesDone", std::uint64_t{0});
  t.throughput = body.value("throughputBytesPerSecond", 0.0);
  t.retries = body.value("retries", 0U);
  t.verified = body.value("verified", false);
  t.reason = body.value("reason", "");
  t.message = body.value("message", "");
  // Only the values the CRD allows: the status schema would refuse anything else, and the field is a
  // statement about the path, not free text.
  const std::string gpu_path =
      body.contains("gpuPath") && body["gpuPath"].is_string() ? body["gpuPath"].get<std::string>() : "";
  if (gpu_path == "none" || gpu_path == "dmabuf" || gpu_path == "peermem" || gpu_path == "staged") {
    t.gpu_path = gpu_path;
  }
  if (body.contains("targets") && body["targets"].is_array()) {
    for (const auto& target : body["targets"]) {
      if (!target.is_object()) {
        t.targets.emplace_back();  // keeps the others at their spec.targets index
        continue;
      }
      t.targets.push_back({target.value("state", ""), target.value("bytesDone", std::uint64_t{0}),
                           target.value("lastError", ""), target.value("committedBytes", std::uint64_t{0}),
                           target.value("staged", false)});
    }
  }
  return t;
}

bool TransferInfo::any_staged() const {
  if (gpu_path == "staged") return true;
  for (const auto& target : targets) {
    if (target.staged) return true;
  }
  return false;
}

std::string transport_name(const std::string& provider) {
  for (const char* name : {"efa", "verbs", "shm", "tcp"}) {
    if (provider.find(name) != std::string::npos) return name;
  }
  return provider.substr(0, 63);
}

ErrorCode error_code_from_agent(const std::string& code) {
  if (code == "NotFound" || code == "RouteNotFound") return ErrorCode::NotFound;
  if (code == "AlreadyExists") return ErrorCode::AlreadyExists;
  if (code == "Conflict") return ErrorCode::Conflict;
  if (code == "ResourceExhausted" || code == "PayloadTooLarge") return ErrorCode::ResourceExhausted;
  if (code == "Unsupported") return ErrorCode::Unsupported;
  if (code == "Unavailable") return ErrorCode::Unavailable;
  if (code == "Unauthorized") return ErrorCode::RemoteAccess;
  if (code == "InvalidArgument" || code == "MalformedJson" || code == "MethodNotAllowed" ||
      code == "UnsupportedMediaType") {
    return ErrorCode::InvalidArgument;
  }
  if (code == "IoError") return ErrorCode::Io;
  return ErrorCode::Provider;
}

HttpAgentApi::HttpAgentApi(const AgentDirectory& directory, HttpAgentOptions options)
    : directory_(directory), options_(std::move(options)) {}

std::string HttpAgentApi::token() {
  if (options_.token_file.empty()) return {};
  std::lock_guard lock(token_mu_);
  // Projected and rotated tokens change under us: re-read whenever the file does.
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(options_.token_file, ec);
  if (!ec && (token_.empty() || mtime != token_mtime_)) {
    std::ifstream in(options_.token_file);
    std::stringstream text;
    text << in.rdbuf();
    std::string t = text.str();
    const auto first = t.find_first_not_of(" \t\r\n");
    const auto last = t.find_last_not_of(" \t\r\n");
    if (in && first != std::string::npos) {
      token_ = t.substr(first, last - first + 1);
      token_mtime_ = mtime;
    }
  }
  return token_;
}

Result<json> HttpAgentApi::call(const std::string& node, Method method, const std::string& path,
                                const json* body, std::chrono::milliseconds read_timeout) {
  const auto url = directory_.url(node);
  if (!url) return make_error(ErrorCode::NotFound, "no conduit-agent is known on node \"" + node + "\"");
  // A client per call: calls are a few per second per job, and a fresh connection never inherits a broken
  // one.
  httplib::Client client(*url);
  if (!client.is_valid()) return make_error(ErrorCode::InvalidArgument, "bad agent URL \"" + *url + "\"");
  // Headers and body go out in two writes: without TCP_NODELAY the body waits for the ACK of the headers,
  // which the agent delays 40 ms (Nagle against delayed ACK), on every POST.
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(options_.connect_timeout);
  client.set_read_timeout(read_timeout);
  client.set_write_timeout(options_.read_timeout);
  if (const auto t = token(); !t.empty()) client.set_bearer_token_auth(t);

  httplib::Result result = [&] {
    switch (method) {
      case Method::Get:
        return client.Get(path);
      case Method::Post:
        return client.Post(path, body != nullptr ? body->dump() : "{}", "application/json");
      case Method::Delete:
        return client.Delete(path);
    }
    return client.Get(path);
  }();
  const char* verb = method == Method::Get ? "GET " : method == Method::Post ? "POST " : "DELETE ";
  if (!result) {
    return make_error(ErrorCode::PeerUnreachable, "agent on node \"" + node + "\" (" + *url +
                                                      ") did not answer " + verb + path + ": " +
                                                      describe_http_error(result.error()));
  }
  json answer = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (result->status < 400) return answer.is_discarded() ? json::object() : answer;
  if (answer.is_object() && answer.contains("error") && answer["error"].is_object()) {
    const std::string code = answer["error"].value("code", "Error");
    return make_error(error_code_from_agent(code), code + ": " + answer["error"].value("message", ""));
  }
  return make_error(result->status == 404 ? ErrorCode::NotFound : ErrorCode::Provider,
                    "agent on node \"" + node + "\" answered HTTP " + std::to_string(result->status) +
                        " to " + verb + path);
}

namespace {

RegionInfo region_from(const json& body) {
  return {body.value("name", ""), body.value("bytes", std::uint64_t{0}), body.value("memory", "")};
}

}  // namespace

Result<json> HttpAgentApi::node_info(const std::string& node) {
  return call(node, Method::Get, "/v1/node", nullptr, options_.read_timeout);
}

Result<RegionInfo> HttpAgentApi::create_region(const std::string& node, const std::string& name,
                                               std::uint64_t bytes, const std::string& memory) {
  const json body{{"name", name}, {"bytes", bytes}, {"memory", memory}};
  auto r = call(node, Method::Post, "/v1/regions", &body, options_.slow_timeout);
  if (!r) return r.error();
  return region_from(*r);
}

Result<RegionInfo> HttpAgentApi::get_region(const std::string& node, const std::string& name) {
  auto r = call(node, Method::Get, "/v1/regions/" + name, nullptr, options_.read_timeout);
  if (!r) return r.error();
  return region_from(*r);
}

Result<RegionInfo> HttpAgentApi::load_file(const std::string& node, const std::string& name,
                                           const std::string& file) {
  const json body{{"name", name}, {"file", file}, {"mode", "load"}};
  auto r = call(node, Method::Post, "/v1/regions", &body, options_.slow_timeout);
  if (!r) return r.error();
  return region_from(*r);
}

Status HttpAgentApi::save_region(const std::string& node, const std::string& name, const std::string& file) {
  const json body{{"file", file}};
  auto r = call(node, Method::Post, "/v1/regions/" + name + "/save", &body, options_.slow_timeout);
  if (!r) return r.error();
  return {};
}

Status HttpAgentApi::delete_region(const std::string& node, const std::string& name) {
  auto r = call(node, Method::Delete, "/v1/regions/" + name, nullptr, options_.read_timeout);
  if (!r) return r.error();
  return {};
}

Result<GrantInfo> HttpAgentApi::grant(const std::string& node, const std::string& region,
                                      std::uint64_t length, std::uint32_t ttl_seconds,
                                      const std::string& provider) {
  json body{{"offset", 0}, {"length", length}, {"access", "write"}, {"ttlSeconds", ttl_seconds}};
  if (!provider.empty()) body["provider"] = provider;
  auto r = call(node, Method::Post, "/v1/regions/" + region + "/grants", &body, options_.read_timeout);
  if (!r) return r.error();
  GrantInfo g{r->value("id", ""), r->value("key", json::object()), r->value("provider", "")};
  if (g.provider.empty()) g.provider = g.key.value("provider", "");
  return g;
}

Status HttpAgentApi::revoke_grant(const std::string& node, const std::string& id) {
  auto r = call(node, Method::Delete, "/v1/grants/" + id, nullptr, options_.read_timeout);
  if (!r) return r.error();
  return {};
}

Result<TransferInfo> HttpAgentApi::start_transfer(const std::string& node, const TransferRequest& request) {
  json targets = json::array();
  for (const auto& t : request.targets) {
    targets.push_back({{"grant", t.key},
                       {"offset", 0},
                       {"url", t.url},
                       {"region", t.region},
                       {"regionOffset", 0},
                       {"resumeOffset", t.resume_offset}});
  }
  const json body{{"source", {{"region", request.source_region}, {"offset", 0}, {"length", request.length}}},
                  {"targets", targets},
                  {"op", "write"},
                  {"chunkBytes", request.chunk_bytes},
                  {"window", request.window},
                  {"verify", request.verify ? "crc32c" : "none"},
                  {"deadlineSeconds", request.deadline_seconds},
                  {"maxBytesPerSecond", request.max_bytes_per_second}};
  auto r = call(node, Method::Post, "/v1/transfers", &body, options_.read_timeout);
  if (!r) return r.error();
  return TransferInfo::from_json(*r);
}

Result<TransferInfo> HttpAgentApi::get_transfer(const std::string& node, const std::string& id) {
  auto r = call(node, Method::Get, "/v1/transfers/" + id, nullptr, options_.read_timeout);
  if (!r) return r.error();
  return TransferInfo::from_json(*r);
}

Status HttpAgentApi::cancel_transfer(const std::string& node, const std::string& id) {
  auto r = call(node, Method::Delete, "/v1/transfers/" + id, nullptr, options_.read_timeout);
  if (!r) return r.error();
  return {};
}

}  // namespace conduit::controller
