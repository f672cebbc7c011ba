#include "grants.h"

#include <cstdio>
#include <ctime>
#include <random>

#include "conduit/common/random.h"
#include "conduit/common/time.h"

namespace conduit::agent {

namespace {

constexpr std::chrono::seconds kMinTtl{1};
constexpr std::chrono::seconds kMaxTtl{86400};

// Ids are handed to other nodes and typed into URLs; unguessable ones keep a stray DELETE from revoking
// someone else's grant.
std::string new_grant_id() { return "g-" + random_hex(16); }

// Ending a grant here, not when the last shared_ptr goes, is what makes revocation immediate: a caller
// still holding the grant (an API handler mid-response, a listing for an access check) must neither keep
// the key working nor keep the region from being deleted. Only the registration's handles and the
// region's use count change; the RemoteKey that to_json reads and the memory a handler reads stay.
void retire(Grant& grant) {
  grant.registration.reset();
  grant.region.end();
}

std::string_view access_name(Access access) {
  if (access == Access::RemoteReadWrite) return "readwrite";
  return allows(access, Access::RemoteWrite) ? "write" : "read";
}

std::string range_text(std::uint64_t offset, std::uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

}  // namespace

nlohmann::json Grant::to_json() const {
  nlohmann::json key = registration.remote_key().to_json();
  if (staging) key["staged"] = true;  // the writer must say when bytes land (docs/gpu.md)
  nlohmann::json j{{"id", id},
                   {"region", region.get() ? region->name() : std::string()},
                   {"offset", offset},
                   {"length", length},
                   {"access", access_name(access)},
                   {"provider", provider},
                   {"expiresAt", format_rfc3339(expires_at())},
                   {"key", key},
                   {"gpuPath", gpu_path},
                   {"nics", nics}};
  if (landing) j["landing"] = landing->to_json();
  if (!peer.empty()) j["peer"] = peer;
  if (!job_namespace.empty()) j["namespace"] = job_namespace;
  j["registrationSeconds"] = registration_seconds;
  return j;
}

Result<std::shared_ptr<const Grant>> GrantTable::create(RegionPtr region, std::uint64_t offset,
                                                        std::uint64_t length, Access access,
                                                        std::chrono::seconds ttl, const std::string& provider,
                                                        std::optional<LandingSpec> landing,
                                                        const std::string& writer, const std::string& peer,
                                                        const std::string& job_namespace) {
  if (!region) return make_error(ErrorCode::InvalidArgument, "grant needs a region");
  if (access != Access::RemoteWrite && access != Access::RemoteRead) {
    return make_error(ErrorCode::InvalidArgument, "access must be write or read");
  }
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    return make_error(ErrorCode::InvalidArgument,
                      "ttlSeconds must be between 1 and 86400, got " + std::to_string(ttl.count()));
  }
  const std::uint64_t size = region->bytes();
  if (offset > size) {
    return make_error(ErrorCode::InvalidArgument, "offset " + std::to_string(offset) +
                                                      " is past the end of the " + std::to_string(size) +
                                                      "-byte region " + region->name());
  }
  if (length == 0) length = size - offset;  // 0 = to the end of the region
  if (length == 0 || length > size - offset) {
    return make_error(ErrorCode::InvalidArgument, "range " + range_text(offset, length) + " is outside the " +
                                                      std::to_string(size) + "-byte region " +
                                                      region->name());
  }
  Transport* transport = provider.empty() ? transports_.primary() : transports_.find(provider);
  if (transport == nullptr) {
    return make_error(ErrorCode::InvalidArgument,
                      "no transport for provider " +
                          (provider.empty() ? std::string("(primary)") : provider) + " on this agent");
  }

  // Every write grant of host memory takes landing reports, so a writer can verify as bytes land.
  if (access == Access::RemoteWrite && region->memory().kind() == MemoryKind::Host) {
    if (!landing) landing = LandingSpec{.save = std::nullopt, .writer = writer};
  }
  if (landing) {
    if (access != Access::RemoteWrite) {
      return make_error(ErrorCode::InvalidArgument,
                        "only a write grant can save or verify bytes as they land");
    }
    if (region->memory().kind() != MemoryKind::Host) {
      return make_error(ErrorCode::Unsupported,
                        "region " + region->name() + " is " + region->memory_label() +
                            " memory: bytes are saved as they land only from host memory; save the region "
                            "after its transfer instead");
    }
    if (!landing->ring) landing->stream_bytes = length;
    if (landing->ring && landing->stream_bytes == 0) {
      return make_error(ErrorCode::InvalidArgument, "a ring grant needs the size of the whole stream");
    }
  }

  // Whoever runs the expiry timer, a new grant is a good moment to drop dead ones too.
  expire();

  auto grant = std::make_shared<Grant>();
  grant->offset = offset;
  grant->length = length;
  grant->access = access;
  grant->provider = transport->capabilities().provider;
  grant->peer = peer;
  grant->job_namespace = job_namespace;
  grant->writer = writer;
  grant->expire_at(std::chrono::ceil<std::chrono::seconds>(Clock::now() + ttl));
  const MemoryRegion* memory = &region->memory();
  grant->gpu_path = memory->kind() == MemoryKind::Cuda
                        ? std::string(to_string(transport->capabilities().gpu_path))
                        : "none";
  if (memory->kind() == MemoryKind::Cuda && !transport->capabilities().device_memory) {
    auto staging = staging_.acquire(region);
    if (!staging) return staging.error();
    grant->staging = std::move(*staging);
    grant->gpu_path = "staged";
    memory = &grant->staging->memory();
  }
  // The rails nearest the region's memory (its GPU's, even where a staging buffer stands in for it), so
  // the key hands the writer only those.
  const RailChoice rails = transports_.rails_for(*transport, region->memory());
  grant->nics = rails.nics;
  const auto registering = std::chrono::steady_clock::now();
  auto registration = transport->register_memory(*memory, access, offset, length, rails.rails);
  grant->registration_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - registering).count();
  if (!registration) {
    return make_error(registration.error().code, "registering " + range_text(offset, length) + " of region " +
                                                     region->name() + ": " + registration.error().message);
  }
  grant->registration = std::move(*registration);
  if (landing) {
    grant->landing =
        std::make_shared<Landing>(region->memory().bytes().subspan(offset, length), landing->stream_bytes,
                                  landing->ring, std::move(landing->save), std::move(landing->writer));
  }
  grant->region = RegionUse(std::move(region));

  std::lock_guard lock(mu_);
  do {
    grant->id = new_grant_id();
  } while (grants_.contains(grant->id));
  grants_.emplace(grant->id, grant);
  return std::shared_ptr<const Grant>(grant);
}

Result<std::shared_ptr<const Grant>> GrantTable::get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = grants_.find(id);
  if (it == grants_.end()) return make_error(ErrorCode::NotFound, "no grant " + id);
  return std::shared_ptr<const Grant>(it->second);
}

std::vector<std::shared_ptr<const Grant>> GrantTable::list() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<const Grant>> out;
  for (const auto& [_, g] : grants_) out.push_back(g);
  return out;
}

Status GrantTable::revoke(const std::string& id) {
  std::shared_ptr<Grant> grant;
  {
    std::lock_guard lock(mu_);
    auto it = grants_.find(id);
    if (it == grants_.end()) return make_error(ErrorCode::NotFound, "no grant " + id);
    grant = std::move(it->second);
    grants_.erase(it);
  }
  retire(*grant);
  return {};
}

Result<std::shared_ptr<const Grant>> GrantTable::renew(const std::string& id, std::chrono::seconds ttl) {
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    return make_error(ErrorCode::InvalidArgument,
                      "ttlSeconds must be between 1 and 86400, got " + std::to_string(ttl.count()));
  }
  std::lock_guard lock(mu_);
  auto it = grants_.find(id);
  // An expired grant the timer has not dropped yet is gone all the same: its key must not come back.
  if (it == grants_.end() || it->second->expires_at() <= Clock::now())
    return make_error(ErrorCode::NotFound, "no grant " + id);
  it->second->expire_at(std::chrono::ceil<std::chrono::seconds>(Clock::now() + ttl));
  return std::shared_ptr<const Grant>(it->second);
}

std::size_t GrantTable::expire(Clock::time_point now) {
  std::vector<std::shared_ptr<Grant>> expired;
  {
    std::lock_guard lock(mu_);
    for (auto it = grants_.begin(); it != grants_.end();) {
      if (it->second->expires_at() <= now) {
        expired.push_back(std::move(it->second));
        it = grants_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& g : expired) retire(*g);
  return expired.size();
}

std::optional<GrantTable::Clock::time_point> GrantTable::next_expiry() const {
  std::lock_guard lock(mu_);
  std::optional<Clock::time_point> next;
  for (const auto& [_, g] : grants_) {
    if (!next || g->expires_at() < *next) next = g->expires_at();
  }
  return next;
}

void GrantTable::revoke_all() {
  std::map<std::string, std::shared_ptr<Grant>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(grants_);
  }
  for (auto& [_, g] : all) retire(*g);
}

}  // namespace conduit::agent
