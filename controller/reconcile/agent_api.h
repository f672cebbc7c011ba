// The controller's view of the node agents: the few REST calls a TransferJob needs (agent/openapi.yaml),
// addressed by node name. HttpAgentApi speaks HTTP; tests put a fake behind the same interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/result.h"

namespace conduit::controller {

// node name -> agent base URL ("http://10.0.0.2:7070"). Local mode fills it from --agents; Kubernetes mode
// from the agent Service's EndpointSlices, so it may change while the controller runs.
class AgentDirectory {
 public:
  void set(const std::string& node, const std::string& url);
  void remove(const std::string& node);
  std::optional<std::string> url(const std::string& node) const;
  std::vector<std::string> nodes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> urls_;
};

struct RegionInfo {
  std::string name;
  std::uint64_t bytes = 0;
  std::string memory;
};

struct GrantInfo {
  std::string id;
  nlohmann::json key;    // the RemoteKey, handed to the source agent as it came
  std::string provider;  // "tcp;ofi_rxm", "efa", ...
};

struct TransferTarget {
  nlohmann::json key;  // a GrantInfo::key
  std::string url;     // the target agent, which checks CRC32C slices for verify
  std::string region;
  std::uint64_t resume_offset = 0;  // bytes already in place from an earlier attempt
};

struct TransferRequest {
  std::string source_region;
  std::uint64_t length = 0;
  std::vector<TransferTarget> targets;
  std::uint64_t chunk_bytes = 1u << 20;
  std::uint32_t window = 16;
  bool verify = true;
  std::uint64_t deadline_seconds = 0;  // 0: none
  std::uint64_t max_bytes_per_second = 0;
};

struct TransferInfo {
  struct Target {
    std::string state;
    std::uint64_t bytes_done = 0;
    std::string last_error;
    std::uint64_t committed_bytes = 0;  // [0, this) has landed at the target
    bool staged = false;                // the target's CUDA region was reached through a host staging buffer
  };
  std::string id;
  std::string state;  // Queued, Running, Succeeded, Failed, Cancelled
  std::uint64_t bytes_total = 0;
  std::uint64_t bytes_done = 0;
  double throughput = 0;  // bytes per second
  std::uint32_t retries = 0;
  bool verified = false;
  // How the source region was reached: none (host memory), dmabuf, peermem or staged (docs/gpu.md). ""
  // from an agent that does not say.
  std::string gpu_path;
  std::string reason;  // when Failed or Cancelled: Stalled, PeerUnreachable, ChecksumMismatch, ...
  std::string message;
  std::vector<Target> targets;

  bool finished() const { return state == "Succeeded" || state == "Failed" || state == "Cancelled"; }
  bool any_staged() const;  // either end of any target ran through host bounce or staging buffers
  static TransferInfo from_json(const nlohmann::json& body);
};

// Errors carry the agent's own code and message ("NotFound: no region \"x\""). An agent that does not answer
// (unknown node, refused connection, timeout) is PeerUnreachable.
class AgentApi {
 public:
  virtual ~AgentApi() = default;

  virtual std::optional<std::string> url(const std::string& node) const = 0;  // nullopt: no agent there
  virtual Result<nlohmann::json> node_info(const std::string& node) = 0;
  virtual Result<RegionInfo> create_region(const std::string& node, const std::string& name,
                                           std::uint64_t bytes, const std::string& memory) = 0;
  virtual Result<RegionInfo> get_region(const std::string& node, const std::string& name) = 0;
  virtual Result<RegionInfo> load_file(const std::string& node, const std::string& name,
                                       const std::string& file) = 0;
  virtual Status save_region(const std::string& node, const std::string& name, const std::string& file) = 0;
  virtual Status delete_region(const std::string& node, const std::string& name) = 0;
  // provider empty: the agent's primary transport.
  virtual Result<GrantInfo> grant(const std::string& node, const std::string& region, std::uint64_t length,
                                  std::uint32_t ttl_seconds, const std::string& provider) = 0;
  virtual Status revoke_grant(const std::string& node, const std::string& id) = 0;
  virtual Result<TransferInfo> start_transfer(const std::string& node, const TransferRequest& request) = 0;
  virtual Result<TransferInfo> get_transfer(const std::string& node, const std::string& id) = 0;
  virtual Status cancel_transfer(const std::string& node, const std::string& id) = 0;
};

struct HttpAgentOptions {
  std::filesystem::path token_file;  // re-read when it changes (rotated tokens); empty: no token
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds read_timeout{10000};
  // Loading, allocating and saving a region of many GiB takes minutes, not seconds.
  std::chrono::milliseconds slow_timeout{std::chrono::minutes(10)};
};

class HttpAgentApi : public AgentApi {
 public:
  HttpAgentApi(const AgentDirectory& directory, HttpAgentOptions options);

  std::optional<std::string> url(const std::string& node) const override { return directory_.url(node); }
  Result<nlohmann::json> node_info(const std::string& node) override;
  Result<RegionInfo> create_region(const std::string& node, const std::string& name, std::uint64_t bytes,
                                   const std::string& memory) override;
  Result<RegionInfo> get_region(const std::string& node, const std::string& name) override;
  Result<RegionInfo> load_file(const std::string& node, const std::string& name,
                               const std::string& file) override;
  Status save_region(const std::string& node, const std::string& name, const std::string& file) override;
  Status delete_region(const std::string& node, const std::string& name) override;
  Result<GrantInfo> grant(const std::string& node, const std::string& region, std::uint64_t length,
                          std::uint32_t ttl_seconds, const std::string& provider) override;
  Status revoke_grant(const std::string& node, const std::string& id) override;
  Result<TransferInfo> start_transfer(const std::string& node, const TransferRequest& request) override;
  Result<TransferInfo> get_transfer(const std::string& node, const std::string& id) override;
  Status cancel_transfer(const std::string& node, const std::string& id) override;

 private:
  enum class Method { Get, Post, Delete };
  Result<nlohmann::json> call(const std::string& node, Method method, const std::string& path,
                              const nlohmann::json* body, std::chrono::milliseconds read_timeout);
  std::string token();

  const AgentDirectory& directory_;
  HttpAgentOptions options_;
  std::mutex token_mu_;
  std::string token_;
  std::filesystem::file_time_type token_mtime_{};
};

// The short transport name status and FabricNodes show for an agent's provider ("tcp;ofi_rxm" -> "tcp").
std::string transport_name(const std::string& provider);

// "Conflict" -> ErrorCode::Conflict, ...: the agent's error codes (openapi.yaml) as the data plane's.
ErrorCode error_code_from_agent(const std::string& code);

}  // namespace conduit::controller
