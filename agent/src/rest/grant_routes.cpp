// Grants, the only way a region becomes remotely reachable (grants.h): made on a region or as a ring in
// front of a file, renewed, looked at and revoked; what a writer tells the grant it writes through: which
// bytes landed, and that all of them did (the commit); and what ranges of it sum to (a verified scatter
// batch's check).
#include <algorithm>
#include <string>

#include "conduit/api/errors.h"
#include "conduit/api/grant.h"
#include "conduit/cuda_staging.h"
#include "rest/access.h"
#include "rest/reply.h"
#include "rest/routes.h"
#include "tenancy.h"

namespace conduit::agent::rest {
namespace {

using json = nlohmann::json;

constexpr const char* kRegionGrants = "/v1/regions/{name}/grants";
constexpr const char* kGrant = "/v1/grants/{id}";
constexpr const char* kGrantLanded = "/v1/grants/{id}/landed";
constexpr const char* kGrantCommit = "/v1/grants/{id}/commit";
constexpr const char* kGrantChecksum = "/v1/grants/{id}/checksum";
constexpr const char* kGrantRenew = "/v1/grants/{id}/renew";
// A ring grant's ring is a multiple of this, so a writer can cut it into equal segments.
constexpr std::uint64_t kRingUnit = 64u << 10;

// The file a grant saves into as bytes land, opened beneath the job's namespace's directory where files are
// namespaced; nullopt after answering, 403 for a file out of the job's reach.
std::optional<SaveFile> open_save(const Call& c, const std::string& file, const std::string& job_ns) {
  if (c.file_out_of_reach(file, job_ns)) return std::nullopt;
  auto save = c.state.regions.open_save(file, c.files_of(job_ns));
  if (!save) {
    c.fail_file(save.error());
    return std::nullopt;
  }
  return std::move(*save);
}

// Grant {id} and the landing its writer reports to, or nullopt after answering: 404, or 409 for a grant that
// takes no reports.
struct Landed {
  std::shared_ptr<const Grant> grant;
  std::shared_ptr<Landing> landing;
};
std::optional<Landed> path_landing(const Call& c) {
  auto grant = c.state.grants.get(c.id);
  if (!grant) {
    c.fail(grant.error());
    return std::nullopt;
  }
  if (!(*grant)->landing) {
    c.fail(make_error(ErrorCode::Conflict, "grant " + c.id +
                                               " takes no landing reports: it is a read grant or one of CUDA "
                                               "memory"));
    return std::nullopt;
  }
  return Landed{*grant, (*grant)->landing};
}

void answer_made(Call& c, const Grant& grant) {
  c.res.set_header("Location", "/v1/grants/" + grant.id);
  c.reply(201, grant.to_json());
}

void create_grant(Call& c) {
  const auto request = c.body(api::GrantRequest::from_json);
  if (!request) return;
  if (c.out_of_scope(request->ns)) return;
  auto region = c.state.regions.get(c.name);
  if (!region) return c.fail(region.error());
  // The agent checks again what the controller checked: a job reaches only its namespace's regions.
  if (c.denied(refusal(**region, request->ns, request->pod))) return;
  const std::uint64_t size = (*region)->bytes();
  const std::uint64_t length = request->length.value_or(size - std::min(request->offset, size));
  if (request->offset > size || length > size - request->offset || length == 0) {
    return send_error(c.res, 400, api::wire_code(ErrorCode::InvalidArgument),
                      "range [" + std::to_string(request->offset) + ", +" + std::to_string(length) +
                          ") is outside region " + c.name + " (" + std::to_string(size) + " bytes)");
  }
  std::optional<LandingSpec> landing;
  if (!request->save.empty()) {
    auto save = open_save(c, request->save, request->ns);
    if (!save) return;
    landing = LandingSpec{.save = std::move(*save), .writer = request->writer};
  }
  // from_json lets only "write" and "read" through.
  const Access access = request->access == "read" ? Access::RemoteRead : Access::RemoteWrite;
  auto grant = c.state.grants.create(*region, request->offset, length, access,
                                     std::chrono::seconds(request->ttl_seconds), request->provider,
                                     std::move(landing), request->writer, request->peer, request->ns);
  if (!grant) return c.fail(grant.error());
  if ((*grant)->staging) c.state.metrics.staged_fallback();  // the target end of a staged GPU transfer
  c.state.metrics.observe_registration((*grant)->registration_seconds);
  answer_made(c, **grant);
}

// A file target with no region: the writer's bytes pass through a ring of --pipeline-bytes at most.
void create_ring_grant(Call& c) {
  const auto request = c.body(api::RingGrantRequest::from_json);
  if (!request) return;
  if (c.out_of_scope(request->ns)) return;
  auto save = open_save(c, request->save, request->ns);
  if (!save) return;
  const std::uint64_t wanted = std::min(c.state.config.pipeline_bytes, request->bytes);
  const std::uint64_t ring = (wanted + kRingUnit - 1) / kRingUnit * kRingUnit;
  auto memory = c.state.regions.scratch(ring, "the landing ring of a grant saving \"" + request->save + "\"");
  if (!memory) return c.fail(memory.error());
  auto grant = c.state.grants.create(
      *memory, 0, ring, Access::RemoteWrite, std::chrono::seconds(request->ttl_seconds), request->provider,
      LandingSpec{.ring = true, .stream_bytes = request->bytes, .save = std::move(*save), .writer = ""}, "",
      request->peer, request->ns);
  if (!grant) return c.fail(grant.error());
  answer_made(c, **grant);
}

void grant_landed(Call& c) {
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  const auto request = c.body(api::LandedReport::from_json);
  if (!request) return;
  const auto landed = path_landing(c);
  if (!landed) return;
  const auto& landing = landed->landing;
  // A report names a range of the grant's stream; an agent's that leaves it asks for what no grant made for
  // it allows (an operator's is a bad request, answered by the landing itself).
  const std::uint64_t stream = landing->stream_bytes();
  if (c.caller.role == Role::Agent &&
      (request->offset > stream || request->length > stream - request->offset)) {
    return c.forbid("the report's range is outside the grant's " + std::to_string(stream) + " bytes");
  }
  auto report = landing->landed(request->offset, request->length, request->slice, request->crc32c,
                                request->wait_for_previous);
  if (!report) return c.fail(report.error());
  count_written(c.state.metrics, report->written);
  c.reply(200, {{"offset", request->offset},
                {"length", request->length},
                {"mismatched", report->mismatched},
                {"saved", report->saved}});
}

// The writer says every byte it wrote has landed: the grant's region gets a new version (waiters wake), with
// the manifest the write carried (checked against the region first: a 400 naming the tensor changes
// nothing) and, given `version`, only where that is the version it reaches (409 naming the version the
// region is at, nothing changed). Two kinds of write grant commit:
//   one that took landing reports commits what they reported, once (Landing::commit): a save goes in place,
//   a region's write only once clean reports reached `bytes`; the same commit again changes nothing;
//   a plain write grant, never reported to (a scatter batch's, a CUDA region's), commits on its holder's
//   word, each time it is asked: `bytes` within the grant. A retried commit is one more version: give
//   `version` and the retry is refused instead.
void grant_commit(Call& c) {
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  const auto request = c.body(api::CommitRequest::from_json);
  if (!request) return;
  auto found = c.state.grants.get(c.id);
  if (!found) return c.fail(found.error());
  const Grant& grant = **found;
  if (grant.access != Access::RemoteWrite) {
    return c.fail(
        make_error(ErrorCode::Conflict,
                   "grant " + c.id + " is a read grant: only what is written through a write grant commits"));
  }
  const std::shared_ptr<Landing>& landing = grant.landing;
  const RegionPtr& region = grant.region.get();
  const bool ring = landing && landing->ring();
  if (ring && request->version) {
    return c.fail(
        make_error(ErrorCode::InvalidArgument,
                   "version: grant " + c.id + " is a ring in front of a file, which has no version"));
  }
  // The manifest the write carries must fit the region before anything commits: a 400 naming the tensor
  // leaves the write uncommitted and the region's version and manifest as they were.
  std::shared_ptr<const api::Manifest> manifest;
  if (request->manifest && region && !ring) {
    if (auto fits = request->manifest->check(region->bytes()); !fits)
      return c.fail(make_error(ErrorCode::InvalidArgument, "manifest: " + fits.error().message));
    manifest = std::make_shared<const api::Manifest>(std::move(*request->manifest));
  }
  const auto bump = [&]() -> Result<Region::Update> {
    if (request->version) return region->bump_to(*request->version, grant.writer, std::move(manifest));
    return region->bump(grant.writer, std::move(manifest));
  };

  if (!landing || (!landing->saves() && !ring && !landing->reported())) {
    if (request->bytes > grant.length) {
      return c.fail(make_error(ErrorCode::InvalidArgument, "bytes " + std::to_string(request->bytes) +
                                                               " is past the grant's " +
                                                               std::to_string(grant.length) + " bytes"));
    }
    auto update = bump();
    if (!update) return c.fail(update.error());
    json answer{{"id", c.id}, {"region", update->to_json(region->name())}};
    if (landing) answer["landing"] = landing->to_json();
    return c.reply(200, answer);
  }

  // Refused before the landing commits: a refused version leaves the write uncommitted, to commit again.
  if (request->version && region) {
    const std::uint64_t now = region->update().version;
    if (now + 1 != *request->version) {
      return c.fail(make_error(ErrorCode::Conflict,
                               "region \"" + region->name() + "\" is at version " + std::to_string(now) +
                                   ": a commit to version " + std::to_string(*request->version) +
                                   " needs it at version " + std::to_string(*request->version - 1)));
    }
  }
  auto committed = landing->commit(request->bytes);
  if (!committed) return c.fail(committed.error());
  json answer{{"id", c.id}, {"landing", landing->to_json()}};
  // Every byte of a write into a region landed: the region has a new version (waiters wake), with the
  // manifest the write carried.
  if (region && !ring) {
    Result<Region::Update> update = region->update();
    if (*committed) update = bump();
    if (!update) return c.fail(update.error());  // another commit moved the region meanwhile
    answer["region"] = update->to_json(region->name());
  }
  c.reply(200, answer);
}

// The agent that sent a verified scatter-gather batch through the grant asks for one CRC32C over the ops'
// ranges of the grant, in op order (api::GrantChecksumRequest), to compare with the sum of its own ranges
// (transfer/scatter_verify.h). Only the grant's peer may ask (and the controller and operators), only of
// ranges inside the grant, at most kMaxScatterOps of them, kMaxScatterRuns runs and kMaxScatterBytes in all:
// bounded work. A CUDA
// region is read through a pinned host buffer.
void grant_checksum(Call& c) {
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  const auto request = c.body(api::GrantChecksumRequest::from_json);
  if (!request) return;
  auto found = c.state.grants.get(c.id);
  if (!found) return c.fail(found.error());
  const Grant& grant = **found;
  if (grant.expires_at() <= std::chrono::system_clock::now())
    return c.fail(make_error(ErrorCode::NotFound, "grant " + c.id + " has expired"));
  if (grant.landing && grant.landing->ring()) {
    return c.fail(make_error(ErrorCode::Conflict, "grant " + c.id +
                                                      " is a ring in front of a file: what passes through it "
                                                      "is not kept to be summed"));
  }
  std::vector<cuda::CrcRange> ranges;
  ranges.reserve(request->ranges.size());
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < request->ranges.size(); ++i) {
    const auto& r = request->ranges[i];
    // The last run's end in 128 bits: offset, count and stride are the caller's.
    const unsigned __int128 end = static_cast<unsigned __int128>(r.offset) +
                                  static_cast<unsigned __int128>(r.count - 1) * r.stride + r.length;
    if (end > grant.length) {
      const std::string runs =
          r.count == 1 ? ""
                       : " (" + std::to_string(r.count) + " runs " + std::to_string(r.stride) + " apart)";
      return c.fail(make_error(ErrorCode::InvalidArgument,
                               "rangesPacked: range " + std::to_string(i) + " [" + std::to_string(r.offset) +
                                   ", +" + std::to_string(r.length) + ")" + runs +
                                   " is outside the grant's " + std::to_string(grant.length) + " bytes"));
    }
    for (std::uint64_t k = 0, at = grant.offset + r.offset; k < r.count; ++k, at += r.stride)
      ranges.push_back({at, r.length});
    bytes += r.length * r.count;
  }
  auto crc = cuda::region_crc32c_ranges(grant.region->memory(), ranges);
  if (!crc) return c.fail(crc.error());
  c.reply(
      200,
      api::GrantChecksum{.grant = c.id, .ranges = ranges.size(), .bytes = bytes, .crc32c = *crc}.to_json());
}

void renew_grant(Call& c) {
  const auto request = c.body(api::RenewGrant::from_json);
  if (!request) return;
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  auto grant = c.state.grants.renew(c.id, std::chrono::seconds(request->ttl_seconds));
  if (!grant) return c.fail(grant.error());
  c.reply(200, (*grant)->to_json());
}

// A Control route: the caller is the controller or an operator, so only a tenant's is refused any.
void list_grants(Call& c) {
  json list = json::array();
  for (const auto& grant : c.state.grants.list()) {
    if (!grant_refusal(c.caller, *grant)) list.push_back(grant->to_json());
  }
  c.reply(200, items(std::move(list)));
}

void get_grant(Call& c) {
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  auto grant = c.state.grants.get(c.id);
  if (!grant) return c.fail(grant.error());
  c.reply(200, (*grant)->to_json());
}

// A request held to a namespace (Call::ns) revokes only that namespace's grant.
void revoke_grant(Call& c) {
  if (c.denied(grant_refusal(c.caller, c.state.grants, c.id))) return;
  if (auto grant = c.state.grants.get(c.id); grant && !c.ns.empty() && (*grant)->job_namespace != c.ns) {
    return c.forbid("the grant is not made for namespace " + c.ns);
  }
  if (auto revoked = c.state.grants.revoke(c.id); !revoked) return c.fail(revoked.error());
  c.res.status = 204;
}

}  // namespace

void install_grant_routes(Router& r) {
  r.post(kRegionGrants, create_grant);
  r.post("/v1/grants", create_ring_grant);
  r.post(kGrantLanded, grant_landed, RouteAccess::Peer);
  r.post(kGrantCommit, grant_commit, RouteAccess::Peer);
  r.post(kGrantChecksum, grant_checksum, RouteAccess::Peer);
  r.post(kGrantRenew, renew_grant);
  r.get("/v1/grants", list_grants);
  r.get(kGrant, get_grant);
  r.del(kGrant, revoke_grant, RouteAccess::Peer, {"namespace"});
}

}  // namespace conduit::agent::rest
