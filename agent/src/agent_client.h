// What one agent asks of another over REST: per-slice checksums of a target range, for verify: crc32c, and
// copies between a staged CUDA region and its host staging buffer (docs/gpu.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "conduit/result.h"

namespace conduit::agent {

class AgentClient {
 public:
  explicit AgentClient(std::string token) : token_([t = std::move(token)] { return t; }) {}
  // The token as it is at each call: the agent's own, which a rotated --token-file changes.
  explicit AgentClient(std::function<std::string()> token) : token_(std::move(token)) {}

  // GET {url}/v1/regions/{region}/checksum?offset=&length=&slice= ; PeerUnreachable when the agent does not
  // answer, the agent's own error message otherwise.
  Result<std::vector<std::uint32_t>> checksum(const std::string& url, const std::string& region,
                                              std::uint64_t offset, std::uint64_t length,
                                              std::uint64_t slice) const;

  // POST {url}/v1/regions/{region}/staging {offset, length, direction: "toDevice" | "toHost"}: the target
  // copies that range of a staged CUDA region from its staging buffer to the device, or back.
  Status staging(const std::string& url, const std::string& region, std::uint64_t offset,
                 std::uint64_t length, bool to_device) const;

 private:
  std::function<std::string()> token_;
};

}  // namespace conduit::agent
