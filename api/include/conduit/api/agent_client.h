// The one client of an agent's REST API (agent/openapi.yaml): the controller (behind its AgentApi seam), the
// `conduit` CLI, and agents asking each other for checksums and staging copies all call agents through it,
// so every caller sends the same bodies and reads errors the same way:
//   - the agent did not answer (refused, timed out, TLS failed): PeerUnreachable, "<who> did not answer
//     GET /v1/node: could not connect";
//   - the agent answered an error body: the code's ErrorCode (conduit/api/errors.h), "<Code>: <message>";
//   - an error status without that body: by the status (errors.h), "<who> answered HTTP 502 to GET ...".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/grant.h"
#include "conduit/api/transfer.h"
#include "conduit/api/wire.h"
#include "conduit/common/result.h"
#include "conduit/common/token_file.h"

namespace httplib {
class Client;
}

namespace conduit::api {

// The bearer token as it is at each call: none, a fixed one, a conduit::TokenFile (rotated by rewriting the
// file), or whatever a callable says.
class TokenSource {
 public:
  TokenSource() = default;
  TokenSource(std::string token);                      // NOLINT(google-explicit-constructor)
  TokenSource(std::shared_ptr<const TokenFile> file);  // NOLINT(google-explicit-constructor)
  TokenSource(std::function<std::string()> current);   // NOLINT(google-explicit-constructor)
  std::string current() const { return current_ ? current_() : std::string(); }

 private:
  std::function<std::string()> current_;
};

// How to reach agents; one set serves any number of clients (an agent asks many peers with one).
struct ClientOptions {
  TokenSource token;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(10)};
  // Allocating, loading and saving a region of many GiB takes minutes, not seconds.
  std::chrono::milliseconds slow_timeout{std::chrono::minutes(10)};
  std::string ca_cert{};  // https: the CA file to trust instead of the system's
  // https: the name the agent's certificate must carry, checked instead of the address called. Empty: the
  // address. One certificate can then serve every agent of an install (docs/security.md).
  std::string server_name{};
  // https: the certificate (and its key) this caller presents, which the agent maps to an identity
  // (docs/security.md: the controller, an agent, an operator). Empty: none; the token alone says who calls.
  std::string client_cert{};
  std::string client_key{};
};

class AgentClient {
 public:
  // `base_url`: scheme://host[:port]; trailing slashes are dropped ("http://node:7070/" is the same agent).
  // `who` names the agent in messages; default "agent at <base_url>".
  AgentClient(std::string base_url, ClientOptions options, std::string who = "");

  // Whether `url` is one httplib can call (http(s)://host[:port]).
  static bool valid_url(const std::string& url);
  const std::string& base_url() const { return base_url_; }

  Result<nlohmann::json> node() const;  // GET /v1/node: the inventory as the agent wrote it

  Result<std::vector<Region>> list_regions() const;                 // GET /v1/regions
  Result<Region> create_region(const CreateRegion& request) const;  // POST /v1/regions
  Result<Region> load_region(const LoadRegion& request) const;      // POST /v1/regions
  Result<Region> get_region(const std::string& name) const;         // GET /v1/regions/{name}
  // GET /v1/regions/{name}/manifest: the named tensors it holds (NotFound when it names none).
  Result<Manifest> manifest(const std::string& region) const;
  // DELETE /v1/regions/{name}. `ns`, for a job's namespace: the agent deletes only a region of that
  // namespace (the DELETEs and transfer GETs below likewise hold to it: a grant or transfer made for it).
  Status delete_region(const std::string& name, const std::string& ns = "") const;
  // POST /v1/regions/{name}/save
  Result<SaveResult> save_region(const std::string& name, const SaveRegion& request) const;
  // GET /v1/regions/{name}/checksum
  // POST /v1/files/stat; `ns`: the job's namespace (SaveRegion's).
  Result<FileInfo> stat_file(const std::string& path, const std::string& ns = "") const;
  Result<Checksum> checksum(const std::string& region, const ChecksumQuery& query) const;
  // POST /v1/regions/{name}/staging: the agent copies that range of a staged CUDA region from its staging
  // buffer to the device (to_device), or back.
  Status staging(const std::string& region, const StagingRequest& request) const;

  // POST /v1/regions/{name}/grants
  Result<Grant> create_grant(const std::string& region, const GrantRequest& request) const;
  Status revoke_grant(const std::string& id, const std::string& ns = "") const;  // DELETE /v1/grants/{id}
  Result<Grant> create_ring_grant(const RingGrantRequest& request) const;        // POST /v1/grants
  Result<Landed> landed(const std::string& grant, const LandedReport& report) const;  // .../landed
  // .../commit; `manifest` (may be null) becomes the region's with its new version; `version`: the one the
  // region must reach by this commit (Conflict naming the version it is at otherwise)
  Status commit(const std::string& grant, std::uint64_t bytes, const Manifest* manifest = nullptr,
                std::optional<std::uint64_t> version = std::nullopt) const;
  // .../checksum: one CRC32C over the ranges of the granted range, in order (a verified scatter's target sum)
  Result<GrantChecksum> grant_checksum(const std::string& grant, const GrantChecksumRequest& request) const;

  Result<TransferStatus> start_transfer(const TransferRequest& request) const;  // POST /v1/transfers
  // GET /v1/transfers/{id}
  Result<TransferStatus> get_transfer(const std::string& id, const std::string& ns = "") const;
  // A long-poll: answers as soon as the transfer ended, or after `wait` with its state then.
  Result<TransferStatus> wait_transfer(const std::string& id, std::chrono::seconds wait,
                                       const std::string& ns = "") const;
  Status cancel_transfer(const std::string& id,
                         const std::string& ns = "") const;  // DELETE /v1/transfers/{id}

 private:
  enum class Method { Get, Post, Delete };
  // The answer's JSON (an empty object for an empty or non-JSON 2xx body), or the error as described above.
  Result<nlohmann::json> call(Method method, const std::string& path, const nlohmann::json* body,
                              std::chrono::milliseconds read_timeout) const;

  // One request on `kept` (a pooled keep-alive connection) or a new client (agent_client.cpp).
  struct Exchange;
  Exchange exchange(std::unique_ptr<httplib::Client> kept, Method method, const std::string& path,
                    const nlohmann::json* body, std::chrono::milliseconds read_timeout) const;

  std::string base_url_;
  ClientOptions options_;
  std::string who_;
};

}  // namespace conduit::api
