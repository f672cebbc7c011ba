#include "link.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <system_error>

namespace conduit::verbs {

namespace fs = std::filesystem;

std::uint32_t mtu_bytes(int code) { return code >= 1 && code <= 5 ? 128u << code : 0; }

int mtu_code(std::uint32_t bytes) {
  for (int code = 1; code <= 5; ++code) {
    if (mtu_bytes(code) == bytes) return code;
  }
  return 0;
}

Result<int> negotiate_mtu(int local_code, int peer_code) {
  if (mtu_bytes(local_code) == 0) {
    return make_error(ErrorCode::InvalidArgument,
                      "local MTU code " + std::to_string(local_code) + " is not 1..5");
  }
  if (mtu_bytes(peer_code) == 0) {
    return make_error(ErrorCode::InvalidArgument,
                      "peer MTU code " + std::to_string(peer_code) + " is not 1..5");
  }
  return std::min(local_code, peer_code);
}

std::string_view to_string(GidType type) {
  switch (type) {
    case GidType::IbRoceV1:
      return "IB/RoCE v1";
    case GidType::RoceV2:
      return "RoCE v2";
    case GidType::Unknown:
      break;
  }
  return "unknown";
}

Result<Gid> parse_gid(std::string_view text) {
  auto bad = [&] {
    return make_error(ErrorCode::InvalidArgument,
                      "GID \"" + std::string(text) + "\" is not 8 groups of 4 hex digits");
  };
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() != 39) return bad();
  Gid gid{};
  for (int group = 0; group < 8; ++group) {
    const std::size_t at = static_cast<std::size_t>(group) * 5;
    if (group < 7 && text[at + 4] != ':') return bad();
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + at + 4, value, 16);
    if (ec != std::errc{} || ptr != text.data() + at + 4) return bad();
    gid[group * 2] = static_cast<std::uint8_t>(value >> 8);
    gid[group * 2 + 1] = static_cast<std::uint8_t>(value);
  }
  return gid;
}

std::string format_gid(const Gid& gid) {
  std::string out;
  char buf[8];
  for (int group = 0; group < 8; ++group) {
    std::snprintf(buf, sizeof(buf), "%02x%02x", gid[group * 2], gid[group * 2 + 1]);
    if (group > 0) out += ':';
    out += buf;
  }
  return out;
}

bool is_zero(const Gid& gid) { return gid == Gid{}; }

bool is_ipv4_mapped(const Gid& gid) {
  return std::all_of(gid.begin(), gid.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
         gid[10] == 0xff && gid[11] == 0xff;
}

bool is_link_local(const Gid& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

std::string ipv4_of(const Gid& gid) {
  if (!is_ipv4_mapped(gid)) return "";
  return std::to_string(gid[12]) + "." + std::to_string(gid[13]) + "." + std::to_string(gid[14]) + "." +
         std::to_string(gid[15]);
}

namespace {

std::string read_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// 0: the best kind of GID for RoCE; larger is worse.
int roce_rank(const GidEntry& e) {
  if (e.type == GidType::RoceV2) {
    if (is_ipv4_mapped(e.gid)) return 0;
    if (!is_link_local(e.gid)) return 1;
    return 2;
  }
  return 3;
}

std::string describe(const GidEntry& e) {
  const std::string ip = ipv4_of(e.gid);
  return "GID " + std::to_string(e.index) + ": " + std::string(to_string(e.type)) + " " +
         (ip.empty() ? format_gid(e.gid) : "::ffff:" + ip) + (e.netdev.empty() ? "" : " on " + e.netdev);
}

}  // namespace

std::vector<GidEntry> read_gid_table(const fs::path& sysfs_root, const std::string& device, int port) {
  const fs::path dir = sysfs_root / "class" / "infiniband" / device / "ports" / std::to_string(port);
  std::vector<GidEntry> table;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "gids", ec)) {
    const std::string name = entry.path().filename().string();
    int index = 0;
    const auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), index);
    if (perr != std::errc{} || ptr != name.data() + name.size()) continue;
    auto gid = parse_gid(read_line(entry.path()));
    if (!gid || is_zero(*gid)) continue;
    GidEntry e;
    e.index = index;
    e.gid = *gid;
    // The kernel answers EINVAL for the type of an unused entry, so an unreadable type is "unknown".
    const std::string type = read_line(dir / "gid_attrs" / "types" / name);
    if (type == "RoCE v2") {
      e.type = GidType::RoceV2;
    } else if (type == "IB/RoCE v1") {
      e.type = GidType::IbRoceV1;
    }
    e.netdev = read_line(dir / "gid_attrs" / "ndevs" / name);
    table.push_back(std::move(e));
  }
  std::sort(table.begin(), table.end(),
            [](const GidEntry& a, const GidEntry& b) { return a.index < b.index; });
  return table;
}

Result<GidChoice> select_gid(std::span<const GidEntry> table, LinkLayer link_layer, int forced) {
  if (forced >= 0) {
    for (const GidEntry& e : table) {
      if (e.index == forced && !is_zero(e.gid)) return GidChoice{e, describe(e) + " (asked for)"};
    }
    std::string valid;
    for (const GidEntry& e : table) {
      if (!is_zero(e.gid)) valid += (valid.empty() ? "" : ", ") + std::to_string(e.index);
    }
    return make_error(ErrorCode::NotFound,
                      "GID index " + std::to_string(forced) +
                          " is empty or absent (valid: " + (valid.empty() ? "none" : valid) + ")");
  }
  const GidEntry* best = nullptr;
  for (const GidEntry& e : table) {
    if (is_zero(e.gid)) continue;
    if (link_layer == LinkLayer::InfiniBand) {
      if (best == nullptr || e.index < best->index) best = &e;
      continue;
    }
    if (best == nullptr || roce_rank(e) < roce_rank(*best) ||
        (roce_rank(e) == roce_rank(*best) && e.index < best->index)) {
      best = &e;
    }
  }
  if (best == nullptr) return make_error(ErrorCode::NotFound, "the port's GID table has no usable entry");
  std::string why = describe(*best) + " (automatic";
  if (link_layer == LinkLayer::Ethernet && roce_rank(*best) > 0) {
    why += best->type == GidType::RoceV2 ? ": no RoCE v2 GID with an IPv4 address"
                                         : ": no RoCE v2 GID, so traffic stays in one L2 domain";
  }
  return GidChoice{*best, why + ")"};
}

}  // namespace conduit::verbs
