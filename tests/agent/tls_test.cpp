// The agent over HTTPS, as its callers meet it: the controller's and the agents' own client
// (api::AgentClient) with the CA they are given, clients that must be refused, stalled handshakes that must
// hold no worker, a certificate rotated under a running agent, and agent-to-agent landing reports over TLS.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "conduit/api/agent_client.h"
#include "eventually.h"
#include "temp_dir.h"
#include "tls_files.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::AgentOptions;
using testing::AgentProcess;
using testing::CertFiles;
using testing::TestCa;
using testing::tls_agent;

constexpr std::uint64_t MiB = 1 << 20;

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The serial number of the certificate the agent serves now (no verification: this only looks).
long served_serial(int port) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  const int fd = connect_loopback(port);
  long serial = -1;
  if (fd >= 0 && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1) {
    if (X509* cert = SSL_get1_peer_certificate(ssl)) {
      serial = ASN1_INTEGER_get(X509_get_serialNumber(cert));
      X509_free(cert);
    }
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  if (fd >= 0) ::close(fd);
  return serial;
}

class AgentTls : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ca.ok() && other_ca.ok()) << "openssl could not make test certificates";
  }

  api::AgentClient client(const std::string& url, const std::filesystem::path& ca_file) {
    return api::AgentClient(url, api::ClientOptions{.token = std::string("test-token-0123456789"),
                                                    .connect_timeout = 2s,
                                                    .read_timeout = 5s,
                                                    .ca_cert = ca_file.string()});
  }

  testing::TempDir dir;
  TestCa ca{dir.path() / "ca", "conduit-test-ca"};
  TestCa other_ca{dir.path() / "other", "someone-elses-ca"};
};

TEST_F(AgentTls, ServesHttpsToCallersWhoTrustItsCaAndNobodyElse) {
  const CertFiles cert = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  ASSERT_TRUE(ca.ok());
  AgentProcess a(tls_agent(cert, ca.cert()));
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.url().rfind("https://", 0), 0U) << a.url();
  EXPECT_EQ(a.get("/healthz").status, 200);
  EXPECT_EQ(a.post("/v1/regions", {{"name", "r"}, {"bytes", MiB}, {"memory", "host"}}).status, 201);

  // The client the controller and the agents use, given the CA: every call works.
  auto regions = client(a.url(), ca.cert()).list_regions();
  ASSERT_TRUE(regions) << regions.error().message;
  EXPECT_EQ(regions->size(), 1U);

  // Trusting another CA, or the system's: refused, and the error says it is the certificate.
  for (const auto& trusted : {other_ca.cert(), std::filesystem::path()}) {
    auto refused = client(a.url(), trusted).list_regions();
    ASSERT_FALSE(refused) << "trusted " << trusted;
    EXPECT_NE(refused.error().message.find("certificate is not trusted"), std::string::npos)
        << refused.error().message;
    EXPECT_EQ(refused.error().code, ErrorCode::Forbidden) << "no retry fixes an untrusted agent";
  }
  // Plain HTTP to the TLS port gets no answer (and no token leaves in clear text: the handshake fails first).
  auto plain = client("http://127.0.0.1:" + std::to_string(port_of(a.url())), {}).list_regions();
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ErrorCode::PeerUnreachable) << plain.error().message;
  EXPECT_EQ(a.get("/healthz").status, 200) << "the agent still serves";
}

TEST_F(AgentTls, AnExpiredOrMisnamedCertificateIsRefusedByItsCallers) {
  const CertFiles expired = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1", /*expired=*/true);
  const CertFiles misnamed = ca.issue("node-b", "DNS:node-b,IP:127.0.0.2");  // another node's
  ASSERT_TRUE(ca.ok());
  for (const CertFiles* cert : {&expired, &misnamed}) {
    AgentOptions o = tls_agent(*cert, ca.cert());
    o.ca_cert.clear();  // the test's own client would refuse it too
    AgentProcess a(o);
    ASSERT_TRUE(a.started());
    auto refused = client(a.url(), ca.cert()).list_regions();
    ASSERT_FALSE(refused) << cert->cert;
    EXPECT_NE(refused.error().message.find("certificate is not trusted"), std::string::npos)
        << refused.error().message;
  }
}

TEST_F(AgentTls, OneCertificateForEveryAgentIsCheckedByItsNameNotTheAddress) {
  // What the chart installs: one certificate for all agents, naming the agent Service, not any address.
  const CertFiles shared = ca.issue("conduit-agent", "DNS:conduit-agent");
  ASSERT_TRUE(ca.ok());
  AgentOptions o = tls_agent(
      shared, ca.cert(), {"--peer-ca-file", ca.cert().string(), "--peer-tls-server-name", "conduit-agent"});
  o.ca_cert.clear();  // the test's own client checks the address, which the certificate does not name
  AgentProcess a(o);
  AgentProcess b(o);
  ASSERT_TRUE(a.started() && b.started());
  auto by_name = [&](const std::string& url, const std::string& name, const std::filesystem::path& trusted) {
    return api::AgentClient(url, api::ClientOptions{.token = std::string("test-token-0123456789"),
                                                    .connect_timeout = 2s,
                                                    .read_timeout = 5s,
                                                    .ca_cert = trusted.string(),
                                                    .server_name = name});
  };
  auto listed = by_name(a.url(), "conduit-agent", ca.cert()).list_regions();
  EXPECT_TRUE(listed) << listed.error().message;
  for (const auto& [name, trusted] :
       {std::pair{std::string("conduit-controller"), ca.cert()},
        std::pair{std::string("conduit-agent"), other_ca.cert()}, std::pair{std::string(), ca.cert()}}) {
    auto refused = by_name(a.url(), name, trusted).list_regions();
    ASSERT_FALSE(refused) << "name '" << name << "', CA " << trusted;
    EXPECT_NE(refused.error().message.find("not trusted"), std::string::npos) << refused.error().message;
  }

  // Agent to agent by the same name: a verified transfer whose landing reports go a -> b over https.
  api::AgentClient to_a = by_name(a.url(), "conduit-agent", ca.cert());
  api::AgentClient to_b = by_name(b.url(), "conduit-agent", ca.cert());
  ASSERT_TRUE(to_a.create_region({.name = "src", .bytes = 4 * MiB, .memory = "host"}));
  ASSERT_TRUE(to_b.create_region({.name = "dst", .bytes = 4 * MiB, .memory = "host"}));
  auto g = to_b.create_grant("dst", {.length = 4 * MiB, .ttl_seconds = 600});
  ASSERT_TRUE(g) << g.error().message;
  api::TransferRequest request;
  request.source_region = "src";
  request.length = 4 * MiB;
  request.verify = api::Verify::Crc32c;
  request.targets.push_back({.grant = g->key, .url = b.url(), .region = "dst", .grant_id = g->id});
  auto started = to_a.start_transfer(request);
  ASSERT_TRUE(started) << started.error().message;
  Result<api::TransferStatus> now = started;
  for (int i = 0; i < 100 && now && !now->finished(); ++i) {
    std::this_thread::sleep_for(50ms);
    now = to_a.get_transfer(started->id);
  }
  ASSERT_TRUE(now) << now.error().message;
  EXPECT_EQ(now->state, "Succeeded") << now->message;
}

TEST_F(AgentTls, StalledHandshakesHoldNoWorkerAndAreClosedAtTheDeadline) {
  const CertFiles cert = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  AgentProcess a(tls_agent(cert, ca.cert()));
  ASSERT_TRUE(a.started());
  // More than the agent's 64 workers: each sends the first bytes of a ClientHello, then nothing.
  std::vector<int> stalled;
  const unsigned char hello_start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_loopback(port_of(a.url()));
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, hello_start, sizeof hello_start, MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof hello_start));
    stalled.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.get("/healthz").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "a stalled handshake held a worker";
  // Each is closed once the request deadline (10 s) passes.
  int closed = 0;
  const auto until = std::chrono::steady_clock::now() + 14s;
  for (int fd : stalled) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    char byte;
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) == 1 &&
        ::recv(fd, &byte, 1, 0) <= 0)
      ++closed;
    ::close(fd);
  }
  EXPECT_EQ(closed, 100) << "stalled handshakes left open past the deadline";
}

TEST_F(AgentTls, ARotatedCertificateIsServedWithoutARestart) {
  const CertFiles first = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  const CertFiles second = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  ASSERT_TRUE(ca.ok());
  // The agent reads fixed names, as a mounted Secret gives them; the rotation replaces the files by rename.
  const CertFiles live{dir.path() / "tls.crt", dir.path() / "tls.key"};
  std::filesystem::copy_file(first.cert, live.cert);
  std::filesystem::copy_file(first.key, live.key);
  AgentProcess a(tls_agent(live, ca.cert()));
  ASSERT_TRUE(a.started());
  const int port = port_of(a.url());
  const long before = served_serial(port);
  ASSERT_GT(before, 0);
  for (const auto& [from, to] : {std::pair{second.key, live.key}, std::pair{second.cert, live.cert}}) {
    std::filesystem::copy_file(from, to.string() + ".new");
    std::filesystem::rename(to.string() + ".new", to);
  }
  EXPECT_TRUE(testing::eventually([&] { return served_serial(port) == before + 1; }, 5s))
      << "still serving serial " << served_serial(port);
  auto regions = client(a.url(), ca.cert()).list_regions();
  EXPECT_TRUE(regions) << regions.error().message;
}

TEST_F(AgentTls, AgentsReportLandedBytesToEachOtherOverTls) {
  const CertFiles ca_a = ca.issue("node-a", "DNS:node-a,IP:127.0.0.1");
  const CertFiles ca_b = ca.issue("node-b", "DNS:node-b,IP:127.0.0.1");
  ASSERT_TRUE(ca.ok());
  for (const bool trusts : {true, false}) {
    AgentProcess a(tls_agent(ca_a, ca.cert(),
                             trusts ? std::vector<std::string>{"--peer-ca-file", ca.cert().string()}
                                    : std::vector<std::string>{}));
    AgentProcess b(tls_agent(ca_b, ca.cert()));
    ASSERT_TRUE(a.started() && b.started());
    const std::uint64_t size = 16 * MiB + 12345;
    testing::load_seeded(a, "src", size, 5);
    ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", size}, {"memory", "host"}}).status, 201);
    auto g = b.post("/v1/regions/dst/grants", {{"length", size}, {"access", "write"}, {"ttlSeconds", 600}});
    ASSERT_EQ(g.status, 201) << g.body.dump();
    // grantId: the source reports each segment to the target agent, which checks its CRC32C: a REST call
    // from agent to agent, over https.
    const json body{
        {"source", {{"region", "src"}}},
        {"targets",
         {{{"grant", g.body["key"]}, {"grantId", g.body["id"]}, {"url", b.url()}, {"region", "dst"}}}},
        {"verify", "crc32c"}};
    auto started = a.post("/v1/transfers", body);
    ASSERT_EQ(started.status, 202) << started.body.dump();
    const json done = a.wait_transfer(started.body["id"]);
    if (trusts) {
      EXPECT_EQ(done["state"], "Succeeded") << done.dump();
      auto sums = a.get("/v1/regions/src/checksum?slice=" + std::to_string(size));
      auto landed = b.get("/v1/regions/dst/checksum?slice=" + std::to_string(size));
      EXPECT_EQ(sums.body["crc32c"], landed.body["crc32c"]);
    } else {
      EXPECT_EQ(done["state"], "Failed") << done.dump();
      EXPECT_NE(done.dump().find("certificate is not trusted"), std::string::npos) << done.dump();
    }
  }
}

}  // namespace
}  // namespace conduit
