// A kept-alive connection as a client that sends one request after another meets it, over HTTP and HTTPS:
// the worker that answered keeps the connection for a moment (http_server.cpp, kLinger), so a next request
// sent at once is served there, and one that comes slowly goes back to the gate and is still served; a
// hundred such slow clients hold no worker.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "temp_dir.h"
#include "tls_files.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::AgentProcess;

int connect_to(const std::string& url) {
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};  // a request the agent never answers fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const int yes = 1;  // else our request waits behind the handshake's last flight for a delayed ACK (40 ms)
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One connection, plain or TLS, written and read as raw bytes.
class Connection {
 public:
  Connection(const std::string& url, SSL_CTX* tls) : fd_(connect_to(url)) {
    if (fd_ < 0 || tls == nullptr) return;
    ssl_ = SSL_new(tls);
    if (SSL_set_fd(ssl_, fd_) != 1 || SSL_connect(ssl_) != 1) {
      SSL_free(ssl_);
      ssl_ = nullptr;
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  bool send(const std::string& bytes) {
    if (ssl_ != nullptr) return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) > 0;
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }

  // One response: its status, or -1 if the connection ended or stayed silent for 5 s first.
  int status() {
    std::size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!more()) return -1;
    }
    const std::string head = buffer_.substr(0, end + 4);
    std::size_t length = 0;
    if (const auto at = head.find("Content-Length: "); at != std::string::npos)
      length = std::stoul(head.substr(at + 16));
    while (buffer_.size() < head.size() + length) {
      if (!more()) return -1;
    }
    buffer_.erase(0, head.size() + length);
    return head.starts_with("HTTP/1.1 ") ? std::stoi(head.substr(9, 3)) : -1;
  }

 private:
  bool more() {
    char chunk[4096];
    const long n =
        ssl_ != nullptr ? SSL_read(ssl_, chunk, sizeof chunk) : ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  int fd_;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

const std::string kHealth = "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n";

// The checks, alike for both schemes.
void next_requests_are_served(const std::string& url, SSL_CTX* tls) {
  Connection c(url, tls);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send(kHealth));
  EXPECT_EQ(c.status(), 200);
  // At once: the worker that answered serves it.
  ASSERT_TRUE(c.send(kHealth));
  EXPECT_EQ(c.status(), 200);
  // Half at once, the rest long after the worker let go: the gate holds the half and serves the whole.
  ASSERT_TRUE(c.send(kHealth.substr(0, 20)));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(c.send(kHealth.substr(20)));
  EXPECT_EQ(c.status(), 200) << "the rest of a request that came slowly after an answer";
  // After a pause longer than the worker waits.
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(c.send(kHealth));
  EXPECT_EQ(c.status(), 200);
  // Two in one write (pipelined), then one at once.
  ASSERT_TRUE(c.send(kHealth + kHealth));
  EXPECT_EQ(c.status(), 200);
  EXPECT_EQ(c.status(), 200);

  // More kept-alive connections than the agent has workers (64), each stalled halfway through its next
  // request: none holds a worker, so a new caller is answered at once, and each is still answered once its
  // request is complete.
  std::vector<std::unique_ptr<Connection>> stalled;
  for (int i = 0; i < 100; ++i) {
    auto s = std::make_unique<Connection>(url, tls);
    ASSERT_TRUE(s->ok());
    ASSERT_TRUE(s->send(kHealth));
    ASSERT_EQ(s->status(), 200);
    ASSERT_TRUE(s->send(kHealth.substr(0, 20)));
    stalled.push_back(std::move(s));
  }
  const auto t0 = std::chrono::steady_clock::now();
  Connection fresh(url, tls);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(fresh.send(kHealth));
  EXPECT_EQ(fresh.status(), 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "connections between requests held the workers";
  int answered = 0;
  for (auto& s : stalled) answered += s->send(kHealth.substr(20)) && s->status() == 200 ? 1 : 0;
  EXPECT_EQ(answered, 100);
}

TEST(AgentKeepAlive, TheNextRequestIsServedWhetherItComesAtOnceOrSlowly) {
  AgentProcess agent(testing::small_tcp_agent());
  ASSERT_TRUE(agent.started());
  next_requests_are_served(agent.url(), nullptr);
}

TEST(AgentKeepAlive, TheNextRequestIsServedWhetherItComesAtOnceOrSlowlyOverTls) {
  testing::TempDir dir;
  testing::TestCa ca{dir.path() / "ca", "conduit-test-ca"};
  ASSERT_TRUE(ca.ok()) << "openssl could not make test certificates";
  const testing::CertFiles cert = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  AgentProcess agent(testing::tls_agent(cert, ca.cert()));
  ASSERT_TRUE(agent.started());
  // No verification here: what is under test is the connection's life, not whom it reaches.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> tls(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  next_requests_are_served(agent.url(), tls.get());
}

}  // namespace
}  // namespace conduit
