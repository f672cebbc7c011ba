// The controller's view of the node agents: the few REST calls a TransferJob needs (agent/openapi.yaml),
// addressed by node name. HttpAgentApi speaks HTTP; tests put a fake behind the same interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/api/agent_client.h"
#include "conduit/api/grant.h"
#include "conduit/api/transfer.h"
#include "conduit/api/wire.h"
#include "conduit/common/result.h"

namespace conduit::controller {

// node name -> agent base URL ("http://10.0.0.2:7070"). Local mode fills it from --agents; Kubernetes mode
// from the agent Service's EndpointSlices, so it may change while the controller runs.
class AgentDirectory {
 public:
  AgentDirectory() = default;
  explicit AgentDirectory(const std::map<std::string, std::string>& urls) : urls_(urls) {}
  void set(const std::string& node, const std::string& url);
  void remove(const std::string& node);
  std::optional<std::string> url(const std::string& node) const;
  std::vector<std::string> nodes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> urls_;
};

// A grant for one target: the first `length` bytes of a region, or with no region a ring of the agent's
// pipeline memory in front of `save` (a file target).
struct GrantAsk {
  std::string region;  // empty: a ring grant
  std::uint64_t length = 0;
  std::uint32_t ttl_seconds = 600;
  std::string provider;  // empty: the agent's primary transport
  std::string save;      // the file the target writes as verified bytes land; empty: none
  std::string writer;    // the job ("namespace/name"): the target region's updatedBy when the write commits
  std::string peer;      // the node whose agent writes through it (only its identity may use it); "": any
  std::string ns;        // the job's namespace: the agent lets it touch only regions that admit it
  std::string pod;       // the UID of the pod the target is (podSelector): the region must be one it shared
};

// Errors carry the agent's own code and message ("NotFound: no region \"x\""). An agent that does not answer
// (unknown node, refused connection, timeout) is PeerUnreachable.
class AgentApi {
 public:
  virtual ~AgentApi() = default;

  virtual std::optional<std::string> url(const std::string& node) const = 0;  // nullopt: no agent there
  virtual Result<nlohmann::json> node_info(const std::string& node) = 0;
  // POST /v1/regions on `node`'s agent: the body as it is sent (name, bytes, memory, namespace, manifest).
  virtual Result<api::Region> create_region(const std::string& node, const api::CreateRegion& region) = 0;
  virtual Result<api::Region> get_region(const std::string& node, const std::string& name) = 0;
  // The named tensors region `name` holds (NotFound when it names none).
  virtual Result<api::Manifest> manifest(const std::string& node, const std::string& name) = 0;
  virtual Result<api::Region> load_file(const std::string& node, const std::string& name,
                                        const std::string& file, const std::string& ns) = 0;
  // `ns`: the job's namespace; with --namespace-files the agent lets a job reach only files under "<ns>/".
  virtual Status save_region(const std::string& node, const std::string& name, const std::string& file,
                             const std::string& ns) = 0;
  // `ns` below: the job's namespace. What a job's run record names (which whoever may edit the job may
  // write) is looked at and released only as that namespace's: the agent refuses (RemoteAccess) a region,
  // grant or transfer of another.
  virtual Status delete_region(const std::string& node, const std::string& name, const std::string& ns) = 0;
  virtual Result<std::uint64_t> file_size(const std::string& node, const std::string& file,
                                          const std::string& ns) = 0;
  virtual Result<api::Grant> grant(const std::string& node, const GrantAsk& ask) = 0;
  virtual Status revoke_grant(const std::string& node, const std::string& id, const std::string& ns) = 0;
  // POST /v1/grants/{id}/commit {bytes, version}: the region behind a plain write grant (one no landing
  // reports went to: a scatter batch's) moves to `version` now; Conflict, naming the version it is at,
  // unless it is at version - 1.
  virtual Status commit_grant(const std::string& node, const std::string& id, std::uint64_t bytes,
                              std::uint64_t version) = 0;
  virtual Result<api::TransferStatus> start_transfer(const std::string& node,
                                                     const api::TransferRequest& request) = 0;
  virtual Result<api::TransferStatus> get_transfer(const std::string& node, const std::string& id,
                                                   const std::string& ns) = 0;
  // Answers as soon as the transfer ended, or after `wait` with its state then (the agent may refuse to
  // wait when it holds many long-polls: then it is asked without waiting).
  virtual Result<api::TransferStatus> wait_transfer(const std::string& node, const std::string& id,
                                                    std::chrono::seconds wait, const std::string& ns) = 0;
  virtual Status cancel_transfer(const std::string& node, const std::string& id, const std::string& ns) = 0;
};

// AgentApi over api::AgentClient: finds the node's agent in the directory at each call. `options` are the
// controller's (config.h: token, TLS, timeouts), used as they are for every call.
class HttpAgentApi : public AgentApi {
 public:
  HttpAgentApi(const AgentDirectory& directory, api::ClientOptions options);

  std::optional<std::string> url(const std::string& node) const override { return directory_.url(node); }
  Result<nlohmann::json> node_info(const std::string& node) override;
  Result<api::Region> create_region(const std::string& node, const api::CreateRegion& region) override;
  Result<api::Region> get_region(const std::string& node, const std::string& name) override;
  Result<api::Manifest> manifest(const std::string& node, const std::string& name) override;
  Result<api::Region> load_file(const std::string& node, const std::string& name, const std::string& file,
                                const std::string& ns) override;
  Status save_region(const std::string& node, const std::string& name, const std::string& file,
                     const std::string& ns) override;
  Status delete_region(const std::string& node, const std::string& name, const std::string& ns) override;
  Result<std::uint64_t> file_size(const std::string& node, const std::string& file,
                                  const std::string& ns) override;
  Result<api::Grant> grant(const std::string& node, const GrantAsk& ask) override;
  Status revoke_grant(const std::string& node, const std::string& id, const std::string& ns) override;
  Status commit_grant(const std::string& node, const std::string& id, std::uint64_t bytes,
                      std::uint64_t version) override;
  Result<api::TransferStatus> start_transfer(const std::string& node,
                                             const api::TransferRequest& request) override;
  Result<api::TransferStatus> get_transfer(const std::string& node, const std::string& id,
                                           const std::string& ns) override;
  Result<api::TransferStatus> wait_transfer(const std::string& node, const std::string& id,
                                            std::chrono::seconds wait, const std::string& ns) override;
  Status cancel_transfer(const std::string& node, const std::string& id, const std::string& ns) override;

 private:
  // The client of the node's agent, or NotFound when the directory knows none there.
  Result<api::AgentClient> client(const std::string& node) const;

  const AgentDirectory& directory_;
  api::ClientOptions options_;
};

// The short transport name status and FabricNodes show for an agent's provider ("tcp;ofi_rxm" -> "tcp").
std::string transport_name(const std::string& provider);

}  // namespace conduit::controller
