#include "connector.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "conduit/common/unique_fd.h"

namespace conduit::verbs {

namespace {

using Clock = std::chrono::steady_clock;

socklen_t to_sockaddr(const Endpoint& e, sockaddr_storage& out) {
  out = sockaddr_storage{};
  if (e.family == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(e.port);
    std::memcpy(&a->sin6_addr, e.ip.data(), 16);
    return sizeof(sockaddr_in6);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&out);
  a->sin_family = AF_INET;
  a->sin_port = htons(e.port);
  std::memcpy(&a->sin_addr, e.ip.data(), 4);
  return sizeof(sockaddr_in);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// Reads or writes exactly `n` bytes on a non-blocking socket before `deadline`; errno-style failures.
Status transfer(int fd, std::byte* data, std::size_t n, bool writing, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t rc =
        writing ? ::send(fd, data + done, n - done, MSG_NOSIGNAL) : ::recv(fd, data + done, n - done, 0);
    if (rc > 0) {
      done += static_cast<std::size_t>(rc);
      continue;
    }
    if (rc == 0 && !writing)
      return make_error(ErrorCode::PeerUnreachable, "connection closed by the other side");
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return make_error(ErrorCode::PeerUnreachable,
                        std::string(writing ? "send: " : "recv: ") + std::strerror(errno));
    }
    pollfd p{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const int wait = remaining_ms(deadline);
    if (wait == 0 || ::poll(&p, 1, wait) == 0)
      return make_error(ErrorCode::TimedOut, "no answer within the deadline");
  }
  return {};
}

Status send_bytes(int fd, std::span<const std::byte> b, Clock::time_point deadline) {
  return transfer(fd, const_cast<std::byte*>(b.data()), b.size(), true, deadline);
}
Status recv_bytes(int fd, std::span<std::byte> b, Clock::time_point deadline) {
  return transfer(fd, b.data(), b.size(), false, deadline);
}

std::array<std::byte, 4> le32(std::uint32_t v) {
  return {static_cast<std::byte>(v), static_cast<std::byte>(v >> 8), static_cast<std::byte>(v >> 16),
          static_cast<std::byte>(v >> 24)};
}
std::uint32_t from_le32(const std::byte* b) {
  return std::to_integer<std::uint32_t>(b[0]) | std::to_integer<std::uint32_t>(b[1]) << 8 |
         std::to_integer<std::uint32_t>(b[2]) << 16 | std::to_integer<std::uint32_t>(b[3]) << 24;
}

void respond(int fd, const Result<std::vector<std::byte>>& result, Clock::time_point deadline) {
  std::vector<std::byte> out;
  if (result) {
    out.push_back(std::byte{0});
    out.push_back(std::byte{0});
    const auto len = le32(static_cast<std::uint32_t>(result->size()));
    out.insert(out.end(), len.begin(), len.end());
    out.insert(out.end(), result->begin(), result->end());
  } else {
    const std::string& m = result.error().message;
    out.push_back(std::byte{1});
    out.push_back(static_cast<std::byte>(result.error().code));
    const auto len = le32(static_cast<std::uint32_t>(m.size()));
    out.insert(out.end(), len.begin(), len.end());
    for (char c : m) out.push_back(static_cast<std::byte>(c));
  }
  [[maybe_unused]] auto ok = send_bytes(fd, out, deadline);
}

}  // namespace

Result<Endpoint> parse_endpoint(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::InvalidArgument, "listen address \"" + text + "\": " + why);
  };
  std::string host = text;
  std::string port;
  if (text.starts_with("[")) {
    const auto close = text.find(']');
    if (close == std::string::npos) return bad("missing ]");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return bad("want [IPv6]:PORT");
      port = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, text.find(':'));
    port = text.substr(text.find(':') + 1);
  }
  Endpoint e;
  if (inet_pton(AF_INET, host.c_str(), e.ip.data()) == 1) {
    e.family = 4;
  } else if (inet_pton(AF_INET6, host.c_str(), e.ip.data()) == 1) {
    e.family = 6;
  } else {
    return bad("not an IPv4 or IPv6 address");
  }
  if (!port.empty()) {
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || ptr != port.data() + port.size() || value > 65535) return bad("bad port");
    e.port = static_cast<std::uint16_t>(value);
  }
  return e;
}

std::string first_ipv4_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    found = text;
  }
  freeifaddrs(list);
  return found;
}

Result<std::unique_ptr<Listener>> Listener::start(const Endpoint& at, Handler handler,
                                                  std::chrono::milliseconds deadline) {
  std::unique_ptr<Listener> l(new Listener());
  l->handler_ = std::move(handler);
  l->deadline_ = deadline;
  const int family = at.family == 6 ? AF_INET6 : AF_INET;
  l->listen_fd_ = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->listen_fd_ < 0) return make_error(ErrorCode::Io, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(l->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage addr{};
  socklen_t len = to_sockaddr(at, addr);
  if (::bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(l->listen_fd_, 64) != 0) {
    return make_error(ErrorCode::Io,
                      "ibverbs handshake listener on " + at.to_string() + ": " + std::strerror(errno));
  }
  len = sizeof(addr);
  getsockname(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  l->endpoint_ = at;
  l->endpoint_.port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  l->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (l->wake_fd_ < 0) return make_error(ErrorCode::Io, std::string("eventfd: ") + std::strerror(errno));
  l->thread_ = std::thread([p = l.get()] { p->run(); });
  return l;
}

Listener::~Listener() {
  stop_.store(true);
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Listener::run() {
  while (!stop_.load()) {
    std::array<pollfd, 2> fds{pollfd{listen_fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (stop_.load()) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    UniqueFd owned(fd);
    serve(fd);
  }
}

void Listener::serve(int fd) {
  const auto deadline = Clock::now() + deadline_;
  std::array<std::byte, 4> header{};
  if (!recv_bytes(fd, header, deadline)) return;
  const std::uint32_t size = from_le32(header.data());
  if (size > kMaxFrame) {
    respond(fd,
            make_error(ErrorCode::InvalidArgument, "handshake request of " + std::to_string(size) +
                                                       " bytes exceeds " + std::to_string(kMaxFrame)),
            deadline);
    return;
  }
  std::vector<std::byte> request(size);
  if (!recv_bytes(fd, request, deadline)) return;
  respond(fd, handler_(request), deadline);
}

Result<std::vector<std::byte>> exchange(const Endpoint& peer, std::span<const std::byte> request,
                                        std::chrono::milliseconds timeout) {
  const std::string who = "ibverbs handshake with " + peer.to_string();
  auto fail = [&](ErrorCode code, const std::string& why) { return make_error(code, who + ": " + why); };
  if (request.size() > kMaxFrame) return fail(ErrorCode::InvalidArgument, "request too large");
  const auto deadline = Clock::now() + timeout;
  UniqueFd s(::socket(peer.family == 6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return fail(ErrorCode::Io, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_storage addr{};
  const socklen_t len = to_sockaddr(peer, addr);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS)
      return fail(ErrorCode::PeerUnreachable, std::string("connect: ") + std::strerror(errno));
    pollfd p{s.get(), POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
      return fail(ErrorCode::PeerUnreachable, "connect timed out");
    int err = 0;
    socklen_t err_len = sizeof(err);
    getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &err_len);
    if (err != 0) return fail(ErrorCode::PeerUnreachable, std::string("connect: ") + std::strerror(err));
  }
  const auto size = le32(static_cast<std::uint32_t>(request.size()));
  if (auto ok = send_bytes(s.get(), size, deadline); !ok)
    return fail(ErrorCode::PeerUnreachable, ok.error().message);
  if (auto ok = send_bytes(s.get(), request, deadline); !ok)
    return fail(ErrorCode::PeerUnreachable, ok.error().message);

  std::array<std::byte, 6> head{};
  if (auto ok = recv_bytes(s.get(), head, deadline); !ok)
    return fail(ErrorCode::PeerUnreachable, ok.error().message);
  const std::uint32_t body_len = from_le32(head.data() + 2);
  if (body_len > kMaxFrame)
    return fail(ErrorCode::Provider, "reply of " + std::to_string(body_len) + " bytes");
  std::vector<std::byte> body(body_len);
  if (auto ok = recv_bytes(s.get(), body, deadline); !ok)
    return fail(ErrorCode::PeerUnreachable, ok.error().message);
  if (head[0] == std::byte{0}) return body;
  const auto code = std::to_integer<std::uint8_t>(head[1]);
  const ErrorCode error_code = code <= static_cast<std::uint8_t>(ErrorCode::Cancelled)
                                   ? static_cast<ErrorCode>(code)
                                   : ErrorCode::Provider;
  std::string message(reinterpret_cast<const char*>(body.data()), body.size());
  return fail(error_code, "the peer refused: " + message);
}

}  // namespace conduit::verbs
