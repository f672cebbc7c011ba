#include "http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
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
thread_local PeerCertificate t_tls_peer;

bool complete(const std::string& head) { return head.find("\r\n\r\n") != std::string::npos; }

void close_socket(socket_t sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// A TLS connection's end: a close_notify if the socket takes it now (never waited for), then the socket.
void close_connection(socket_t sock, SSL* ssl) {
  if (ssl != nullptr) {
    // Mid-handshake there is nothing to shut down (and the attempt would leave an error on this thread).
    if (SSL_is_init_finished(ssl)) SSL_shutdown(ssl);
    ERR_clear_error();
    SSL_free(ssl);
  }
  close_socket(sock);
}

void set_nonblocking(socket_t sock) {
  const int flags = ::fcntl(sock, F_GETFL);
  if (flags >= 0) ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
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

// How long a worker keeps a kept-alive connection after answering, for the client's next request. A
// client that sends requests one after another (the controller, the SDK, a latency loop) then has each
// served here, without the hop to the gate and back to a worker: two thread wake-ups, most of a /healthz
// round trip on a 2-core machine. Bounded per answer, and partial headers still go back to the gate, so an
// idle or slow client holds a worker no longer than this.
constexpr auto kLinger = std::chrono::microseconds(1000);

// Reads what the client sends within kLinger of an answer into `head`. False: the client closed the
// connection or broke it (close it); true otherwise, with or without bytes.
bool linger(socket_t sock, SSL* ssl, std::string& head) {
  if (ssl == nullptr || SSL_pending(ssl) == 0) {
    pollfd p{sock, POLLIN, 0};
    const timespec wait{0, std::chrono::nanoseconds(kLinger).count()};
    if (::ppoll(&p, 1, &wait, nullptr) <= 0) return true;
  }
  while (head.size() < kMaxHead) {
    char buffer[4096];
    if (ssl == nullptr) {
      const ssize_t n = ::recv(sock, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        head.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
    ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
    const int n = SSL_read(ssl, buffer, sizeof buffer);  // the socket is non-blocking under TLS
    if (n > 0) {
      head.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl, n);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
  }
  return true;
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
  DeadlineStream(socket_t sock, SSL* ssl, milliseconds read_timeout, milliseconds write_timeout,
                 Clock::time_point deadline, std::string head)
      : sock_(sock),
        ssl_(ssl),
        read_timeout_(read_timeout),
        write_timeout_(write_timeout),
        deadline_(deadline),
        buffer_(std::move(head)) {}

  bool is_readable() const override {
    if (begin_ < buffer_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
    return socket_readable();
  }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == buffer_.size()) {
      if (!is_readable()) return -1;
      buffer_.resize(4096);
      const ssize_t n = ssl_ != nullptr ? tls_read(buffer_.data(), buffer_.size()) : plain_read();
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
    if (ssl_ != nullptr) return tls_write(ptr, size);
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

  // What was read past the request just served: the start of a pipelined next one. For TLS, also what
  // OpenSSL decrypted and holds: the gate waits on the socket, which would not say those bytes are there.
  std::string rest() {
    std::string out = buffer_.substr(begin_);
    while (ssl_ != nullptr && SSL_pending(ssl_) > 0 && out.size() < kMaxHead) {
      char more[4096];
      ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
      const int n = SSL_read(ssl_, more, sizeof more);
      if (n <= 0) break;
      out.append(more, static_cast<std::size_t>(n));
    }
    return out;
  }

 private:
  bool socket_readable() const {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
    return left.count() > 0 && wait_for(sock_, POLLIN, std::min(read_timeout_, left));
  }
  ssize_t plain_read() {
    ssize_t n;
    do {
      n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  // The socket is non-blocking: a record that arrives in pieces is waited for here, within the request's
  // deadline, never inside OpenSSL.
  ssize_t tls_read(char* into, std::size_t size) {
    for (;;) {
      ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
      const int n = SSL_read(ssl_, into, static_cast<int>(std::min<std::size_t>(size, INT32_MAX)));
      if (n > 0) return n;
      switch (SSL_get_error(ssl_, n)) {
        case SSL_ERROR_WANT_READ:
          if (!socket_readable()) return -1;
          continue;
        case SSL_ERROR_WANT_WRITE:
          if (!wait_for(sock_, POLLOUT, write_timeout_)) return -1;
          continue;
        case SSL_ERROR_ZERO_RETURN:
          return 0;
        default:
          return -1;
      }
    }
  }
  ssize_t tls_write(const char* from, std::size_t size) {
    if (size == 0) return 0;
    for (;;) {
      ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
      const int n = SSL_write(ssl_, from, static_cast<int>(std::min<std::size_t>(size, INT32_MAX)));
      if (n > 0) return n;
      switch (SSL_get_error(ssl_, n)) {
        case SSL_ERROR_WANT_WRITE:
          if (!wait_for(sock_, POLLOUT, write_timeout_)) return -1;
          continue;
        case SSL_ERROR_WANT_READ:
          if (!wait_for(sock_, POLLIN, write_timeout_)) return -1;
          continue;
        default:
          return -1;
      }
    }
  }

  socket_t sock_;
  SSL* ssl_;
  milliseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_;
  std::string buffer_;
  std::size_t begin_ = 0;
};

}  // namespace

void close_after_response() { t_close_after_response = true; }

const PeerCertificate& tls_peer() { return t_tls_peer; }

// The workers, and the gate: one thread that holds connections (epoll) until a request's headers are all
// in, then hands them to a worker.
class HttpServer::Pool final : public httplib::TaskQueue {
 public:
  using Serve = std::function<void(socket_t, SSL*, std::string, Clock::time_point, std::size_t)>;

  Pool(const HttpLimits& limits, std::shared_ptr<TlsContext> tls, Serve serve)
      : tls_(std::move(tls)),
        workers_(limits.threads),
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
      for (const auto& [fd, w] : waiting_) close_connection(fd, w.ssl);
      waiting_.clear();
    }
    workers_.shutdown();
  }

  // Holds `sock` until a request's headers are complete. `head` is what was read of them already; with
  // none, the connection may stay idle for `idle`, else it has the request deadline. `ssl`: a TLS
  // connection coming back after a request; a new connection (nullptr) starts its handshake here when the
  // server has TLS.
  void wait(socket_t sock, SSL* ssl, std::string head, std::size_t requests_left, milliseconds idle) {
    std::lock_guard lock(mu_);
    if (stopping_ || waiting_.size() >= max_waiting_) return close_connection(sock, ssl);
    bool handshaking = false;
    if (ssl == nullptr && tls_) {
      const std::shared_ptr<SSL_CTX> ctx = tls_->current();
      ssl = SSL_new(ctx.get());  // holds its own reference to the context
      if (ssl == nullptr || SSL_set_fd(ssl, sock) != 1) return close_connection(sock, ssl);
      SSL_set_accept_state(ssl);
      set_nonblocking(sock);
      handshaking = true;
    }
    const bool started = !head.empty();
    waiting_[sock] = {std::move(head), Clock::now() + (started ? deadline_ : idle),
                      Clock::now(),    started,
                      requests_left,   ssl,
                      handshaking};
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = sock;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev) != 0) {
      waiting_.erase(sock);
      close_connection(sock, ssl);
    }
  }

 private:
  struct Waiting {
    std::string head;
    Clock::time_point until;  // idle or deadline
    Clock::time_point first_byte;
    bool started = false;
    std::size_t requests_left = 0;
    SSL* ssl = nullptr;        // a TLS connection (owned here while it waits)
    bool handshaking = false;  // its handshake is not done yet
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
        close_connection(it->first, it->second.ssl);
        it = waiting_.erase(it);
      }
    }
  }

  // What the socket now waits for: more bytes, or (TLS) room to write the handshake's answer.
  void watch(int fd, bool out) {
    epoll_event ev{};
    ev.events = (out ? EPOLLOUT : EPOLLIN) | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  }

  // Under mu_, for a TLS connection: advances the handshake and reads what can be decrypted now into
  // w.head. > 0: bytes read; 0: the peer closed or failed (close it); -1: nothing yet (keep waiting).
  ssize_t tls_read(int fd, Waiting& w) {
    if (!w.started) {  // the ClientHello (or a kept-alive connection's next request) began
      w.started = true;
      w.first_byte = Clock::now();
      w.until = w.first_byte + deadline_;
    }
    if (w.handshaking) {
      ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
      const int r = SSL_do_handshake(w.ssl);
      if (r != 1) {
        const int e = SSL_get_error(w.ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          watch(fd, e == SSL_ERROR_WANT_WRITE);
          return -1;
        }
        return 0;  // not TLS, a wrong version, a client that refused our certificate: nothing to answer
      }
      w.handshaking = false;
    }
    ssize_t got = 0;
    while (w.head.size() < kMaxHead) {
      char buffer[4096];
      ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
      const int n = SSL_read(w.ssl, buffer, sizeof buffer);
      if (n > 0) {
        w.head.append(buffer, static_cast<std::size_t>(n));
        got += n;
        continue;
      }
      const int e = SSL_get_error(w.ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        watch(fd, e == SSL_ERROR_WANT_WRITE);
        return got > 0 ? got : -1;
      }
      return got > 0 ? got : 0;
    }
    return got;
  }

  // Under mu_: reads what has arrived; complete headers go to a worker, EOF or oversize closes.
  void readable(int fd) {
    const auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    Waiting& w = it->second;
    const std::size_t before = w.head.size();
    ssize_t n = 0;
    if (w.ssl != nullptr) {
      n = tls_read(fd, w);
      if (n < 0) return;
    } else {
      char buffer[4096];
      n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      if (n > 0) w.head.append(buffer, static_cast<std::size_t>(n));
    }
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
      workers_.enqueue([serve = serve_, fd, ssl = w.ssl, head = std::move(w.head), at = w.first_byte,
                        left = w.requests_left]() mutable { serve(fd, ssl, std::move(head), at, left); });
    } else {
      close_connection(fd, w.ssl);
    }
    waiting_.erase(it);
  }

  const std::shared_ptr<TlsContext> tls_;
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

HttpServer::HttpServer(HttpLimits limits, std::shared_ptr<TlsContext> tls)
    : limits_(limits), tls_(std::move(tls)) {
  new_task_queue = [this] {
    auto* pool = new Pool(limits_, tls_,
                          [this](socket_t sock, SSL* ssl, std::string head, Clock::time_point at,
                                 std::size_t left) { serve(sock, ssl, std::move(head), at, left); });
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
  pool->wait(sock, nullptr, {}, keep_alive_max_count_, std::chrono::seconds(keep_alive_timeout_sec_));
  return true;
}

void HttpServer::serve(socket_t sock, SSL* ssl, std::string head, Clock::time_point first_byte,
                       std::size_t left) {
  const auto read_timeout = duration(read_timeout_sec_, read_timeout_usec_);
  const auto write_timeout = duration(write_timeout_sec_, write_timeout_usec_);
  t_tls_peer = tls_ ? tls_->peer(ssl) : PeerCertificate{};
  while (svr_sock_ != INVALID_SOCKET) {
    DeadlineStream stream(sock, ssl, read_timeout, write_timeout, first_byte + limits_.request_deadline,
                          std::move(head));
    bool closed = false;
    t_close_after_response = false;
    const bool ok = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
    if (!ok || closed || t_close_after_response || --left == 0) break;
    head = stream.rest();
    if (!complete(head) && !linger(sock, ssl, head)) break;
    if (!complete(head)) {  // the next request is not all here: back to the gate until it is
      Pool* pool = pool_;
      if (pool == nullptr) break;
      pool->wait(sock, ssl, std::move(head), left, std::chrono::seconds(keep_alive_timeout_sec_));
      return;
    }
    first_byte = Clock::now();
  }
  close_connection(sock, ssl);
}

}  // namespace conduit::agent
