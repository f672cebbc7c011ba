// Link parameters two RC queue pairs must agree on, as pure functions: the path MTU (the lower of both
// ports' active MTUs) and which GID a RoCE port should source its packets from.
//
// GID choice on RoCE: the GID table holds one entry per (IP address, RoCE version) of the port's netdev,
// plus link-local ones. RoCE v2 is routable UDP, RoCE v1 is a raw Ethernet frame confined to one L2
// domain, so the automatic choice is RoCE v2 with an IPv4-mapped address (::ffff:a.b.c.d, what data-centre
// RoCE fabrics route), then RoCE v2 with a global IPv6 address, then RoCE v2 link-local (fe80::), then
// anything else that is not empty. Ties go to the lowest index. InfiniBand uses index 0, the port GID.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"
#include "handshake.h"

namespace conduit::verbs {

// ibv_mtu codes: 1 = 256, 2 = 512, 3 = 1024, 4 = 2048, 5 = 4096. 0 for anything else.
std::uint32_t mtu_bytes(int code);
int mtu_code(std::uint32_t bytes);
// The path MTU two ports can both carry; InvalidArgument when a code is not 1..5.
Result<int> negotiate_mtu(int local_code, int peer_code);

enum class GidType : std::uint8_t { Unknown, IbRoceV1, RoceV2 };
std::string_view to_string(GidType type);

struct GidEntry {
  int index = 0;
  Gid gid{};
  GidType type = GidType::Unknown;
  std::string netdev;  // gid_attrs/ndevs/<index>; empty on InfiniBand
};

// "fe80:0000:0000:0000:0202:c9ff:fe00:0001" as sysfs writes it (eight groups of four hex digits).
Result<Gid> parse_gid(std::string_view text);
std::string format_gid(const Gid& gid);  // the same form
bool is_zero(const Gid& gid);
bool is_ipv4_mapped(const Gid& gid);  // ::ffff:a.b.c.d
bool is_link_local(const Gid& gid);   // fe80::/10
std::string ipv4_of(const Gid& gid);  // "a.b.c.d" for an IPv4-mapped GID, else ""

// The port's GID table from <sysfs_root>/class/infiniband/<device>/ports/<port>/{gids,gid_attrs/types,
// gid_attrs/ndevs}; empty (zero) entries are left out. Empty when the directory is absent.
std::vector<GidEntry> read_gid_table(const std::filesystem::path& sysfs_root, const std::string& device,
                                     int port);

struct GidChoice {
  GidEntry entry;
  std::string why;  // "GID 3: RoCE v2 ::ffff:10.0.0.5 (automatic)"
};

// `forced` >= 0 picks that index, which must hold a non-empty GID. NotFound when nothing usable exists.
Result<GidChoice> select_gid(std::span<const GidEntry> table, LinkLayer link_layer, int forced = -1);

}  // namespace conduit::verbs
