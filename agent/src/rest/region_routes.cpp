// Named regions: list, make (allocate or load a file), look at, delete, save to a file, the named tensors
// they hold (their manifest), wait for a new version, checksum a range, and copy a staged CUDA region's range
// between its staging buffer and the device.
#include <algorithm>
#include <string>
#include <variant>

#include "conduit/api/errors.h"
#include "conduit/api/wire.h"
#include "rest/access.h"
#include "rest/long_poll.h"
#include "rest/peer_access.h"
#include "rest/reply.h"
#include "rest/requests.h"
#include "rest/routes.h"

namespace conduit::agent::rest {
namespace {

using json = nlohmann::json;

// Path templates as agent/openapi.yaml writes them; each {placeholder} is one path segment.
constexpr const char* kRegion = "/v1/regions/{name}";
constexpr const char* kRegionSave = "/v1/regions/{name}/save";
constexpr const char* kRegionManifest = "/v1/regions/{name}/manifest";
constexpr const char* kRegionChecksum = "/v1/regions/{name}/checksum";
constexpr const char* kRegionVersion = "/v1/regions/{name}/version";
constexpr const char* kRegionStaging = "/v1/regions/{name}/staging";
// A checksum answer is a JSON array of one number per slice; this bounds it to ~10 MiB of text.
constexpr std::uint64_t kMaxChecksumSlices = 1u << 20;

// A region as GET shows it, with the rails (and their NICs) each transport registers it on: the ones
// nearest its memory (conduit/rail_choice.h), decided again at each registration from the same inputs.
json region_json(const AgentState& state, const Region& region) {
  json out = region.to_json();
  out["rails"] = state.transports.rails_json(region.memory());
  return out;
}

// 403 and true when the caller, an agent, may not `reach` that range of region {name}: no live grant made
// for it allows it (rest/peer_access.h).
bool out_of_reach(const Call& c, Reach reach, std::uint64_t offset, std::uint64_t length) {
  return c.denied(peer_refusal(c.state.grants.list(), c.caller, c.name, reach, offset, length,
                               std::chrono::system_clock::now()));
}

// 400 and true when [offset, +length) does not lie within the region's `size` bytes.
bool outside(const Call& c, std::uint64_t offset, std::uint64_t length, std::uint64_t size) {
  if (offset <= size && length <= size - offset) return false;
  send_error(c.res, 400, api::wire_code(ErrorCode::InvalidArgument),
             "range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside region " +
                 c.name + " (" + std::to_string(size) + " bytes)");
  return true;
}

void list_regions(Call& c) {
  json list = json::array();
  for (const auto& region : c.state.regions.list()) {
    if (may_read_region(c.caller, *region)) list.push_back(region_json(c.state, *region));
  }
  c.reply(200, items(std::move(list)));
}

// Region {name} made (allocated or loaded), or why not.
void made(Call& c, const std::string& name, const Result<RegionPtr>& region) {
  if (!region) return c.fail_file(region.error());
  c.res.set_header("Location", "/v1/regions/" + name);
  c.reply(201, region_json(c.state, **region));
}

void allocate_region(Call& c, const api::CreateRegion& request) {
  if (c.out_of_scope(request.ns)) return;
  Tenancy tenancy{request.ns, request.shared_with};
  auto region = request.shareable
                    ? c.state.regions.create_shareable(request.name, request.bytes, std::move(tenancy))
                    : c.state.regions.create(request.name, request.bytes, request.memory, std::move(tenancy));
  // Checked against bytes as the body was read, so it cannot be refused now.
  if (region && request.manifest) (void)(*region)->set_manifest(*request.manifest);
  made(c, request.name, region);
}

void load_region(Call& c, const api::LoadRegion& request) {
  const std::string& ns = request.ns;
  if (c.out_of_scope(ns) || c.file_out_of_reach(request.file, ns)) return;
  if (auto path = DataDir::normal(request.file); !path) return c.fail(path.error());
  made(c, request.name,
       c.state.regions.load(request.name, request.file, Tenancy{ns, request.shared_with}, c.files_of(ns)));
}

void create_region(Call& c) {
  const auto request = c.body(api::region_request_from_json);
  if (!request) return;
  if (const auto* load = std::get_if<api::LoadRegion>(&*request)) return load_region(c, *load);
  allocate_region(c, std::get<api::CreateRegion>(*request));
}

// At once as it is; with timeoutSeconds, a region not made yet is waited for (a long-poll): 200 as soon as it
// is made, loaded or imported, 404 when the time is up.
void get_region(Call& c) {
  const auto wait = parse_seconds_query(c.req.params, "timeoutSeconds");
  if (!wait) return c.fail(wait.error());
  if (wait->count() > 0 && !c.state.regions.get(c.name)) {
    auto made = long_poll(c.state, *wait, [&](std::chrono::seconds limit) {
      return c.state.regions.wait_for(c.name, limit, [&state = c.state] { return !state.ready.load(); });
    });
    if (!made) return busy(c.res);
    if (!*made) {
      return c.fail(make_error(ErrorCode::NotFound,
                               made->error().message + " (waited " +
                                   std::to_string(std::min(*wait, c.state.config.long_poll_max).count()) +
                                   " s for it)"));
    }
  }
  if (const auto region = c.region()) c.reply(200, region_json(c.state, **region));
}

// A request held to a namespace (Call::ns) deletes only that namespace's region.
void delete_region(Call& c) {
  if (!c.ns.empty()) {
    const auto region = c.region(/*changes=*/true);
    if (!region) return;
    if ((*region)->tenancy().ns != c.ns) return c.forbid("region " + c.name + " is not of namespace " + c.ns);
  }
  if (auto removed = c.state.regions.remove(c.name); !removed) return c.fail(removed.error());
  c.res.status = 204;
}

void save_region(Call& c) {
  const auto save = c.body(api::SaveRegion::from_json);
  if (!save) return;
  if (c.out_of_scope(save->ns) || c.file_out_of_reach(save->file, save->ns)) return;
  if (auto path = DataDir::normal(save->file); !path) return c.fail(path.error());
  const auto region = c.region();
  if (!region) return;
  auto saved = c.state.regions.save(c.name, save->file, c.files_of(save->ns));
  if (!saved) return c.fail_file(saved.error());
  count_written(c.state.metrics, *saved);
  // What is in the file now: the region's bytes, or a .safetensors header and the tensors.
  c.reply(200, api::SaveResult{c.name, save->file, saved->direct + saved->cached}.to_json());
}

// The named tensors the region holds; 404 when it names none.
void get_manifest(Call& c) {
  const auto region = c.region();
  if (!region) return;
  const auto manifest = (*region)->manifest();
  if (!manifest) {
    return send_error(
        c.res, 404, api::wire_code(ErrorCode::NotFound),
        "region " + c.name + " has no manifest (PUT /v1/regions/" + c.name + "/manifest sets one)");
  }
  c.reply(200, manifest->to_json());
}

// Sets (or replaces) the region's manifest, checked against its bytes: a 400 naming the tensor changes
// nothing.
void put_manifest(Call& c) {
  const auto region = c.region(/*changes=*/true);
  if (!region) return;
  const std::uint64_t bytes = (*region)->bytes();
  const auto body = read_json_body(c.state.config.max_body_bytes, c.req, c.res);
  if (!body) return;
  const auto manifest = api::Manifest::from_json(*body, bytes);
  if (!manifest) return c.fail(manifest.error());
  if (auto set = (*region)->set_manifest(*manifest); !set) return c.fail(set.error());
  c.reply(200, manifest->to_json());
}

// Answers at once with a version past `after`, else waits for one (a long-poll) up to timeoutSeconds.
void region_version(Call& c) {
  const auto query = parse_version_query(c.req.params);
  if (!query) return c.fail(query.error());
  const auto region = c.region();
  if (!region) return;
  Region::Update update = (*region)->update();
  if (update.version <= query->after && query->timeout.count() > 0) {
    auto newer = long_poll(c.state, query->timeout, [&](std::chrono::seconds limit) {
      return (*region)->wait_newer(query->after, limit, [&state = c.state] { return !state.ready.load(); });
    });
    if (!newer) return busy(c.res);
    update = *newer;
  }
  c.reply(200, update.to_json(c.name));
}

void region_checksum(Call& c) {
  if (!may_touch_region(c.caller, c.state.grants, c.name))
    return c.forbid("no grant on the region is made for it");
  const auto query = parse_checksum_query(c.req.params);
  if (!query) return c.fail(query.error());
  const auto region = c.region();
  if (!region) return;
  const std::uint64_t size = (*region)->bytes();
  if (query->offset > size) {
    return send_error(c.res, 400, api::wire_code(ErrorCode::InvalidArgument),
                      "offset " + std::to_string(query->offset) + " is past the end of the region (" +
                          std::to_string(size) + " bytes)");
  }
  const std::uint64_t length = query->length == 0 ? size - query->offset : query->length;
  if (out_of_reach(c, Reach::Read, query->offset, length)) return;
  if (length / query->slice >= kMaxChecksumSlices) {
    return send_error(c.res, 400, api::wire_code(ErrorCode::InvalidArgument),
                      "too many slices: use a larger slice or a shorter length");
  }
  auto crcs = region_checksum(**region, query->offset, length, query->slice);
  if (!crcs) return c.fail(crcs.error());
  c.reply(200, {{"region", c.name},
                {"offset", query->offset},
                {"length", length},
                {"slice", query->slice},
                {"crc32c", *crcs}});
}

// A peer that wrote into (or is about to read from) a staged CUDA region's host staging buffer has this
// agent copy the range between buffer and device (docs/gpu.md).
void region_staging(Call& c) {
  if (!may_touch_region(c.caller, c.state.grants, c.name))
    return c.forbid("no grant on the region is made for it");
  const auto request = c.body(api::StagingRequest::from_json);
  if (!request) return;
  const auto region = c.region();
  if (!region) return;
  if (outside(c, request->offset, request->length, (*region)->bytes())) return;
  if (out_of_reach(c, request->to_device ? Reach::Write : Reach::Read, request->offset, request->length))
    return;
  // Without a staged grant the region is reached directly (host memory, or device memory the NIC
  // registered): the bytes are where they belong already, and the answer says nothing was copied.
  const auto buffer = c.state.grants.staging().find(c.name);
  if (buffer) {
    auto copied = request->to_device ? buffer->to_device(request->offset, request->length)
                                     : buffer->to_host(request->offset, request->length);
    if (!copied) return c.fail(copied.error());
  }
  c.reply(200, {{"region", c.name},
                {"offset", request->offset},
                {"length", request->length},
                {"direction", request->to_device ? "toDevice" : "toHost"},
                {"copied", buffer != nullptr}});
}

}  // namespace

void install_region_routes(Router& r) {
  r.get("/v1/regions", list_regions);
  r.post("/v1/regions", create_region);
  r.get(kRegion, get_region, RouteAccess::Control, {"timeoutSeconds"});
  r.del(kRegion, delete_region, RouteAccess::Control, {"namespace"});
  r.post(kRegionSave, save_region);
  r.get(kRegionManifest, get_manifest);
  r.put(kRegionManifest, put_manifest);
  r.get(kRegionVersion, region_version, RouteAccess::Control, {"after", "timeoutSeconds"});
  r.get(kRegionChecksum, region_checksum, RouteAccess::Peer, {"offset", "length", "slice"});
  r.post(kRegionStaging, region_staging, RouteAccess::Peer);
}

}  // namespace conduit::agent::rest
