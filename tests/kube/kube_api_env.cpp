#include "kube_api_env.h"

#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "build_paths.h"
#include "conduit/common/text.h"
#include "controller/store/yaml_json_reader.h"

namespace conduit::kube::testing {
namespace {

using controller::load_yaml_file;

using nlohmann::json;

const std::string kSource = conduit::testing::source_dir();

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

KubeApi* g_api = nullptr;

// What kube-env.sh would run: $KUBE_APISERVER and $ETCD when set, else what scripts/kube-tools.sh built.
bool tools_built() {
  const char* api = std::getenv("KUBE_APISERVER");
  const char* etcd = std::getenv("ETCD");
  if (api != nullptr && etcd != nullptr && ::access(api, X_OK) == 0 && ::access(etcd, X_OK) == 0) return true;
  return std::system(
             (shell_quote(kSource + "/scripts/kube-tools.sh") + " --print >/dev/null 2>&1").c_str()) == 0;
}

class KubeApiEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { KubeApi::shutdown(); }
};
[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new KubeApiEnvironment);

}  // namespace

KubeApi& KubeApi::get() {
  if (g_api == nullptr) {
    g_api = new KubeApi;
    g_api->start();
  }
  return *g_api;
}

void KubeApi::shutdown() {
  if (g_api == nullptr) return;
  g_api->stop();
  delete g_api;
  g_api = nullptr;
}

void KubeApi::start() {
  if (const char* reuse = std::getenv("CONDUIT_KUBE_ENV_DIR"); reuse != nullptr && *reuse != '\0') {
    // Started by the ctest fixture (kube_env_fixture.sh), which starts nothing without the binaries.
    dir_ = reuse;
    if (!std::filesystem::exists(kubeconfig())) {
      if (!tools_built()) {
        tools_missing_ = true;
      } else {
        start_error_ = "no kubeconfig in CONDUIT_KUBE_ENV_DIR=" + dir_ + " (did kube_env_start fail?)";
      }
      return;
    }
  } else {
    if (!tools_built()) {
      tools_missing_ = true;
      return;
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "conduit-kube-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      start_error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    owned_ = true;
    std::string cmd = shell_quote(kSource + "/scripts/kube-env.sh") + " start " + shell_quote(dir_) + " >" +
                      shell_quote(dir_ + "/start.log") + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      auto log = kube_client::read_file(dir_ + "/start.log");
      start_error_ = "scripts/kube-env.sh start failed: " + (log ? *log : std::string("(no log)"));
      return;
    }
    // A test process that crashes or is killed never reaches TearDown: a watchdog stops etcd and the
    // apiserver once this process is gone (after a normal TearDown it finds nothing left to stop).
    std::string watchdog = "( while kill -0 " + std::to_string(::getpid()) +
                           " 2>/dev/null; do sleep 1; done; " +
                           shell_quote(kSource + "/scripts/kube-env.sh") + " stop " + shell_quote(dir_) +
                           "; rm -rf " + shell_quote(dir_) + " ) </dev/null >/dev/null 2>&1 &";
    if (std::system(watchdog.c_str()) != 0) std::fprintf(stderr, "kube-env watchdog did not start\n");
  }
  if (Status s = apply_crds(); !s) start_error_ = "applying CRDs: " + s.error().message;
}

void KubeApi::stop() {
  if (!owned_) return;
  std::string cmd =
      shell_quote(kSource + "/scripts/kube-env.sh") + " stop " + shell_quote(dir_) + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "kube-env stop %s failed\n", dir_.c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

kube_client::KubeConfig KubeApi::config() const {
  auto cfg = kube_client::load_kubeconfig(kubeconfig());
  if (!cfg) {
    ADD_FAILURE() << cfg.error().message;
    return {};
  }
  return *cfg;
}

std::string KubeApi::token() const {
  auto t = kube_client::read_file(dir_ + "/token");
  return t ? std::string(trim(*t)) : std::string();
}

Status KubeApi::apply_crds() {
  kube_client::KubeClient client(config());
  const kube_client::Resource& crds = kube_client::resources::custom_resource_definitions();
  for (const char* file : {"transferjobs.conduit.dev.yaml", "fabricnodes.conduit.dev.yaml"}) {
    auto docs = load_yaml_file(kSource + "/crds/" + file);
    if (!docs) return docs.error();
    for (const json& crd : *docs) {
      auto created = client.create(crds, "", crd);
      if (!created && created.error().code != ErrorCode::AlreadyExists) return created.error();
      std::string name = crd["metadata"]["name"];
      bool established = eventually(
          [&] {
            auto got = client.get(crds, "", name);
            if (!got) return false;
            for (const auto& c : got->value("/status/conditions"_json_pointer, json::array())) {
              if (c.value("type", "") == "Established" && c.value("status", "") == "True") return true;
            }
            return false;
          },
          std::chrono::seconds(30));
      if (!established) return make_error(ErrorCode::TimedOut, name + " not Established after 30 s");
    }
  }
  // Established is set before the new resource is served everywhere: wait until a LIST answers.
  for (const kube_client::Resource* r :
       {&kube_client::resources::transfer_jobs(), &kube_client::resources::fabric_nodes()}) {
    if (!eventually([&] { return client.list(*r, "").ok(); }, std::chrono::seconds(30))) {
      return make_error(ErrorCode::TimedOut, r->plural + " not served 30 s after Established");
    }
  }
  return {};
}

void KubeApiTest::SetUp() {
  api_ = &KubeApi::get();
  if (api_->tools_missing()) GTEST_SKIP() << kNoApiServer;
  ASSERT_TRUE(api_->start_error().empty()) << api_->start_error();
  client_ = std::make_unique<kube_client::KubeClient>(api_->config());

  // A namespace per test, named after it (DNS-1123: lowercase, digits, '-', at most 63).
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string ns = "t-";
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c)) && ns.back() != '-') ns += '-';
    ns += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  }
  ns = ns.substr(0, 55);
  while (!ns.empty() && ns.back() == '-') ns.pop_back();
  ns += "-" + std::to_string(std::random_device{}() % 100000);
  ns_ = ns;
  auto created =
      client_->create(kube_client::resources::namespaces(), "",
                      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
  ASSERT_TRUE(created) << created.error().message;
}

json example(const std::string& file, const std::string& ns, const std::string& name) {
  auto docs = load_yaml_file(kSource + "/crds/examples/" + file);
  if (!docs || docs->empty()) {
    ADD_FAILURE() << "cannot load example " << file;
    return {};
  }
  json obj = (*docs)[0];
  obj["metadata"]["namespace"] = ns;
  if (!name.empty()) obj["metadata"]["name"] = name;
  return obj;
}

std::string expected_message(const std::string& file) {
  auto text = kube_client::read_file(kSource + "/crds/examples/" + file);
  if (!text) return {};
  const std::string marker = "# expect: ";
  auto at = text->find(marker);
  if (at == std::string::npos) return {};
  auto end = text->find('\n', at);
  return std::string(trim(std::string_view(*text).substr(at + marker.size(), end - at - marker.size())));
}

}  // namespace conduit::kube::testing
