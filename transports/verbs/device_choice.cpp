#include "device_choice.h"

#include <algorithm>
#include <limits>

#include "conduit/common/text.h"

namespace conduit::verbs {

namespace {

// Device names for a message: "mlx5_0, mlx5_1", or "none".
std::string names_or_none(std::span<const std::string> names) {
  std::string out = join(names, ", ");
  return out.empty() ? "none" : out;
}

bool contains(std::span<const std::string> names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<std::string> repeat(const std::vector<std::string>& devices, int rails) {
  std::vector<std::string> out;
  for (int r = 0; r < rails; ++r) out.push_back(devices[static_cast<std::size_t>(r) % devices.size()]);
  return out;
}

}  // namespace

Result<MemoryPlace> parse_near(const std::string& near) {
  MemoryPlace place;
  if (near.empty()) return place;
  if (near.starts_with("numa:")) {
    const auto node =
        parse_integer<int>(std::string_view(near).substr(5), 0, std::numeric_limits<int>::max());
    if (!node) {
      return make_error(ErrorCode::InvalidArgument, "near \"" + near + "\": want numa:N with N >= 0");
    }
    place.numa_node = *node;
    return place;
  }
  if (near.find(':') == std::string::npos || near.find('.') == std::string::npos) {
    return make_error(ErrorCode::InvalidArgument,
                      "near \"" + near + "\": want a GPU's PCI address (0000:1b:00.0) or numa:N");
  }
  place.gpu_pci = near;
  return place;
}

Result<DeviceChoice> choose_devices(std::span<const std::string> present, const VerbsOptions& options,
                                    const Topology* topology, int rails) {
  if (rails < 1) return make_error(ErrorCode::InvalidArgument, "rails must be >= 1");
  if (present.empty())
    return make_error(ErrorCode::Unavailable, "no RDMA device (ibv_get_device_list found none)");

  if (!options.devices.empty()) {
    for (const auto& name : options.devices) {
      if (!contains(present, name)) {
        return make_error(
            ErrorCode::NotFound,
            "RDMA device " + name + " not found (RC-capable devices here: " + names_or_none(present) + ")");
      }
    }
    return DeviceChoice{repeat(options.devices, rails),
                        "devices asked for: " + names_or_none(options.devices)};
  }

  auto place = parse_near(options.near);
  if (!place) return place.error();
  if (topology != nullptr) {
    auto ranked = choose_nics(*topology, *place, NicChoiceOptions{"infiniband", /*best_class_only=*/false});
    if (ranked) {
      std::vector<std::string> usable;
      for (const auto& nic : ranked->nics) {
        if (contains(present, nic)) usable.push_back(nic);
      }
      if (!usable.empty()) {
        // Nearest first; with more rails than NICs of the nearest class the next-nearest join in.
        return DeviceChoice{repeat(usable, rails), ranked->why};
      }
    } else if (!options.near.empty()) {
      return make_error(ranked.error().code,
                        "choosing RDMA devices near " + options.near + ": " + ranked.error().message);
    }
  }
  if (!options.near.empty()) {
    return make_error(ErrorCode::NotFound, "the topology places none of the RDMA devices (" +
                                               names_or_none(present) + ") relative to " + options.near);
  }
  std::vector<std::string> sorted(present.begin(), present.end());
  std::sort(sorted.begin(), sorted.end());
  return DeviceChoice{repeat(sorted, rails), "devices in name order (topology unknown)"};
}

}  // namespace conduit::verbs
