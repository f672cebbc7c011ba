// The ibverbs address blob and connection handshake, one binary format for three messages:
//   Address  what Transport::address() returns and RemoteKey rails carry: who we are (a random instance id),
//            where our handshake listener is, and per rail (device) how to reach it: port, link layer, LID,
//            GID and GID index, active MTU, RDMA READ depth. No queue pairs: RC QPs are per peer.
//   Request  sent by an initiator to the target's listener: its own rails plus the QPs it created for this
//            peer (QPN, PSN, which of its rails, which of the target's rails).
//   Reply    the target's answer: its rails and one QP of its own for each requested QP, in the same order.
// Both sides then move their QPs to RTR/RTS with the other's QPN/PSN, the lower of the two MTUs, and the
// GID/LID of the other's rail.
//
// Layout (little endian), version 1:
//   header  "CDVB" u8 version u8 kind u16 reserved u64 instance
//           u8 family (4|6) u8 reserved u16 port u8[16] ip (IPv4 in the first 4 bytes)
//           u8 rail count
//   rail    u8 port u8 link layer (1 IB, 2 Ethernet) u16 lid u8 gid index u8 mtu (ibv_mtu 1..5)
//           u8 max_rd_atomic u8 name length, u8[16] gid, name bytes (<= 64)
//   u16 qp count
//   qp      u8 rail u8 peer rail u16 reserved u32 qpn u32 psn (both 24-bit)
// Decoding is strict: unknown magic, version or kind, out-of-range fields, truncation and trailing bytes
// are each rejected with a message naming what is wrong.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::verbs {

inline constexpr std::uint8_t kHandshakeVersion = 1;
inline constexpr std::size_t kMaxRails = 64;
inline constexpr std::size_t kMaxQps = 4096;
inline constexpr std::size_t kMaxDeviceName = 64;

enum class HandshakeKind : std::uint8_t { Address = 0, Request = 1, Reply = 2 };
enum class LinkLayer : std::uint8_t { InfiniBand = 1, Ethernet = 2 };

using Gid = std::array<std::uint8_t, 16>;

struct RailInfo {
  std::uint8_t port = 1;
  LinkLayer link_layer = LinkLayer::InfiniBand;
  std::uint16_t lid = 0;
  std::uint8_t gid_index = 0;
  std::uint8_t mtu = 0;  // ibv_mtu: 1 = 256 ... 5 = 4096
  std::uint8_t max_rd_atomic = 1;
  Gid gid{};
  std::string device;  // for messages only
  bool operator==(const RailInfo&) const = default;
};

struct QpInfo {
  std::uint8_t rail = 0;       // the sender's rail this QP lives on
  std::uint8_t peer_rail = 0;  // the receiver's rail it connects to
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  bool operator==(const QpInfo&) const = default;
};

struct Endpoint {
  std::uint8_t family = 4;  // 4 or 6
  std::array<std::uint8_t, 16> ip{};
  std::uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
  std::string to_string() const;  // "10.0.0.5:18515", "[fd00::1]:18515"
};

struct Handshake {
  HandshakeKind kind = HandshakeKind::Address;
  std::uint64_t instance = 0;
  Endpoint listener;
  std::vector<RailInfo> rails;
  std::vector<QpInfo> qps;  // empty in an Address
  bool operator==(const Handshake&) const = default;
};

std::vector<std::byte> encode(const Handshake& handshake);
// InvalidArgument "ibverbs handshake: ..." for anything but a well-formed blob of this version.
Result<Handshake> decode(std::span<const std::byte> blob);

std::string_view to_string(HandshakeKind kind);
std::string_view to_string(LinkLayer link_layer);

}  // namespace conduit::verbs
