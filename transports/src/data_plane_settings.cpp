#include "conduit/data_plane_settings.h"

#include <array>
#include <cctype>

#include "../verbs/device_choice.h"
#include "conduit/common/text.h"

namespace conduit {

namespace {

Error invalid(std::string message) { return make_error(ErrorCode::InvalidArgument, std::move(message)); }

// The whole of `text` (blanks around it aside) as a number in [min, max], stored in `out`.
template <typename T>
Status read_number(const std::string& text, T& out, long min, long max) {
  const auto value = parse_integer<long>(trim(text), min, max);
  if (!value) {
    return invalid("want an integer in " + std::to_string(min) + ".." + std::to_string(max) + ", got \"" +
                   text + "\"");
  }
  out = static_cast<T>(*value);
  return {};
}

// One ibverbs number: its member and range (the ranges VerbsOptions::validate() checks).
template <auto Member, long Min, long Max>
Status ib_number(DataPlaneSettings& s, const std::string& text) {
  return read_number(text, s.ibverbs.*Member, Min, Max);
}

const std::array<DataPlaneSetting, 14> kSettings{{
    {"progress", "MODE",
     "how an idle libfabric rail's progress thread waits: auto (fd where the provider has a wait fd, else "
     "backoff), fd, backoff, spin (a core per rail: a baseline for measurement)",
     "auto",
     [](DataPlaneSettings& s, const std::string& text) -> Status {
       const std::string_view v = trim(text);
       for (const ProgressMode m :
            {ProgressMode::Auto, ProgressMode::Fd, ProgressMode::Backoff, ProgressMode::Spin}) {
         if (v == to_string(m)) {
           s.progress = m;
           return {};
         }
       }
       return invalid("\"" + text + "\" is not one of auto, fd, backoff, spin");
     }},
    {"cuda-driver", "PATH",
     "the CUDA driver library to load, for a node whose loader does not find the machine's libcuda.so.1",
     "libcuda.so.1, wherever the loader finds it",
     [](DataPlaneSettings& s, const std::string& text) -> Status {
       if (text.empty()) return invalid("must not be empty");
       s.cuda_driver = text;
       return {};
     }},
    {"ib-devices", "LIST",
     "ibverbs: RDMA devices by name, one per rail in rail order, comma-separated (mlx5_0,mlx5_1)",
     "the devices nearest --ib-near",
     [](DataPlaneSettings& s, const std::string& text) -> Status {
       s.ibverbs.devices = split_list(text);
       return {};
     }},
    {"ib-near", "PLACE",
     "ibverbs: the memory the rails should sit next to: a GPU's PCI address (0000:1b:00.0) or numa:N",
     "anywhere",
     [](DataPlaneSettings& s, const std::string& text) -> Status {
       const std::string near(trim(text));
       if (auto place = verbs::parse_near(near); !place) return place.error();
       s.ibverbs.near = near;
       return {};
     }},
    {"ib-listen", "IP[:PORT]", "ibverbs: where the connection handshake listens (port 0: any)",
     "--bind-address, else the chosen RoCE GID's IPv4 address, else the first non-loopback interface",
     [](DataPlaneSettings& s, const std::string& text) -> Status {
       s.ibverbs.listen = std::string(trim(text));
       return {};
     }},
    {"ib-port", "N", "ibverbs: the device port (1..255)", "1", ib_number<&verbs::VerbsOptions::port, 1, 255>},
    {"ib-gid-index", "N", "ibverbs: the GID table index (-1: RoCE v2 with an IPv4-mapped address first)",
     "-1", ib_number<&verbs::VerbsOptions::gid_index, -1, 255>},
    {"ib-qps-per-peer", "N", "ibverbs: RC queue pairs to each peer on each rail (1..64)", "2",
     ib_number<&verbs::VerbsOptions::qps_per_peer, 1, 64>},
    {"ib-sq-depth", "N", "ibverbs: send queue depth of each queue pair (2..32768)", "128",
     ib_number<&verbs::VerbsOptions::sq_depth, 2, 32768>},
    {"ib-signal-every", "N", "ibverbs: ask for a completion on every Nth work request (1..32768)", "16",
     ib_number<&verbs::VerbsOptions::signal_every, 1, 32768>},
    {"ib-traffic-class", "N", "ibverbs, RoCE: the GRH traffic class, DSCP << 2 (0..255)", "0",
     ib_number<&verbs::VerbsOptions::traffic_class, 0, 255>},
    {"ib-sl", "N", "ibverbs, InfiniBand: the service level (0..15)", "0",
     ib_number<&verbs::VerbsOptions::service_level, 0, 15>},
    {"ib-timeout", "N", "ibverbs: local ACK timeout, 4.096 us * 2^N (1..31; 14: about 67 ms)", "14",
     ib_number<&verbs::VerbsOptions::ack_timeout, 1, 31>},
    {"ib-retry-count", "N", "ibverbs: transport retries before a work request fails (0..7)", "7",
     ib_number<&verbs::VerbsOptions::retry_count, 0, 7>},
}};

}  // namespace

TransportConfig DataPlaneSettings::applied_to(TransportConfig config) const {
  config.progress = progress;
  config.ibverbs = ibverbs;
  return config;
}

std::span<const DataPlaneSetting> data_plane_settings() { return kSettings; }

std::string environment_name(std::string_view setting) {
  std::string name = "CONDUIT_";
  for (const char c : setting) {
    name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

}  // namespace conduit
