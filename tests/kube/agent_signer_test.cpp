// The agent signer: agents ask for a conduit:agent:<node> client certificate with a CertificateSigningRequest
// made with their pod's own service-account token, and the controller signs only what proves it comes from
// that node's agent. Against a real API server: a Node, a pod on it, tokens bound to pods (TokenRequest),
// CSRs created as those tokens, the signer watching as the controller would. The rules alone need no server.
#include "controller/kube/agent_signer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "conduit/common/base64.h"
#include "controller/kube/agent_csr_review.h"
#include "controller/kube/signer_ca.h"
#include "csr_pki.h"
#include "kube_api_env.h"
#include "temp_dir.h"
#include "tls_files.h"

namespace conduit::kube::testing {
namespace {

using conduit::testing::TempDir;
using conduit::testing::TestCa;
using nlohmann::json;
using std::chrono::seconds;

const kube_client::Resource& csrs() { return kube_client::resources::certificate_signing_requests(); }

std::string agent_cn(const std::string& node) {
  return std::string(kube_client::kAgentCommonNamePrefix) + node;
}

// The condition of `type`, or null.
json condition(const json& csr, const std::string& type) {
  for (const json& c : csr.value("/status/conditions"_json_pointer, json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

std::string certificate_pem(const json& csr) {
  auto pem = base64_decode(csr.value("/status/certificate"_json_pointer, std::string()));
  return pem ? *pem : std::string();
}

// ---- the rules, without a server
// ---------------------------------------------------------------------------

// A CSR as the API server stores it for the agent pod's token: spec.username and spec.extra are the server's.
json server_side_csr(const std::string& request_pem, const std::string& node = "node-a") {
  return {{"apiVersion", "certificates.k8s.io/v1"},
          {"kind", "CertificateSigningRequest"},
          {"metadata", {{"name", "csr"}}},
          {"spec",
           {{"signerName", kube_client::kAgentSignerName},
            {"username", "system:serviceaccount:conduit:conduit-agent"},
            {"extra", {{kNodeNameExtra, {node}}, {kPodNameExtra, {"agent-x"}}}},
            {"usages", {"client auth", "digital signature"}},
            {"request", base64(request_pem)}}}};
}

const ServiceAccountRef kAgent{"conduit", "conduit-agent"};

TEST(AgentCsrReview, TheAgentsOwnRequestIsApproved) {
  auto key = make_key("ec:P-256");
  const CsrVerdict v =
      review_agent_csr(server_side_csr(make_request(key.get(), {{"CN", agent_cn("node-a")}})), kAgent);
  EXPECT_TRUE(v.approved) << v.message;
  EXPECT_EQ(v.node, "node-a");
  EXPECT_NE(v.message.find("node \"node-a\" (pod conduit/agent-x"), std::string::npos) << v.message;
}

TEST(AgentCsrReview, RequestNotSignedByItsKeyIsDenied) {
  auto key = make_key("ec:P-256");
  auto other = make_key("ec:P-256");
  const CsrVerdict v = review_agent_csr(
      server_side_csr(make_request(key.get(), {{"CN", agent_cn("node-a")}}, other.get())), kAgent);
  EXPECT_FALSE(v.approved);
  EXPECT_EQ(v.message, "the request's signature does not verify against its own public key");
}

TEST(AgentCsrReview, OnlyP256P384AndRsaOfAtLeast2048BitsAreSigned) {
  for (const char* kind : {"ec:P-384", "rsa:2048"}) {
    auto key = make_key(kind);
    const CsrVerdict v =
        review_agent_csr(server_side_csr(make_request(key.get(), {{"CN", agent_cn("node-a")}})), kAgent);
    EXPECT_TRUE(v.approved) << kind << ": " << v.message;
  }
  for (const auto& [kind, says] :
       {std::pair{"rsa:1024", "RSA of 1024 bits"}, std::pair{"ec:P-521", "curve secp521r1"},
        std::pair{"ed25519", "ED25519"}}) {
    auto key = make_key(kind);
    const CsrVerdict v =
        review_agent_csr(server_side_csr(make_request(key.get(), {{"CN", agent_cn("node-a")}})), kAgent);
    EXPECT_FALSE(v.approved) << kind;
    EXPECT_NE(v.message.find(says), std::string::npos) << v.message;
  }
}

TEST(AgentCsrReview, ATokenNotBoundToAPodProvesNoNode) {
  auto key = make_key("ec:P-256");
  json csr = server_side_csr(make_request(key.get(), {{"CN", agent_cn("node-a")}}));
  csr["spec"]["extra"].erase(kNodeNameExtra);
  CsrVerdict v = review_agent_csr(csr, kAgent);
  EXPECT_FALSE(v.approved);
  EXPECT_NE(v.message.find("names no node"), std::string::npos) << v.message;

  csr["spec"]["extra"][kNodeNameExtra] = {"node-a", "node-b"};
  v = review_agent_csr(csr, kAgent);
  EXPECT_FALSE(v.approved);
  EXPECT_NE(v.message.find("exactly one node name"), std::string::npos) << v.message;
}

TEST(AgentCsrReview, PhaseFollowsTheConditions) {
  json csr = {{"spec", {{"signerName", kube_client::kAgentSignerName}}}};
  EXPECT_EQ(csr_phase(csr), CsrPhase::Pending);
  EXPECT_EQ(csr_phase({{"spec", {{"signerName", "kubernetes.io/kube-apiserver-client"}}}}),
            CsrPhase::NotOurs);
  csr["status"]["conditions"] = {{{"type", "Approved"}, {"status", "True"}}};
  EXPECT_EQ(csr_phase(csr), CsrPhase::ApprovedUnsigned);
  csr["status"]["certificate"] = "Y2VydA==";
  EXPECT_EQ(csr_phase(csr), CsrPhase::Finished);
  for (const char* type : {"Denied", "Failed"}) {
    json decided = {{"spec", {{"signerName", kube_client::kAgentSignerName}}},
                    {"status", {{"conditions", {{{"type", type}, {"status", "True"}}}}}}};
    EXPECT_EQ(csr_phase(decided), CsrPhase::Finished) << type;
  }
}

TEST(SignerCa, RefusesAKeyThatIsNotTheCertificatesAndACertificateThatIsNoCa) {
  TempDir dir;
  TestCa ca(dir.path() / "ca", "agent-ca");
  TestCa other(dir.path() / "other", "other-ca");
  const auto leaf = ca.issue("not-a-ca", "DNS:not-a-ca");
  ASSERT_TRUE(ca.ok() && other.ok());
  EXPECT_TRUE(SignerCa::load(ca.cert(), ca.key()));
  auto mismatched = SignerCa::load(ca.cert(), other.key());
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message.find("is not the key of the certificate"), std::string::npos)
      << mismatched.error().message;
  auto not_ca = SignerCa::load(leaf.cert, leaf.key);
  ASSERT_FALSE(not_ca);
  EXPECT_NE(not_ca.error().message.find("is not a CA"), std::string::npos) << not_ca.error().message;
}

TEST(SignerCa, IssuesUnderACaWithoutKeyIdentifiers) {
  TempDir dir;
  const std::string cert = (dir.path() / "ca.crt").string();
  const std::string key = (dir.path() / "ca.key").string();
  // What an old or hand-made CA may look like: no subjectKeyIdentifier for the leaf's authority key id.
  ASSERT_EQ(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout '" +
                         key + "' -out '" + cert +
                         "' -days 1 -subj /CN=bare-ca -addext subjectKeyIdentifier=none "
                         "-addext authorityKeyIdentifier=none -addext basicConstraints=critical,CA:TRUE "
                         ">/dev/null 2>&1")
                            .c_str()),
            0);
  auto ca = SignerCa::load(cert, key);
  ASSERT_TRUE(ca) << ca.error().message;
  auto agent_key = make_key("ec:P-256");
  auto issued = ca->issue(make_request(agent_key.get(), {{"CN", agent_cn("node-a")}}), seconds(3600));
  ASSERT_TRUE(issued) << issued.error().message;
  const CertFacts facts = inspect(issued->pem, cert);
  EXPECT_EQ(facts.verify_error, "");
  EXPECT_TRUE(facts.key_ids);
}

// ---- against the API server
// --------------------------------------------------------------------------------

class AgentSignerApi : public KubeApiTest {
 protected:
  void SetUp() override {
    KubeApiTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_TRUE(ca_.ok()) << "openssl could not make the signer CA";
    const std::string suffix = ns_.substr(ns_.rfind('-') + 1);  // cluster-scoped names are unique per test
    node_a_ = "node-a-" + suffix;
    node_b_ = "node-b-" + suffix;

    for (const char* sa : {"conduit-agent", "other"}) {
      ASSERT_TRUE(client_->create({"", "v1", "ServiceAccount", "serviceaccounts", true}, ns_,
                                  {{"apiVersion", "v1"},
                                   {"kind", "ServiceAccount"},
                                   {"metadata", {{"name", sa}, {"namespace", ns_}}}}));
    }
    make_cluster_object({"", "v1", "Node", "nodes", false},
                        {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node_a_}}}});
    make_cluster_object({"rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false},
                        {{"apiVersion", "rbac.authorization.k8s.io/v1"},
                         {"kind", "ClusterRole"},
                         {"metadata", {{"name", ns_ + "-csr"}}},
                         {"rules",
                          {{{"apiGroups", {"certificates.k8s.io"}},
                            {"resources", {"certificatesigningrequests"}},
                            {"verbs", {"create", "get"}}}}}});
    make_cluster_object(
        {"rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false},
        {{"apiVersion", "rbac.authorization.k8s.io/v1"},
         {"kind", "ClusterRoleBinding"},
         {"metadata", {{"name", ns_ + "-csr"}}},
         {"roleRef",
          {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "ClusterRole"}, {"name", ns_ + "-csr"}}},
         {"subjects",
          {{{"kind", "ServiceAccount"}, {"name", "conduit-agent"}, {"namespace", ns_}},
           {{"kind", "ServiceAccount"}, {"name", "other"}, {"namespace", ns_}}}}});
    // Both pods run on node-a: the agent, and another workload with a service account of its own.
    agent_ = client_as(token_for("conduit-agent", make_pod("agent", "conduit-agent")));
    other_ = client_as(token_for("other", make_pod("intruder", "other")));
  }

  void TearDown() override {
    signer_.reset();
    if (!client_) return;
    for (const auto& [resource, name] : cleanup_) (void)client_->delete_object(resource, "", name);
  }

  void make_cluster_object(const kube_client::Resource& r, const json& object) {
    auto created = client_->create(r, "", object);
    ASSERT_TRUE(created) << created.error().message;
    cleanup_.emplace_back(r, object["metadata"]["name"]);
  }

  json make_pod(const std::string& name, const std::string& sa) {
    auto pod = client_->create(
        kube_client::resources::pods(), ns_,
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata", {{"name", name}, {"namespace", ns_}}},
         {"spec",
          {{"nodeName", node_a_},
           {"serviceAccountName", sa},
           {"containers", {{{"name", "main"}, {"image", "registry.invalid/conduit-agent:test"}}}}}}});
    EXPECT_TRUE(pod) << pod.error().message;
    return pod ? *pod : json::object();
  }

  // A token bound to `pod` (what the kubelet projects into it): the API server then adds the pod's node to
  // the user info of every request made with it.
  std::string token_for(const std::string& sa, const json& pod) {
    // POST .../serviceaccounts/SA/token: the collection path of a "resource" that is the subresource.
    const kube_client::Resource token_requests{"", "v1", "TokenRequest", "serviceaccounts/" + sa + "/token",
                                               true};
    auto r = client_->create(token_requests, ns_,
                             {{"apiVersion", "authentication.k8s.io/v1"},
                              {"kind", "TokenRequest"},
                              {"spec",
                               {{"expirationSeconds", 600},
                                {"boundObjectRef",
                                 {{"kind", "Pod"},
                                  {"apiVersion", "v1"},
                                  {"name", pod["metadata"]["name"]},
                                  {"uid", pod["metadata"]["uid"]}}}}}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? r->value("/status/token"_json_pointer, std::string()) : std::string();
  }

  std::unique_ptr<kube_client::KubeClient> client_as(const std::string& token) {
    kube_client::KubeConfig config = api_->config();
    config.token = kube_client::TokenSource::fixed(token);
    config.client_cert_file.clear();
    config.client_key_file.clear();
    return std::make_unique<kube_client::KubeClient>(config);
  }

  AgentSigner& start_signer(seconds max_lifetime = seconds(86400)) {
    AgentSignerOptions options;
    options.ca_cert_file = ca_.cert();
    options.ca_key_file = ca_.key();
    options.agent = {ns_, "conduit-agent"};
    options.max_lifetime = max_lifetime;
    options.label_selector = "conduit.dev/test=" + ns_;
    signer_ = std::make_unique<AgentSigner>(*client_, options);
    signer_->start();
    return *signer_;
  }

  // Creates a CSR as `as` (retrying while RBAC for the new binding is not in force yet).
  Result<json> submit(kube_client::KubeClient& as, const std::string& name, const std::string& request_pem,
                      const std::vector<std::string>& usages = {"client auth", "digital signature"},
                      int expiration_seconds = 0,
                      const std::string& signer_name = kube_client::kAgentSignerName) {
    json csr = {
        {"apiVersion", "certificates.k8s.io/v1"},
        {"kind", "CertificateSigningRequest"},
        {"metadata", {{"name", ns_ + "-" + name}, {"labels", {{"conduit.dev/test", ns_}}}}},
        {"spec", {{"signerName", signer_name}, {"usages", usages}, {"request", base64(request_pem)}}}};
    if (expiration_seconds > 0) csr["spec"]["expirationSeconds"] = expiration_seconds;
    Result<json> created = make_error(ErrorCode::RemoteAccess, "not tried");
    eventually(
        [&] {
          created = as.create(csrs(), "", csr);
          return created.ok() || created.error().code != ErrorCode::RemoteAccess;
        },
        seconds(10), std::chrono::milliseconds(100));
    if (created) cleanup_.emplace_back(csrs(), ns_ + "-" + name);
    return created;
  }

  Result<json> submit_for(kube_client::KubeClient& as, const std::string& name, const std::string& node,
                          int expiration = 0) {
    auto key = make_key("ec:P-256");
    return submit(as, name, make_request(key.get(), {{"CN", agent_cn(node)}}),
                  {"client auth", "digital signature"}, expiration);
  }

  // The CSR once the signer is done with it (Denied, Failed, or Approved with a certificate); null if it
  // never gets there.
  json settled(const json& created) {
    const std::string name = created["metadata"]["name"];
    json csr;
    eventually(
        [&] {
          auto got = client_->get(csrs(), "", name);
          if (got) csr = *got;
          return got && csr_phase(*got) == CsrPhase::Finished;
        },
        seconds(10));
    return csr_phase(csr) == CsrPhase::Finished ? csr : json();
  }

  // Creates a CSR that breaks one rule and returns the Denied condition's message.
  std::string denial_of(const Result<json>& created) {
    if (!created) return "not created: " + created.error().message;
    const json csr = settled(*created);
    const json denied = condition(csr, "Denied");
    if (denied.is_null()) return "not denied: " + csr.dump();
    EXPECT_EQ(denied.value("reason", ""), "AgentSignerDenied");
    EXPECT_TRUE(condition(csr, "Approved").is_null());
    EXPECT_TRUE(certificate_pem(csr).empty());
    return denied.value("message", "");
  }

  TempDir dir_;
  TestCa ca_{dir_.path() / "ca", "agent-ca"};
  std::string node_a_, node_b_;
  std::unique_ptr<kube_client::KubeClient> agent_, other_;
  std::unique_ptr<AgentSigner> signer_;
  std::vector<std::pair<kube_client::Resource, std::string>> cleanup_;
};

TEST_F(AgentSignerApi, AgentCsrIsApprovedAndSignedForItsNode) {
  AgentSigner& signer = start_signer();
  auto created = submit_for(*agent_, "good", node_a_, /*expiration=*/3600);
  ASSERT_TRUE(created) << created.error().message;
  const json csr = settled(*created);
  ASSERT_FALSE(csr.is_null()) << "not signed";

  const json approved = condition(csr, "Approved");
  ASSERT_FALSE(approved.is_null()) << csr.dump();
  EXPECT_EQ(approved.value("reason", ""), "AgentSignerApproved");
  const std::string message = approved.value("message", "");
  EXPECT_NE(message.find("node \"" + node_a_ + "\""), std::string::npos) << message;
  EXPECT_NE(message.find("pod " + ns_ + "/agent"), std::string::npos) << message;

  const CertFacts cert = inspect(certificate_pem(csr), ca_.cert());
  ASSERT_TRUE(cert.parsed);
  EXPECT_EQ(cert.verify_error, "") << "verifies against the signer CA for TLS client authentication";
  EXPECT_EQ(cert.subject, "CN=" + agent_cn(node_a_));
  EXPECT_TRUE(cert.client_auth);
  EXPECT_FALSE(cert.server_auth);
  EXPECT_FALSE(cert.is_ca);
  EXPECT_TRUE(cert.basic_constraints_critical);
  EXPECT_TRUE(cert.digital_signature && cert.key_usage_critical);
  EXPECT_FALSE(cert.key_encipherment) << "an EC key enciphers nothing";
  EXPECT_TRUE(cert.key_ids);
  EXPECT_FALSE(cert.has_san);
  EXPECT_GE(cert.serial_bits, 100) << "a random 128-bit serial";
  EXPECT_NEAR(cert.lifetime_seconds, 3600 + 300, 2) << "as asked, from 5 minutes back";

  // Done is done: handling it again writes nothing. (Counted once the write has returned, a moment after the
  // server has it.)
  EXPECT_TRUE(eventually([&] { return signer.stats().issued == 1; }, seconds(5)));
  EXPECT_EQ(signer.stats().denied, 0u);
  signer.handle(csr);
  EXPECT_EQ((*client_->get(csrs(), "", csr["metadata"]["name"]))["metadata"]["resourceVersion"],
            csr["metadata"]["resourceVersion"]);
  EXPECT_EQ(signer.stats().issued, 1u);
}

TEST_F(AgentSignerApi, CsrForAnotherNodeIsDenied) {
  AgentSigner& signer = start_signer();
  EXPECT_EQ(
      denial_of(submit_for(*agent_, "node-b", node_b_)),
      "the CSR asks for node \"" + node_b_ + "\" but the requesting pod runs on node \"" + node_a_ + "\"");
  EXPECT_TRUE(eventually([&] { return signer.stats().denied == 1; }, seconds(5)));
  EXPECT_EQ(signer.stats().issued, 0u);
}

TEST_F(AgentSignerApi, CsrFromAnotherServiceAccountIsDenied) {
  start_signer();
  EXPECT_EQ(denial_of(submit_for(*other_, "intruder", node_a_)),
            "the CSR was made by \"system:serviceaccount:" + ns_ +
                ":other\", not by the agent service account \"system:serviceaccount:" + ns_ +
                ":conduit-agent\"");
}

TEST_F(AgentSignerApi, SubjectWithMoreThanTheCommonNameIsDenied) {
  start_signer();
  auto key = make_key("ec:P-256");
  const std::string message = denial_of(
      submit(*agent_, "org", make_request(key.get(), {{"O", "system:masters"}, {"CN", agent_cn(node_a_)}})));
  EXPECT_EQ(message, "the request's subject must be exactly CN=" + agent_cn(node_a_) +
                         " and nothing else, got \"CN=" + agent_cn(node_a_) + ",O=system:masters\"");
}

TEST_F(AgentSignerApi, ServerAuthUsageIsDenied) {
  start_signer();
  auto key = make_key("ec:P-256");
  const std::string message =
      denial_of(submit(*agent_, "server", make_request(key.get(), {{"CN", agent_cn(node_a_)}}),
                       {"client auth", "server auth"}));
  EXPECT_NE(message.find("\"server auth\" is not allowed"), std::string::npos) << message;
}

TEST_F(AgentSignerApi, RequestNotSignedByItsKeyNeverGetsACertificate) {
  // The API server itself refuses such a CSR; the signer's own check is AgentCsrReview's test above.
  start_signer();
  auto key = make_key("ec:P-256");
  auto other = make_key("ec:P-256");
  auto created = submit(*agent_, "forged", make_request(key.get(), {{"CN", agent_cn(node_a_)}}, other.get()));
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code, ErrorCode::InvalidArgument) << created.error().message;
}

TEST_F(AgentSignerApi, CsrOfAnotherSignerIsLeftUntouched) {
  AgentSigner& signer = start_signer();
  auto key = make_key("ec:P-256");
  auto foreign = submit(*agent_, "foreign", make_request(key.get(), {{"CN", agent_cn(node_a_)}}),
                        {"client auth", "digital signature"}, 0, "example.com/other");
  ASSERT_TRUE(foreign) << foreign.error().message;
  // A CSR created after it is signed: the signer has seen the foreign one by then.
  auto good = submit_for(*agent_, "after", node_a_);
  ASSERT_TRUE(good) << good.error().message;
  ASSERT_FALSE(settled(*good).is_null());
  signer.handle(*foreign);

  auto now = client_->get(csrs(), "", (*foreign)["metadata"]["name"]);
  ASSERT_TRUE(now) << now.error().message;
  EXPECT_EQ((*now)["metadata"]["resourceVersion"], (*foreign)["metadata"]["resourceVersion"]);
  EXPECT_FALSE((*now).contains("status") && (*now)["status"].contains("conditions")) << now->dump();
  EXPECT_EQ(signer.stats().denied, 0u);
}

TEST_F(AgentSignerApi, LifetimeIsCappedByTheSignerAndByItsCa) {
  {
    start_signer(/*max_lifetime=*/seconds(1200));
    auto rsa = make_key("rsa:2048");
    auto created = submit(*agent_, "capped", make_request(rsa.get(), {{"CN", agent_cn(node_a_)}}),
                          {"client auth", "key encipherment"}, /*expiration_seconds=*/7200);
    ASSERT_TRUE(created) << created.error().message;
    const CertFacts cert = inspect(certificate_pem(settled(*created)), ca_.cert());
    EXPECT_EQ(cert.verify_error, "");
    EXPECT_NEAR(cert.lifetime_seconds, 1200 + 300, 2) << "the signer's maximum, not the 2 h asked";
    EXPECT_TRUE(cert.key_encipherment) << "an RSA key may encipher";
    signer_.reset();
  }
  // The CA lives 2 days; the signer would give 3.
  start_signer(/*max_lifetime=*/seconds(3 * 86400));
  auto created = submit_for(*agent_, "ca-capped", node_a_);
  ASSERT_TRUE(created) << created.error().message;
  const CertFacts cert = inspect(certificate_pem(settled(*created)), ca_.cert());
  EXPECT_EQ(cert.verify_error, "");
  EXPECT_EQ(cert.not_after, not_after_of_file(ca_.cert()));
}

TEST_F(AgentSignerApi, ApprovalByHandDoesNotLiftTheRules) {
  AgentSigner& signer = start_signer();
  signer.stop();  // approve first, then let the signer see it
  auto created = submit_for(*agent_, "hand", node_b_);
  ASSERT_TRUE(created) << created.error().message;
  json approved = *created;
  approved["status"]["conditions"] = {
      {{"type", "Approved"}, {"status", "True"}, {"reason", "ByHand"}, {"message", "looks fine to me"}}};
  ASSERT_TRUE(client_->replace(csrs(), "", approved["metadata"]["name"], approved, "approval"));
  signer.start();

  const json csr = settled(*created);
  const json failed = condition(csr, "Failed");
  ASSERT_FALSE(failed.is_null()) << csr.dump();
  EXPECT_EQ(failed.value("reason", ""), "AgentSignerFailed");
  EXPECT_NE(failed.value("message", "").find("asks for node \"" + node_b_ + "\""), std::string::npos);
  EXPECT_TRUE(certificate_pem(csr).empty());
  EXPECT_TRUE(eventually([&] { return signer.stats().failed == 1; }, seconds(5)));
}

TEST_F(AgentSignerApi, RotatedCaSignsTheNextCertificate) {
  start_signer();
  auto first = submit_for(*agent_, "first", node_a_);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(inspect(certificate_pem(settled(*first)), ca_.cert()).verify_error, "");

  // What cert-manager does: new files in the same place.
  TestCa next(dir_.path() / "next", "agent-ca-2");
  ASSERT_TRUE(next.ok());
  const std::string old_ca = dir_.write("old-ca.crt", "");
  std::filesystem::copy_file(ca_.cert(), old_ca, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(next.cert(), ca_.cert(), std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(next.key(), ca_.key(), std::filesystem::copy_options::overwrite_existing);

  auto second = submit_for(*agent_, "second", node_a_);
  ASSERT_TRUE(second) << second.error().message;
  const std::string pem = certificate_pem(settled(*second));
  EXPECT_EQ(inspect(pem, next.cert()).verify_error, "");
  EXPECT_NE(inspect(pem, old_ca).verify_error, "");
}

}  // namespace
}  // namespace conduit::kube::testing
