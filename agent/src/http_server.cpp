#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace conduit::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits up to `timeout` for `events` on `sock`; true when they came.
bool wait_for(socket_t sock, short events, milliseconds timeout) {
  pollfd p{sock, events, 0};
  const auto end = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(end - Clock::now()).count();
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

void address(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

// A connected socket as httplib reads and writes it, with a buffer for its byte-at-a-time line reader and
// the request's deadline: once past it, every read fails, which makes httplib drop the request and close.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, milliseconds read_timeout, milliseconds write_timeout,
                 Clock::time_point deadline)
      : sock_(sock), read_timeout_(read_timeout), write_timeout_(write_timeout), deadline_(deadline) {}

  bool is_readable() const override {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
    return left.count() > 0 && wait_for(sock_, POLLIN, std::min(read_timeout_, left));
  }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      if (!is_readable()) return -1;
      ssize_t n;
      do {
        n = ::recv(sock_, buffer_, sizeof buffer_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) address(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) address(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  socket_t sock_;
  milliseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_;
  char buffer_[4096];
  std::size_t begin_ = 0, end_ = 0;
};

milliseconds duration(time_t sec, time_t usec) { return milliseconds(sec * 1000 + usec / 1000); }

thread_local bool t_close_after_response = false;

}  // namespace

void close_after_response() { t_close_after_response = true; }

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {
  new_task_queue = [threads = limits_.threads] { return new httplib::ThreadPool(threads); };
}

bool HttpServer::raise_backlog() {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, SOMAXCONN) == 0;
}

// httplib's own loop (process_server_socket_core) with a DeadlineStream per request: wait for the next
// request while keep-alive allows, then give it `request_deadline` from its first byte.
bool HttpServer::process_and_close_socket(socket_t sock) {
  bool ret = false;
  const auto idle = std::chrono::seconds(keep_alive_timeout_sec_);
  for (std::size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    // In slices, so stop() (svr_sock_ invalid) does not wait out a whole keep-alive.
    bool readable = false;
    for (auto end = Clock::now() + idle; !readable && svr_sock_ != INVALID_SOCKET && Clock::now() < end;) {
      readable = wait_for(sock, POLLIN, milliseconds(100));
    }
    if (!readable) break;
    DeadlineStream stream(sock, duration(read_timeout_sec_, read_timeout_usec_),
                          duration(write_timeout_sec_, write_timeout_usec_),
                          Clock::now() + limits_.request_deadline);
    bool closed = false;
    t_close_after_response = false;
    ret = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
    if (!ret || closed || t_close_after_response) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace conduit::agent
