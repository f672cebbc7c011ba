// Grants: the only way a region becomes remotely accessible. A grant registers one range of a region with
// one transport for read or write, hands out its RemoteKey, and deregisters when revoked or expired, so a
// key never outlives the grant that made it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/transport.h"
#include "regions.h"
#include "transfer/staged/staged_target.h"
#include "transfer/stream/landing.h"
#include "transport_set.h"

namespace conduit::agent {

struct Grant {
  std::string id;
  RegionUse region;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  Access access = Access::RemoteWrite;
  std::string provider;
  // The node whose agent uses the grant (writes through it, reports what landed, asks for checksums): only
  // its identity, besides the controller's and operators', may (rest/identity.h). Empty: any agent's.
  std::string peer;
  std::string job_namespace;  // the namespace of the job it was made for ("" = an operator's request)
  std::string writer;  // who writes through it (CreateGrant's writer): the region's updatedBy on commit
  // On a whole second, so the expiresAt shown is exactly when the key stops working (the grant lasts at
  // least its ttlSeconds and less than one second more). Atomic: a renewal moves it while others read it.
  std::chrono::system_clock::time_point expires_at() const {
    return std::chrono::system_clock::time_point(std::chrono::system_clock::duration(expires_.load()));
  }
  void expire_at(std::chrono::system_clock::time_point t) { expires_.store(t.time_since_epoch().count()); }
  std::atomic<std::chrono::system_clock::rep> expires_{0};
  // Set when the region is CUDA memory the transport cannot register: the grant registers this host
  // staging buffer instead and its key says "staged" (staged_target.h). Before `registration`, so the
  // registration goes first.
  std::shared_ptr<StagingBuffer> staging;
  std::string gpu_path = "none";
  std::vector<std::string> nics;    // the NICs of the rails the key names; empty where rails name none (tcp)
  double registration_seconds = 0;  // what registering the range took, once, when the grant was made
  // Set for a grant the writer reports landed segments to (verify as they land, save as they land, a
  // ring): stream/landing.h. Internally synchronised.
  std::shared_ptr<Landing> landing;
  Registration registration;

  // {id, region, offset, length, access: "write"|"read", provider, expiresAt (RFC 3339), key: RemoteKey,
  //  gpuPath: "none" (host memory) | "dmabuf" | "peermem" | "staged", nics, landing?}
  nlohmann::json to_json() const;
};

// What a grant does with the segments its writer reports landed (Landing).
struct LandingSpec {
  bool ring = false;               // the granted range is a ring the stream passes through
  std::uint64_t stream_bytes = 0;  // ring: the bytes of the whole stream; otherwise the granted length
  std::optional<SaveFile> save;    // where verified bytes go
  std::string writer;              // who writes (CreateGrant's writer): the region's updatedBy on commit
};

class GrantTable {
 public:
  using Clock = std::chrono::system_clock;
  explicit GrantTable(const TransportSet& transports) : transports_(transports) {}

  // provider "" = the agent's primary transport. ttl must be 1 s .. 24 h. `landing`: write grants of host
  // memory only (Unsupported for CUDA memory: save such a region after its transfer).
  Result<std::shared_ptr<const Grant>> create(RegionPtr region, std::uint64_t offset, std::uint64_t length,
                                              Access access, std::chrono::seconds ttl,
                                              const std::string& provider,
                                              std::optional<LandingSpec> landing = std::nullopt,
                                              const std::string& writer = "", const std::string& peer = "",
                                              const std::string& job_namespace = "");
  Result<std::shared_ptr<const Grant>> get(const std::string& id) const;
  std::vector<std::shared_ptr<const Grant>> list() const;
  Status revoke(const std::string& id);  // NotFound when unknown or already gone
  // A long-lived grant kept alive: it now expires `ttl` from now (1 s .. 24 h); the key, its registration
  // and its landing stay as they are. NotFound when unknown or already gone.
  Result<std::shared_ptr<const Grant>> renew(const std::string& id, std::chrono::seconds ttl);
  std::size_t expire(Clock::time_point now = Clock::now());  // revokes every expired grant; returns how many
  std::optional<Clock::time_point> next_expiry() const;      // the earliest expiresAt; nullopt: no grants
  void revoke_all();
  const StagingTable& staging() const { return staging_; }

 private:
  const TransportSet& transports_;
  StagingTable staging_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Grant>> grants_;
};

}  // namespace conduit::agent
