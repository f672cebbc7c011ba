// KubeClient against a real kube-apiserver: CRUD, merge patches of /status with the 409 path, the CRDs'
// schema and CEL rules rejecting the invalid examples, token files that rotate, in-cluster config.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "build_paths.h"
#include "kube_api_env.h"
#include "kube_client/client.h"
#include "temp_dir.h"

namespace conduit::kube::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class KubeClientApi : public KubeApiTest {};

TEST_F(KubeClientApi, CreateGetListDelete) {
  auto created = client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "p2p"));
  ASSERT_TRUE(created) << created.error().message;
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());

  auto got = client_->get(jobs(), ns_, "p2p");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["spec"]["source"]["node"], "node-a");

  auto again = client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "p2p"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::AlreadyExists);

  auto list = client_->list(jobs(), ns_);
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ((*list)["items"].size(), 1u);
  EXPECT_FALSE((*list)["metadata"].value("resourceVersion", "").empty());

  ASSERT_TRUE(client_->delete_object(jobs(), ns_, "p2p"));
  auto gone = client_->get(jobs(), ns_, "p2p");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::NotFound);
  EXPECT_NE(gone.error().message.find("not found"), std::string::npos) << gone.error().message;
}

TEST_F(KubeClientApi, ListJoinsPages) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "job-" + std::to_string(i))));
  }
  kube_client::ListOptions small;
  small.page_size = 2;
  auto list = client_->list(jobs(), ns_, small);
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ((*list)["items"].size(), 5u);
  EXPECT_FALSE((*list)["metadata"].contains("continue"));
}

TEST_F(KubeClientApi, StatusMergePatchLandsAndAStaleResourceVersionIsRetried) {
  auto created = client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "status"));
  ASSERT_TRUE(created) << created.error().message;
  const json stale = *created;

  // The status subresource takes the status; the object's spec is untouched.
  auto running = client_->merge_patch(jobs(), ns_, "status", {{"status", {{"phase", "Running"}}}}, "status");
  ASSERT_TRUE(running) << running.error().message;
  EXPECT_EQ((*running)["status"]["phase"], "Running");
  EXPECT_EQ((*running)["spec"], stale["spec"]);

  // A precondition on a resourceVersion that is no longer current: 409 with the server's message.
  json conflicting = {{"metadata", {{"resourceVersion", stale["metadata"]["resourceVersion"]}}},
                      {"status", {{"phase", "Failed"}}}};
  auto conflict = client_->merge_patch(jobs(), ns_, "status", conflicting, "status");
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, ErrorCode::Conflict);
  EXPECT_NE(conflict.error().message.find("the object has been modified"), std::string::npos)
      << conflict.error().message;

  // The retrying patch starts from the stale copy, gets the 409, re-reads, and lands on the second try.
  auto before = client_->conflict_retries();
  int built = 0;
  auto patched = client_->patch_with_retry(
      jobs(), ns_, "status", "status",
      [&](const json& current) -> std::optional<json> {
        ++built;
        std::string phase = current.value("/status/phase"_json_pointer, "");
        EXPECT_EQ(phase, built == 1 ? "" : "Running");
        return json{{"status", {{"phase", "Succeeded"}, {"bytesTransferred", 268435456}}}};
      },
      &stale);
  ASSERT_TRUE(patched) << patched.error().message;
  EXPECT_EQ(built, 2);
  EXPECT_EQ(client_->conflict_retries(), before + 1);
  auto got = client_->get(jobs(), ns_, "status");
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)["status"]["phase"], "Succeeded");
  EXPECT_EQ((*got)["status"]["bytesTransferred"], 268435456);
}

TEST_F(KubeClientApi, InvalidExamplesAreRejectedWithTheirMessage) {
  int checked = 0;
  for (const auto& entry :
       fs::directory_iterator(std::string(conduit::testing::source_dir()) + "/crds/examples")) {
    std::string file = entry.path().filename().string();
    if (file.rfind("invalid-", 0) != 0) continue;
    std::string expect = expected_message(file);
    ASSERT_FALSE(expect.empty()) << file << " has no '# expect:' line";
    auto created = client_->create(jobs(), ns_, example(file, ns_));
    ASSERT_FALSE(created) << file << " was accepted";
    EXPECT_EQ(created.error().code, ErrorCode::InvalidArgument) << file;
    EXPECT_NE(created.error().message.find(expect), std::string::npos)
        << file << ": expected '" << expect << "' in: " << created.error().message;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_F(KubeClientApi, ValidExamplesAreAccepted) {
  for (const char* file : {"point-to-point.yaml", "fanout.yaml", "file-load.yaml"}) {
    auto created = client_->create(jobs(), ns_, example(file, ns_));
    EXPECT_TRUE(created) << file << ": " << created.error().message;
  }
}

TEST_F(KubeClientApi, RotatedTokenFileIsUsedOnTheNextRequest) {
  conduit::testing::TempDir dir("kube-token");
  std::string token_path = dir.write("token", "not-a-valid-token\n");
  kube_client::KubeConfig cfg = api_->config();
  cfg.token = kube_client::TokenSource::from_file(token_path);
  kube_client::KubeClient client(cfg);

  auto refused = client.list(kube_client::resources::namespaces(), "");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::RemoteAccess);
  EXPECT_NE(refused.error().message.find("401"), std::string::npos) << refused.error().message;

  dir.write("token", api_->token() + "\n");
  fs::last_write_time(token_path, fs::last_write_time(token_path) + std::chrono::seconds(1));
  auto listed = client.list(kube_client::resources::namespaces(), "");
  EXPECT_TRUE(listed) << listed.error().message;
}

TEST_F(KubeClientApi, InClusterConfigTalksToTheServer) {
  conduit::testing::TempDir sa("serviceaccount");
  sa.write("token", api_->token());
  fs::copy_file(api_->dir() + "/certs/apiserver.crt", sa.path() / "ca.crt");
  sa.write("namespace", ns_);
  kube_client::KubeConfig from_file = api_->config();
  ::setenv("KUBERNETES_SERVICE_HOST", from_file.address.host.c_str(), 1);
  ::setenv("KUBERNETES_SERVICE_PORT", std::to_string(from_file.address.port).c_str(), 1);
  auto cfg = kube_client::load_in_cluster(sa.path().string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->ns, ns_);
  kube_client::KubeClient client(*cfg);
  auto ready = client.get_raw("/readyz");
  ASSERT_TRUE(ready) << ready.error().message;
  EXPECT_EQ(*ready, "ok");
  EXPECT_TRUE(client.list(jobs(), cfg->ns));
}

TEST_F(KubeClientApi, WrongCaIsRefused) {
  conduit::testing::TempDir dir("kube-ca");
  kube_client::KubeConfig cfg = api_->config();
  // Any self-signed certificate that did not sign the server's: the kubeconfig's own CA file does not
  // contain it, so use a certificate from the system store directory if one exists, else skip.
  std::string other;
  for (const char* candidate : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}) {
    if (fs::exists(candidate)) other = candidate;
  }
  if (other.empty()) GTEST_SKIP() << "no system CA bundle to use as the wrong CA";
  cfg.ca_file = other;
  kube_client::KubeClient client(cfg);
  auto refused = client.get_raw("/readyz");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::PeerUnreachable);
  EXPECT_NE(refused.error().message.find("does not verify"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace conduit::kube::testing
