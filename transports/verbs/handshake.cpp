#include "handshake.h"

#include <arpa/inet.h>

#include <cstring>

namespace conduit::verbs {

namespace {

constexpr std::array<std::uint8_t, 4> kMagic{'C', 'D', 'V', 'B'};
constexpr std::uint32_t k24Bits = 1u << 24;

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(std::uint16_t v) {
    u8(static_cast<std::uint8_t>(v));
    u8(static_cast<std::uint8_t>(v >> 8));
  }
  void u32(std::uint32_t v) {
    u16(static_cast<std::uint16_t>(v));
    u16(static_cast<std::uint16_t>(v >> 16));
  }
  void u64(std::uint64_t v) {
    u32(static_cast<std::uint32_t>(v));
    u32(static_cast<std::uint32_t>(v >> 32));
  }
  void bytes(std::span<const std::uint8_t> b) {
    for (std::uint8_t v : b) u8(v);
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}

  // Each read names what it reads, so a truncated blob says where it ends.
  Result<std::uint8_t> u8(const char* what) {
    if (at_ >= in_.size()) return truncated(what);
    return std::to_integer<std::uint8_t>(in_[at_++]);
  }
  Result<std::uint16_t> u16(const char* what) {
    if (in_.size() - at_ < 2) return truncated(what);
    const auto v = static_cast<std::uint16_t>(std::to_integer<unsigned>(in_[at_]) |
                                              std::to_integer<unsigned>(in_[at_ + 1]) << 8);
    at_ += 2;
    return v;
  }
  Result<std::uint32_t> u32(const char* what) {
    if (in_.size() - at_ < 4) return truncated(what);
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | std::to_integer<std::uint32_t>(in_[at_ + i]);
    at_ += 4;
    return v;
  }
  Result<std::uint64_t> u64(const char* what) {
    if (in_.size() - at_ < 8) return truncated(what);
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | std::to_integer<std::uint64_t>(in_[at_ + i]);
    at_ += 8;
    return v;
  }
  Status bytes(std::span<std::uint8_t> out, const char* what) {
    if (in_.size() - at_ < out.size()) return truncated(what);
    for (auto& b : out) b = std::to_integer<std::uint8_t>(in_[at_++]);
    return {};
  }
  std::size_t offset() const { return at_; }
  std::size_t left() const { return in_.size() - at_; }

 private:
  Error truncated(const char* what) const {
    return make_error(ErrorCode::InvalidArgument, "ibverbs handshake: truncated at byte " +
                                                      std::to_string(at_) + " (reading " + what + ")");
  }

  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

Error bad(const std::string& why) {
  return make_error(ErrorCode::InvalidArgument, "ibverbs handshake: " + why);
}

// Every read below goes through these so one missing byte returns its message at once.
#define CONDUIT_READ(var, expr)         \
  auto var##_r = (expr);                \
  if (!var##_r) return var##_r.error(); \
  const auto var = *var##_r

}  // namespace

std::string_view to_string(HandshakeKind kind) {
  switch (kind) {
    case HandshakeKind::Address:
      return "address";
    case HandshakeKind::Request:
      return "request";
    case HandshakeKind::Reply:
      return "reply";
  }
  return "unknown";
}

std::string_view to_string(LinkLayer link_layer) {
  switch (link_layer) {
    case LinkLayer::InfiniBand:
      return "InfiniBand";
    case LinkLayer::Ethernet:
      return "Ethernet (RoCE)";
  }
  return "unknown";
}

std::string Endpoint::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == 6) {
    inet_ntop(AF_INET6, ip.data(), text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(port);
  }
  inet_ntop(AF_INET, ip.data(), text, sizeof(text));
  return std::string(text) + ":" + std::to_string(port);
}

std::vector<std::byte> encode(const Handshake& h) {
  Writer w;
  w.bytes(kMagic);
  w.u8(kHandshakeVersion);
  w.u8(static_cast<std::uint8_t>(h.kind));
  w.u16(0);
  w.u64(h.instance);
  w.u8(h.listener.family);
  w.u8(0);
  w.u16(h.listener.port);
  w.bytes(h.listener.ip);
  w.u8(static_cast<std::uint8_t>(h.rails.size()));
  for (const RailInfo& r : h.rails) {
    const std::size_t name_len = std::min(r.device.size(), kMaxDeviceName);
    w.u8(r.port);
    w.u8(static_cast<std::uint8_t>(r.link_layer));
    w.u16(r.lid);
    w.u8(r.gid_index);
    w.u8(r.mtu);
    w.u8(r.max_rd_atomic);
    w.u8(static_cast<std::uint8_t>(name_len));
    w.bytes(r.gid);
    w.bytes({reinterpret_cast<const std::uint8_t*>(r.device.data()), name_len});
  }
  w.u16(static_cast<std::uint16_t>(h.qps.size()));
  for (const QpInfo& q : h.qps) {
    w.u8(q.rail);
    w.u8(q.peer_rail);
    w.u16(0);
    w.u32(q.qpn);
    w.u32(q.psn);
  }
  return w.take();
}

Result<Handshake> decode(std::span<const std::byte> blob) {
  Reader in(blob);
  std::array<std::uint8_t, 4> magic{};
  if (auto ok = in.bytes(magic, "magic"); !ok) {
    return bad("not a Conduit ibverbs address (" + std::to_string(blob.size()) + " bytes)");
  }
  if (magic != kMagic) return bad("not a Conduit ibverbs address (wrong magic)");
  CONDUIT_READ(version, in.u8("version"));
  if (version != kHandshakeVersion) {
    return bad("version " + std::to_string(version) + " is not supported (this build speaks version " +
               std::to_string(kHandshakeVersion) + ")");
  }
  Handshake h;
  CONDUIT_READ(kind, in.u8("kind"));
  if (kind > static_cast<std::uint8_t>(HandshakeKind::Reply)) {
    return bad("unknown message kind " + std::to_string(kind));
  }
  h.kind = static_cast<HandshakeKind>(kind);
  CONDUIT_READ(reserved, in.u16("reserved"));
  (void)reserved;
  CONDUIT_READ(instance, in.u64("instance"));
  h.instance = instance;
  CONDUIT_READ(family, in.u8("listener family"));
  if (family != 4 && family != 6) return bad("listener address family " + std::to_string(family));
  h.listener.family = family;
  CONDUIT_READ(reserved2, in.u8("reserved"));
  (void)reserved2;
  CONDUIT_READ(port, in.u16("listener port"));
  if (port == 0) return bad("listener port is 0");
  h.listener.port = port;
  if (auto ok = in.bytes(h.listener.ip, "listener address"); !ok) return ok.error();

  CONDUIT_READ(rails, in.u8("rail count"));
  if (rails == 0 || rails > kMaxRails) {
    return bad("rail count " + std::to_string(rails) + " is not 1.." + std::to_string(kMaxRails));
  }
  for (unsigned i = 0; i < rails; ++i) {
    const std::string where = "rail " + std::to_string(i) + ": ";
    RailInfo r;
    CONDUIT_READ(rport, in.u8("rail port"));
    if (rport == 0) return bad(where + "port 0 (ports count from 1)");
    r.port = rport;
    CONDUIT_READ(link, in.u8("link layer"));
    if (link != static_cast<std::uint8_t>(LinkLayer::InfiniBand) &&
        link != static_cast<std::uint8_t>(LinkLayer::Ethernet)) {
      return bad(where + "unknown link layer " + std::to_string(link));
    }
    r.link_layer = static_cast<LinkLayer>(link);
    CONDUIT_READ(lid, in.u16("lid"));
    r.lid = lid;
    CONDUIT_READ(gid_index, in.u8("gid index"));
    r.gid_index = gid_index;
    CONDUIT_READ(mtu, in.u8("mtu"));
    if (mtu < 1 || mtu > 5)
      return bad(where + "MTU code " + std::to_string(mtu) + " is not 1..5 (256..4096)");
    r.mtu = mtu;
    CONDUIT_READ(rd, in.u8("max_rd_atomic"));
    if (rd == 0) return bad(where + "max_rd_atomic is 0");
    r.max_rd_atomic = rd;
    CONDUIT_READ(name_len, in.u8("device name length"));
    if (name_len > kMaxDeviceName) return bad(where + "device name longer than 64 bytes");
    if (auto ok = in.bytes(r.gid, "gid"); !ok) return ok.error();
    if (r.link_layer == LinkLayer::InfiniBand && r.lid == 0) {
      return bad(where + "InfiniBand rail without a LID");
    }
    if (r.link_layer == LinkLayer::Ethernet && r.gid == Gid{})
      return bad(where + "RoCE rail with a zero GID");
    std::vector<std::uint8_t> name(name_len);
    if (auto ok = in.bytes(name, "device name"); !ok) return ok.error();
    r.device.assign(name.begin(), name.end());
    h.rails.push_back(std::move(r));
  }

  CONDUIT_READ(qps, in.u16("qp count"));
  if (qps > kMaxQps) return bad("qp count " + std::to_string(qps) + " exceeds " + std::to_string(kMaxQps));
  if (h.kind == HandshakeKind::Address && qps != 0) return bad("an address carries no queue pairs");
  if (h.kind != HandshakeKind::Address && qps == 0) {
    return bad(std::string("a ") + std::string(to_string(h.kind)) + " needs at least one queue pair");
  }
  for (unsigned i = 0; i < qps; ++i) {
    const std::string where = "qp " + std::to_string(i) + ": ";
    QpInfo q;
    CONDUIT_READ(rail, in.u8("qp rail"));
    if (rail >= h.rails.size()) {
      return bad(where + "rail " + std::to_string(rail) + " but the message has " +
                 std::to_string(h.rails.size()) + " rails");
    }
    q.rail = rail;
    CONDUIT_READ(peer_rail, in.u8("qp peer rail"));
    if (peer_rail >= kMaxRails) return bad(where + "peer rail " + std::to_string(peer_rail));
    q.peer_rail = peer_rail;
    CONDUIT_READ(reserved3, in.u16("reserved"));
    (void)reserved3;
    CONDUIT_READ(qpn, in.u32("qpn"));
    if (qpn == 0 || qpn >= k24Bits) return bad(where + "QPN " + std::to_string(qpn) + " is not 1..2^24-1");
    q.qpn = qpn;
    CONDUIT_READ(psn, in.u32("psn"));
    if (psn >= k24Bits) return bad(where + "PSN " + std::to_string(psn) + " exceeds 24 bits");
    q.psn = psn;
    h.qps.push_back(q);
  }
  if (in.left() != 0) {
    return bad(std::to_string(in.left()) + " trailing bytes after byte " + std::to_string(in.offset()));
  }
  return h;
}

#undef CONDUIT_READ

}  // namespace conduit::verbs
