// The initiating side of conduit-bench: one warm-up pass (connection set-up), then timed passes of the
// whole buffer, then a CRC32C comparison with the target so a fast but wrong run never reports a figure.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "conduit/common/size.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "cpu_time.h"
#include "options.h"

namespace conduit::bench {

namespace {

std::optional<nlohmann::json> get_json(httplib::Client& client, const std::string& path) {
  auto res = client.Get(path.c_str());
  if (!res || res->status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

int fail(const std::string& why) {
  std::cerr << "conduit-bench: " << why << "\n";
  return 1;
}

}  // namespace

int initiate(const Options& options, const std::string& target) {
  httplib::Client control("http://" + target);
  control.set_read_timeout(120, 0);
  auto key_json = get_json(control, "/key");
  if (!key_json) return fail("no key from target at " + target);
  auto key = RemoteKey::from_json(*key_json);
  if (!key) return fail(key.error().message);
  if (key->length < options.size) {
    return fail("target region holds " + std::to_string(key->length) + " bytes, --size asks for " +
                std::to_string(options.size));
  }

  TransportConfig config = options.data_plane.applied_to({});
  config.provider = options.provider;
  config.rails = options.rails;
  config.bind_address = options.bind;
  auto transport = open_transport(config);
  if (!transport) return fail(transport.error().message);
  auto region = MemoryRegion::allocate_host(options.size);
  if (!region) return fail(region.error().message);
  fill_pattern(region->bytes(), /*seed=*/1);
  const auto reg_start = std::chrono::steady_clock::now();
  auto local = (*transport)->register_memory(*region, Access::Local);
  const double reg_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - reg_start).count();
  if (!local) return fail(local.error().message);

  const Op op{options.op, &*local, 0, *key, 0, options.size};
  const BatchOptions batch{options.chunk, options.window};
  std::vector<double> gbps;
  std::optional<nlohmann::json> stats_before;
  double cpu_before = 0;
  double timed_seconds = 0;
  for (int i = 0; i <= options.iterations; ++i) {  // pass 0 is the warm-up
    if (i == 1) {  // CPU is counted over the timed passes only, as the bytes it is divided by are
      stats_before = get_json(control, "/stats");
      cpu_before = cpu_seconds();
    }
    const auto start = std::chrono::steady_clock::now();
    auto id = (*transport)->submit({&op, 1}, batch);
    if (!id) return fail(id.error().message);
    const BatchStatus s = wait(**transport, *id);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s.error) return fail(std::string(to_string(s.error->code)) + ": " + s.error->message);
    if (i > 0) {
      gbps.push_back(static_cast<double>(options.size) / secs / 1e9);
      timed_seconds += secs;
    }
  }
  const double cpu_initiator = cpu_seconds() - cpu_before;
  const auto stats_after = get_json(control, "/stats");
  double cpu_target = -1;
  if (stats_before && stats_after) {
    cpu_target = (*stats_after)["cpuSeconds"].get<double>() - (*stats_before)["cpuSeconds"].get<double>();
  }

  auto remote_crc = get_json(control, "/crc?offset=0&length=" + std::to_string(options.size));
  const std::uint32_t local_crc = crc32c(region->bytes());
  const bool verified = remote_crc && (*remote_crc)["crc32c"].get<std::uint32_t>() == local_crc;

  std::sort(gbps.begin(), gbps.end());
  const double gb_moved = static_cast<double>(options.size) * options.iterations / 1e9;
  nlohmann::json result{
      {"provider", (*transport)->capabilities().provider},
      {"op", options.op == OpKind::Write ? "write" : "read"},
      {"bytes", options.size},
      {"chunk", options.chunk},
      {"window", options.window},
      {"rails", options.rails},
      {"iterations", options.iterations},
      {"gbps_min", gbps.front()},
      {"gbps_median", gbps[gbps.size() / 2]},
      {"gbps_max", gbps.back()},
      {"verified", verified},
      {"seconds", timed_seconds},
      {"registration_ms", reg_ms},
      {"huge_pages", region->huge_pages()},
      {"mr_mode", (*transport)->capabilities().mr_mode_text},
      {"initiator_cpu_s_per_gb", cpu_initiator / gb_moved},
      {"target_cpu_s_per_gb",
       cpu_target < 0 ? nlohmann::json(nullptr) : nlohmann::json(cpu_target / gb_moved)},
  };
  if (options.data_plane.progress != ProgressMode::Auto)
    result["progress"] = to_string(options.data_plane.progress);
  if (options.json) {
    std::cout << result.dump() << std::endl;
  } else {
    std::cout << std::fixed << std::setprecision(2) << result["provider"].get<std::string>() << " "
              << result["op"].get<std::string>() << " " << format_size(options.size) << " in "
              << format_size(options.chunk) << " chunks, window " << options.window << ", rails "
              << options.rails << ": " << gbps.front() << " / " << gbps[gbps.size() / 2] << " / "
              << gbps.back() << " GB/s (min/median/max of " << options.iterations << "), "
              << (verified ? "CRC32C verified" : "CRC32C MISMATCH") << "\n";
  }
  return verified ? 0 : 3;
}

int memcpy_baseline(const Options& options) {
  auto src = MemoryRegion::allocate_host(options.size);
  auto dst = MemoryRegion::allocate_host(options.size);
  if (!src || !dst) return fail("cannot allocate two buffers of " + format_size(options.size));
  fill_pattern(src->bytes(), 1);
  std::memset(dst->data(), 0, options.size);  // fault the pages in before timing
  std::vector<double> gbps;
  for (int i = 0; i <= options.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst->data(), src->data(), options.size);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) gbps.push_back(static_cast<double>(options.size) / secs / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  const bool same = std::memcmp(src->data(), dst->data(), options.size) == 0;
  nlohmann::json result{{"op", "memcpy"},           {"bytes", options.size},
                        {"gbps_min", gbps.front()}, {"gbps_median", gbps[gbps.size() / 2]},
                        {"gbps_max", gbps.back()},  {"verified", same}};
  if (options.json) {
    std::cout << result.dump() << std::endl;
  } else {
    std::cout << std::fixed << std::setprecision(2) << "memcpy " << format_size(options.size) << ": "
              << gbps[gbps.size() / 2] << " GB/s median\n";
  }
  return same ? 0 : 3;
}

}  // namespace conduit::bench
