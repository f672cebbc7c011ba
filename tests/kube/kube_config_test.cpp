// kubeconfig and in-cluster config from static files in a temp dir.
#include "kube_client/kube_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "conduit/common/base64.h"
#include "temp_dir.h"

namespace conduit::kube_client {
namespace {

using conduit::testing::TempDir;
namespace fs = std::filesystem;

std::string b64(const std::string& s) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8 | (unsigned char)s[i + 2];
    for (int j = 18; j >= 0; j -= 6) out += k[(v >> j) & 63];
  }
  if (i + 1 == s.size()) {
    unsigned v = (unsigned char)s[i] << 16;
    out += std::string{k[(v >> 18) & 63], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == s.size()) {
    unsigned v = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8;
    out += std::string{k[(v >> 18) & 63], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::string two_contexts(const std::string& prod_user, const std::string& dev_cluster_extra) {
  return R"(apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://10.1.2.3:6443
    certificate-authority-data: )" +
         b64("-----BEGIN CERTIFICATE-----\nprod-ca\n-----END CERTIFICATE-----\n") + R"(
- name: dev
  cluster:
    server: https://[fd00::1]/k8s/clusters/c-1/
)" + dev_cluster_extra +
         R"(
users:
- name: prod-user
  user:
)" + prod_user +
         R"(
- name: dev-user
  user:
    tokenFile: tokens/dev
    client-certificate: certs/dev.crt
    client-key: certs/dev.key
contexts:
- name: prod
  context: {cluster: prod, user: prod-user, namespace: transfers}
- name: dev
  context: {cluster: dev, user: dev-user}
current-context: prod
)";
}

TEST(KubeConfig, CurrentContextWithInlineCaAndToken) {
  TempDir dir("kubeconfig");
  std::string path = dir.write("config", two_contexts("    token: s3cret\n", ""));
  std::string ca_path;
  {
    auto cfg = load_kubeconfig(path);
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->address.scheme, "https");
    EXPECT_EQ(cfg->address.host, "10.1.2.3");
    EXPECT_EQ(cfg->address.port, 6443);
    EXPECT_EQ(cfg->address.base_path, "");
    EXPECT_EQ(cfg->ns, "transfers");
    ASSERT_TRUE(cfg->token);
    EXPECT_EQ(*cfg->token->token(), "s3cret");
    EXPECT_FALSE(cfg->insecure_skip_tls_verify);
    ca_path = cfg->ca_file;
    ASSERT_TRUE(fs::exists(ca_path));
    EXPECT_NE(std::string(ca_path).find(dir.path().string()), 0u) << "inline data goes to a private dir";
    struct stat st {};
    ASSERT_EQ(::stat(ca_path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::stat(fs::path(ca_path).parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    auto ca = read_file(ca_path);
    ASSERT_TRUE(ca);
    EXPECT_NE(ca->find("prod-ca"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(ca_path)) << "the private copy goes with the last config";
  EXPECT_FALSE(fs::exists(fs::path(ca_path).parent_path()));
}

TEST(KubeConfig, NamedContextResolvesPathsAgainstTheFilesDirectory) {
  TempDir dir("kubeconfig");
  fs::create_directories(dir.path() / "tokens");
  dir.write("tokens/dev", "dev-token\n");
  std::string path =
      dir.write("config", two_contexts("    token: x\n", "    insecure-skip-tls-verify: true\n"));
  auto cfg = load_kubeconfig(path, "dev");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->address.host, "fd00::1");
  EXPECT_EQ(cfg->address.port, 443);
  EXPECT_EQ(cfg->address.base_path, "/k8s/clusters/c-1");
  EXPECT_TRUE(cfg->insecure_skip_tls_verify);
  EXPECT_EQ(cfg->ns, "default");
  EXPECT_EQ(cfg->client_cert_file, (dir.path() / "certs/dev.crt").string());
  EXPECT_EQ(cfg->client_key_file, (dir.path() / "certs/dev.key").string());
  ASSERT_TRUE(cfg->token);
  EXPECT_EQ(cfg->token->path(), (dir.path() / "tokens/dev").string());
  EXPECT_EQ(*cfg->token->token(), "dev-token");
}

TEST(KubeConfig, InlineClientCertificateAndKeyGoToPrivateFiles) {
  TempDir dir("kubeconfig");
  std::string user =
      "    client-certificate-data: " + b64("CERT") + "\n    client-key-data: " + b64("KEY") + "\n";
  auto cfg = parse_kubeconfig(two_contexts(user, ""), dir.path().string());
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(*read_file(cfg->client_cert_file), "CERT");
  EXPECT_EQ(*read_file(cfg->client_key_file), "KEY");
  EXPECT_FALSE(cfg->token);
}

TEST(KubeConfig, RefusesWhatItCannotHonour) {
  auto exec = parse_kubeconfig(two_contexts("    exec: {command: aws}\n", ""), "/");
  ASSERT_FALSE(exec);
  EXPECT_EQ(exec.error().code, ErrorCode::Unsupported);
  EXPECT_NE(exec.error().message.find("exec"), std::string::npos);

  auto half = parse_kubeconfig(two_contexts("    client-certificate: a.crt\n", ""), "/");
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().message.find("needs its key"), std::string::npos);

  auto no_ctx = parse_kubeconfig(two_contexts("    token: x\n", ""), "/", "staging");
  ASSERT_FALSE(no_ctx);
  EXPECT_NE(no_ctx.error().message.find("no context named 'staging'"), std::string::npos);

  EXPECT_FALSE(parse_kubeconfig("clusters: [", "/"));
  // Found by fuzz/kubeconfig_fuzz.cpp: a list entry that is not a map threw out of parse_kubeconfig.
  EXPECT_FALSE(parse_kubeconfig("current-context: x\ncontexts:\n- just-a-string\n- name: {a: b}\n", "/"));
  EXPECT_FALSE(load_kubeconfig("/nonexistent/kubeconfig"));
}

TEST(KubeConfig, ServerUrls) {
  auto a = parse_server_url("http://127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->scheme, "http");
  EXPECT_EQ(a->port, 8080);
  auto b = parse_server_url("https://api.example.com");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "api.example.com");
  EXPECT_EQ(b->port, 443);
  EXPECT_FALSE(parse_server_url("api.example.com:6443"));
  EXPECT_FALSE(parse_server_url("ftp://x"));
  EXPECT_FALSE(parse_server_url("https://x:99999"));
  EXPECT_FALSE(parse_server_url("https://[fd00::1"));
}

TEST(Base64, DecodesWhatEncodeWroteLineBrokenOrUrlSafeAndRefusesTheRest) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (std::size_t n : {0, 1, 2, 3, 4, 5, 255, 256}) {
    const std::string bytes = all.substr(0, n);
    auto back = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(back) << n << ": " << back.error().message;
    EXPECT_EQ(*back, bytes) << n;
  }
  // Line breaks (PEM-style writers), blanks, and the URL-safe alphabet decode to the same bytes.
  const std::string text = base64_encode(all);
  std::string broken;
  for (std::size_t i = 0; i < text.size(); i += 64) broken += text.substr(i, 64) + "\r\n ";
  auto from_broken = base64_decode(broken);
  ASSERT_TRUE(from_broken) << from_broken.error().message;
  EXPECT_EQ(*from_broken, all);
  std::string url = text;
  std::replace(url.begin(), url.end(), '+', '-');
  std::replace(url.begin(), url.end(), '/', '_');
  auto from_url = base64_decode(url);
  ASSERT_TRUE(from_url) << from_url.error().message;
  EXPECT_EQ(*from_url, all);

  for (const char* bad : {"not base64!", "QUJD*", "QUJDRA=x", "@@@@"}) {
    auto refused = base64_decode(bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("invalid base64"), std::string::npos) << refused.error().message;
  }
}

TEST(TokenSource, FileIsReReadWhenItChangesAndOnlyThen) {
  TempDir dir("token");
  std::string path = dir.write("token", "first\n");
  auto source = TokenSource::from_file(path);
  EXPECT_EQ(*source->token(), "first");
  EXPECT_EQ(*source->token(), "first");
  EXPECT_EQ(source->reads(), 1) << "an unchanged file is not read again";

  dir.write("token", "second-token");  // different size, and a later mtime below
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(1));
  EXPECT_EQ(*source->token(), "second-token");
  EXPECT_EQ(source->reads(), 2);

  // The kubelet swaps the file; while it is missing the last token still goes out.
  fs::remove(path);
  EXPECT_EQ(*source->token(), "second-token");
  dir.write("token", "third-token!");
  EXPECT_EQ(*source->token(), "third-token!");
}

TEST(TokenSource, MissingFileAtStartIsAnError) {
  auto source = TokenSource::from_file("/nonexistent/token");
  EXPECT_FALSE(source->token());
}

class InClusterConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  }
  void TearDown() override {
    ::unsetenv("KUBERNETES_SERVICE_HOST");
    ::unsetenv("KUBERNETES_SERVICE_PORT");
  }
};

TEST_F(InClusterConfig, ReadsServiceAccountFiles) {
  TempDir sa("serviceaccount");
  sa.write("token", "pod-token\n");
  sa.write("ca.crt", "CA");
  sa.write("namespace", "conduit-system");
  auto cfg = load_in_cluster(sa.path().string());
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->server, "https://10.0.0.1:443");
  EXPECT_EQ(cfg->ca_file, (sa.path() / "ca.crt").string());
  EXPECT_EQ(cfg->ns, "conduit-system");
  EXPECT_EQ(*cfg->token->token(), "pod-token");
  EXPECT_EQ(cfg->token->path(), (sa.path() / "token").string()) << "the file, not a copy of its contents";
}

TEST_F(InClusterConfig, Ipv6ServiceHostIsBracketed) {
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00:10::1", 1);
  TempDir sa("serviceaccount");
  sa.write("token", "t");
  sa.write("ca.crt", "CA");
  auto cfg = load_in_cluster(sa.path().string());
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->server, "https://[fd00:10::1]:443");
  EXPECT_EQ(cfg->address.host, "fd00:10::1");
  EXPECT_EQ(cfg->ns, "default");
}

TEST_F(InClusterConfig, OutsideAPodSaysSo) {
  TearDown();
  auto cfg = load_in_cluster("/nonexistent");
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::Unavailable);
  EXPECT_NE(cfg.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

}  // namespace
}  // namespace conduit::kube_client
