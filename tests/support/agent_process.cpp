#include "agent_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "file_bytes.h"

namespace conduit::testing {

AgentProcess::AgentProcess(const AgentOptions& options) : token_(options.token) {
  std::random_device rd;
  dir_ = std::filesystem::temp_directory_path() /
         ("conduit-agent-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
  data_dir_ = dir_ / "data";
  std::filesystem::create_directories(data_dir_);
  {
    std::ofstream token(dir_ / "token");
    token << token_ << "\n";
  }
  std::vector<std::string> argv{options.binary,     "--listen",         "127.0.0.1:0",
                                "--providers",      options.provider,   "--bind-address",
                                "127.0.0.1",        "--token-file",     (dir_ / "token").string(),
                                "--data-dir",       data_dir_.string(), "--memory-cap",
                                options.memory_cap, "--import-socket",  (dir_ / "import.sock").string()};
  if (!options.tls_cert.empty()) {
    argv.insert(argv.end(), {"--tls-cert", options.tls_cert, "--tls-key", options.tls_key});
  }
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  process_ = std::make_unique<PeerProcess>(argv);
  for (;;) {
    auto line = process_->read_line(std::chrono::seconds(30));
    if (!line) return;
    if (line->rfind("listening ", 0) == 0) {
      url_ = (options.tls_cert.empty() ? "http://" : "https://") + line->substr(10);
      break;
    }
  }
  client_ = std::make_unique<httplib::Client>(url_);
  if (!options.ca_cert.empty()) client_->set_ca_cert_path(options.ca_cert.c_str());
  client_->set_bearer_token_auth(token_.c_str());
  client_->set_read_timeout(60, 0);
}

// An agent still running at the end is stopped as its DaemonSet would stop it, and must exit 0: a clean
// shutdown, and, in the sanitizer builds, no leak report (LeakSanitizer runs at exit) and no other report.
AgentProcess::~AgentProcess() {
  client_.reset();
  if (process_ && process_->running()) {
    const int pid = process_->pid();
    const auto status = process_->terminate(std::chrono::seconds(30));
    if (!status) {
      ADD_FAILURE() << "conduit-agent " << pid << " did not exit within 30 s of SIGTERM (killed)";
    } else if (*status != 0) {
      ADD_FAILURE() << "conduit-agent " << pid << " exited with status " << *status
                    << " on SIGTERM (a sanitizer report, if any, is in its stderr above)";
    }
  }
  process_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

namespace {
AgentProcess::Reply to_reply(const httplib::Result& res) {
  AgentProcess::Reply r;
  if (!res) return r;
  r.status = res->status;
  r.body = nlohmann::json::parse(res->body, nullptr, false);
  if (r.body.is_discarded()) r.body = nullptr;
  return r;
}
}  // namespace

AgentProcess::Reply AgentProcess::get(const std::string& path) {
  return to_reply(client_->Get(path.c_str()));
}

AgentProcess::Reply AgentProcess::post(const std::string& path, const nlohmann::json& body) {
  return to_reply(client_->Post(path.c_str(), body.dump(), "application/json"));
}

AgentProcess::Reply AgentProcess::put(const std::string& path, const nlohmann::json& body) {
  return to_reply(client_->Put(path.c_str(), body.dump(), "application/json"));
}

AgentProcess::Reply AgentProcess::del(const std::string& path) {
  return to_reply(client_->Delete(path.c_str()));
}

double AgentProcess::metric(const std::string& sample) {
  auto r = client_->Get("/metrics");
  if (!r || r->status != 200) return -1;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(sample + " ") ||
        (sample.find('{') == std::string::npos && line.starts_with(sample + "{")))
      return std::stod(line.substr(line.rfind(' ')));
  }
  return -1;
}

nlohmann::json AgentProcess::wait_transfer(const std::string& id, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json last;
  while (std::chrono::steady_clock::now() < deadline) {
    Reply r = get("/v1/transfers/" + id);
    if (r.status == 200) {
      last = r.body;
      const std::string state = last.value("state", "");
      if (state != "Queued" && state != "Running") return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return last;
}

std::vector<std::byte> load_seeded(AgentProcess& agent, const std::string& name, std::uint64_t bytes,
                                   std::uint64_t seed) {
  auto data = write_seeded(agent.data_dir() / (name + ".bin"), bytes, seed);
  auto r = agent.post("/v1/regions", {{"name", name}, {"file", name + ".bin"}, {"mode", "load"}});
  EXPECT_EQ(r.status, 201) << r.body.dump();
  return data;
}

nlohmann::json region_grant(AgentProcess& agent, const std::string& region, const nlohmann::json& body) {
  auto r = agent.post("/v1/regions/" + region + "/grants", body);
  EXPECT_EQ(r.status, 201) << r.body.dump();
  return r.body;
}

std::uint32_t region_crc(AgentProcess& agent, const std::string& region, std::uint64_t bytes) {
  auto r = agent.get("/v1/regions/" + region + "/checksum?slice=" + std::to_string(bytes));
  EXPECT_EQ(r.status, 200) << r.body.dump();
  return r.status == 200 ? r.body["crc32c"][0].get<std::uint32_t>() : 0;
}

}  // namespace conduit::testing
