#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace conduit::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kMaxHead = 16 << 10;  // request line and headers; httplib allows 8 KiB per line

thread_local bool t_close_after_response = false;

bool complete(const std::string& head) { return head.find("\r\n\r\n") != std::string::npos; }

void close_socket(socket_t sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

milliseconds duration(time_t sec, time_t usec) { return milliseconds(sec * 1000 + usec / 1000); }

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

// A connected socket as httplib reads and writes it, starting with the bytes the gate already read, with a
// buffer for httplib's byte-at-a-time line reader and the request's deadline: past it every read fails,
// which makes httplib drop the request.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, milliseconds read_timeout, milliseconds write_timeout,
                 Clock::time_point deadline, std::string head)
      : sock_(sock),
        read_timeout_(read_timeout),
        write_timeout_(write_timeout),
        deadline_(deadline),
        buffer_(std::move(head)) {}

  bool is_readable() const override {
    if (begin_ < buffer_.size()) return true;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
    return left.count() > 0 && wait_for(sock_, POLLIN, std::min(read_timeout_, left));
  }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == buffer_.size()) {
      if (!is_readable()) return -1;
      buffer_.resize(4096);
      ssize_t n;
      do {
        n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      } while (n < 0 && errno == EINTR);
      buffer_.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      begin_ = 0;
      if (n <= 0) return n;
    }
    const std::size_t n = std::min(size, buffer_.size() - begin_);
    std::memcpy(ptr, buffer_.data() + begin_, n);
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

  // What was read past the request just served: the start of a pipelined next one.
  std::string rest() const { return buffer_.substr(begin_); }

 private:
  socket_t sock_;
  milliseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_;
  std::string buffer_;
  std::size_t begin_ = 0;
};

}  // namespace

void close_after_response() { t_close_after_response = true; }

// The workers, and the gate: one thread that holds connections (epoll) until a request's headers are all
// in, then hands them to a worker.
class HttpServer::Pool final : public httplib::TaskQueue {
 public:
  using Serve = std::function<void(socket_t, std::string, Clock::time_point, std::size_t)>;

  Pool(const HttpLimits& limits, Serve serve)
      : workers_(limits.threads),
        max_waiting_(limits.max_waiting),
        deadline_(limits.request_deadline),
        serve_(std::move(serve)),
        epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
        wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { loop(); });
  }
  ~Pool() override {
    if (thread_.joinable()) shutdown();
    ::close(epoll_fd_);
    ::close(wake_fd_);
  }

  void enqueue(std::function<void()> fn) override { workers_.enqueue(std::move(fn)); }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
    {
      std::lock_guard lock(mu_);
      for (const auto& [fd, w] : waiting_) close_socket(fd);
      waiting_.clear();
    }
    workers_.shutdown();
  }

  // Holds `sock` until a request's headers are complete. `head` is what was read of them already; with
  // none, the connection may stay idle for `idle`, else it has the request deadline.
  void wait(socket_t sock, std::string head, std::size_t requests_left, milliseconds idle) {
    std::lock_guard lock(mu_);
    if (stopping_ || waiting_.size() >= max_waiting_) return close_socket(sock);
    const bool started = !head.empty();
    waiting_[sock] = {std::move(head), Clock::now() + (started ? deadline_ : idle), Clock::now(), started,
                      requests_left};
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = sock;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev) != 0) {
      waiting_.erase(sock);
      close_socket(sock);
    }
  }

 private:
  struct Waiting {
    std::string head;
    Clock::time_point until;  // idle or deadline
    Clock::time_point first_byte;
    bool started = false;
    std::size_t requests_left = 0;
  };

  void loop() {
    std::vector<epoll_event> events(256);
    for (;;) {
      const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd != wake_fd_) readable(events[i].data.fd);
      }
      const auto now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (now < it->second.until) {
          ++it;
          continue;
        }
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
        close_socket(it->first);
        it = waiting_.erase(it);
      }
    }
  }

  // Under mu_: reads what has arrived; complete headers go to a worker, EOF or oversize closes.
  void readable(int fd) {
    const auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    Waiting& w = it->second;
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    const std::size_t before = w.head.size();
    if (n > 0) w.head.append(buffer, static_cast<std::size_t>(n));
    // Only the new bytes (and 3 before them) can complete the blank line that ends the headers.
    const bool done = n > 0 && w.head.find("\r\n\r\n", before < 3 ? 0 : before - 3) != std::string::npos;
    if (n > 0 && !w.started) {
      w.started = true;
      w.first_byte = Clock::now();
      w.until = w.first_byte + deadline_;
    }
    if (n > 0 && !done && w.head.size() < kMaxHead) return;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    if (done) {
      workers_.enqueue([serve = serve_, fd, head = std::move(w.head), at = w.first_byte,
                        left = w.requests_left]() mutable { serve(fd, std::move(head), at, left); });
    } else {
      close_socket(fd);
    }
    waiting_.erase(it);
  }

  httplib::ThreadPool workers_;
  const std::size_t max_waiting_;
  const milliseconds deadline_;
  const Serve serve_;
  const int epoll_fd_;
  const int wake_fd_;
  std::mutex mu_;
  std::map<int, Waiting> waiting_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {
  new_task_queue = [this] {
    auto* pool = new Pool(limits_, [this](socket_t sock, std::string head, Clock::time_point at,
                                          std::size_t left) { serve(sock, std::move(head), at, left); });
    pool_ = pool;
    return pool;
  };
}

bool HttpServer::raise_backlog() {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, SOMAXCONN) == 0;
}

// Runs on a worker right after accept: the connection goes straight to the gate.
bool HttpServer::process_and_close_socket(socket_t sock) {
  Pool* pool = pool_;
  if (pool == nullptr) {
    close_socket(sock);
    return false;
  }
  pool->wait(sock, {}, keep_alive_max_count_, std::chrono::seconds(keep_alive_timeout_sec_));
  return true;
}

void HttpServer::serve(socket_t sock, std::string head, Clock::time_point first_byte, std::size_t left) {
  const auto read_timeout = duration(read_timeout_sec_, read_timeout_usec_);
  const auto write_timeout = duration(write_timeout_sec_, write_timeout_usec_);
  while (svr_sock_ != INVALID_SOCKET) {
    DeadlineStream stream(sock, read_timeout, write_timeout, first_byte + limits_.request_deadline,
                          std::move(head));
    bool closed = false;
    t_close_after_response = false;
    const bool ok = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
    if (!ok || closed || t_close_after_response || --left == 0) break;
    head = stream.rest();
    if (!complete(head)) {  // the next request is not all here: back to the gate until it is
      Pool* pool = pool_;
      if (pool == nullptr) break;
      pool->wait(sock, std::move(head), left, std::chrono::seconds(keep_alive_timeout_sec_));
      return;
    }
    first_byte = Clock::now();
  }
  close_socket(sock);
}

}  // namespace conduit::agent
