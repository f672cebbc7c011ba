#include "agent_api.h"

#include <utility>

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

std::string transport_name(const std::string& provider) {
  for (const char* name : {"efa", "verbs", "shm", "tcp"}) {
    if (provider.find(name) != std::string::npos) return name;
  }
  return provider.substr(0, 63);
}

HttpAgentApi::HttpAgentApi(const AgentDirectory& directory, api::ClientOptions options)
    : directory_(directory), options_(std::move(options)) {}

Result<api::AgentClient> HttpAgentApi::client(const std::string& node) const {
  const auto url = directory_.url(node);
  if (!url) return make_error(ErrorCode::NotFound, "no conduit-agent is known on node \"" + node + "\"");
  return api::AgentClient(*url, options_, "agent on node \"" + node + "\" (" + *url + ")");
}

Result<json> HttpAgentApi::node_info(const std::string& node) {
  auto c = client(node);
  if (!c) return c.error();
  return c->node();
}

Result<api::Region> HttpAgentApi::create_region(const std::string& node, const api::CreateRegion& region) {
  auto c = client(node);
  if (!c) return c.error();
  return c->create_region(region);
}

Result<api::Manifest> HttpAgentApi::manifest(const std::string& node, const std::string& name) {
  auto c = client(node);
  if (!c) return c.error();
  return c->manifest(name);
}

Result<api::Region> HttpAgentApi::get_region(const std::string& node, const std::string& name) {
  auto c = client(node);
  if (!c) return c.error();
  return c->get_region(name);
}

Result<api::Region> HttpAgentApi::load_file(const std::string& node, const std::string& name,
                                            const std::string& file, const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  return c->load_region({.name = name, .file = file, .ns = ns});
}

Status HttpAgentApi::save_region(const std::string& node, const std::string& name, const std::string& file,
                                 const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  auto saved = c->save_region(name, {.file = file, .ns = ns});
  if (!saved) return saved.error();
  return {};
}

Status HttpAgentApi::delete_region(const std::string& node, const std::string& name, const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  return c->delete_region(name, ns);
}

Result<std::uint64_t> HttpAgentApi::file_size(const std::string& node, const std::string& file,
                                              const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  auto info = c->stat_file(file, ns);
  if (!info) return info.error();
  return info->bytes;
}

Result<api::Grant> HttpAgentApi::grant(const std::string& node, const GrantAsk& ask) {
  auto c = client(node);
  if (!c) return c.error();
  auto g = ask.region.empty() ? c->create_ring_grant({.save = ask.save,
                                                      .bytes = ask.length,
                                                      .ttl_seconds = ask.ttl_seconds,
                                                      .provider = ask.provider,
                                                      .peer = ask.peer,
                                                      .ns = ask.ns})
                              : c->create_grant(ask.region, {.offset = 0,
                                                             .length = ask.length,
                                                             .access = "write",
                                                             .ttl_seconds = ask.ttl_seconds,
                                                             .provider = ask.provider,
                                                             .save = ask.save,
                                                             .writer = ask.writer,
                                                             .peer = ask.peer,
                                                             .ns = ask.ns,
                                                             .pod = ask.pod});
  if (!g) return g.error();
  // An older agent names the provider only in the key.
  if (g->provider.empty()) g->provider = g->key.value("provider", "");
  return g;
}

Status HttpAgentApi::revoke_grant(const std::string& node, const std::string& id, const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  return c->revoke_grant(id, ns);
}

Status HttpAgentApi::commit_grant(const std::string& node, const std::string& id, std::uint64_t bytes,
                                  std::uint64_t version) {
  auto c = client(node);
  if (!c) return c.error();
  return c->commit(id, bytes, nullptr, version);
}

Result<api::TransferStatus> HttpAgentApi::start_transfer(const std::string& node,
                                                         const api::TransferRequest& request) {
  auto c = client(node);
  if (!c) return c.error();
  return c->start_transfer(request);
}

Result<api::TransferStatus> HttpAgentApi::get_transfer(const std::string& node, const std::string& id,
                                                       const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  return c->get_transfer(id, ns);
}

Result<api::TransferStatus> HttpAgentApi::wait_transfer(const std::string& node, const std::string& id,
                                                        std::chrono::seconds wait, const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  auto r = c->wait_transfer(id, wait, ns);
  if (!r && r.error().code == ErrorCode::ResourceExhausted) return c->get_transfer(id, ns);
  return r;
}

Status HttpAgentApi::cancel_transfer(const std::string& node, const std::string& id, const std::string& ns) {
  auto c = client(node);
  if (!c) return c.error();
  return c->cancel_transfer(id, ns);
}

}  // namespace conduit::controller
