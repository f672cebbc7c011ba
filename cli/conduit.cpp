// conduit: the command line for Conduit agents.
//   conduit node
//   conduit regions ls | create NAME --bytes SIZE [--memory host] | create NAME --file PATH | rm NAME
//   conduit regions save NAME --file PATH
//   conduit transfer --from [URL/]REGION --to [URL/]REGION [--length SIZE --verify crc32c ...]
// Exit status: 0 done, 1 the agent or the transfer failed, 2 bad usage.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conduit/http_error.h"
#include "conduit/size.h"

namespace {

namespace po = boost::program_options;
using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: conduit [--agent URL] [--token TOKEN | --token-file FILE] [--ca-cert FILE] [--json] COMMAND\n"
    "commands:\n"
    "  node                                       what the agent's node has, and why RDMA/GPU may not work\n"
    "  regions ls                                 the agent's regions\n"
    "  regions create NAME --bytes SIZE [--memory host|cuda:N]\n"
    "  regions create NAME --file PATH            load a file under the agent's data directory\n"
    "  regions rm NAME\n"
    "  regions save NAME --file PATH              write a region to a file under the data directory\n"
    "  regions checksum NAME [--slice SIZE]       CRC32C of each slice (host or GPU memory)\n"
    "  transfer --from [URL/]REGION --to [URL/]REGION [options]   (conduit transfer --help)\n";

// Leaves main() with an exit status and one line for stderr.
struct Exit {
  int code;
  std::string message;
};

[[noreturn]] void usage(const std::string& why) { throw Exit{2, why + " (see conduit --help)"}; }

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

std::uint64_t parse_size(const std::string& flag, const std::string& text) {
  auto n = conduit::parse_size(text);
  if (!n) usage(flag + ": " + n.error().message);
  return *n;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

std::string gb_per_s(double bytes_per_second) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB/s", bytes_per_second / 1e9);
  return text;
}

struct Globals {
  std::string agent;
  std::string token;
  std::string ca_cert;  // trusted CA for https agents (else the system's)
  bool json = false;
};

// One agent's REST API. Failures leave through Exit with the agent's own error code and message.
class Agent {
 public:
  Agent(std::string url, const Globals& g) : url_(std::move(url)), client_(url_) {
    if (!client_.is_valid()) usage("bad agent URL \"" + url_ + "\" (want http://HOST:PORT)");
    if (!g.token.empty()) client_.set_bearer_token_auth(g.token);
    if (!g.ca_cert.empty()) client_.set_ca_cert_path(g.ca_cert);
    client_.set_tcp_nodelay(true);  // a POST body must not wait out a delayed ACK of its headers
    client_.set_connection_timeout(std::chrono::seconds(5));
    // Creating, loading and saving a region of many GiB takes a while.
    client_.set_read_timeout(std::chrono::minutes(10));
  }

  const std::string& url() const { return url_; }
  void set_read_timeout(std::chrono::seconds timeout) { client_.set_read_timeout(timeout); }

  json get(const std::string& path) { return check(client_.Get(path), "GET " + path); }
  json post(const std::string& path, const json& body) {
    return check(client_.Post(path, body.dump(), "application/json"), "POST " + path);
  }
  json del(const std::string& path) { return check(client_.Delete(path), "DELETE " + path); }

 private:
  json check(const httplib::Result& result, const std::string& what) {
    if (!result)
      throw Exit{1, "cannot reach agent " + url_ + " (" + what +
                        "): " + conduit::describe_http_error(result.error())};
    json body = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
    if (result->status < 400) return body.is_discarded() ? json::object() : body;
    if (body.is_object() && body.contains("error") && body["error"].is_object()) {
      const json& error = body["error"];
      throw Exit{1, error.value("code", "Error") + ": " + error.value("message", "")};
    }
    throw Exit{1, url_ + " answered HTTP " + std::to_string(result->status) + " to " + what};
  }

  std::string url_;
  httplib::Client client_;
};

std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string token = trim(text.str());
  if (!in || token.empty()) throw Exit{2, "token file " + path + " is unreadable or empty"};
  return token;
}

// Parses a subcommand's own flags; `positional` names the bare arguments it takes, in order.
po::variables_map parse_args(const std::vector<std::string>& args, po::options_description& desc,
                             const std::vector<std::string>& positional = {}) {
  po::positional_options_description pos;
  for (const auto& name : positional) pos.add(name.c_str(), 1);
  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(args).options(desc).positional(pos).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    usage(e.what());
  }
  if (vm.count("help") > 0) {
    std::cout << desc;
    throw Exit{0, ""};
  }
  for (const auto& name : positional) {
    if (vm.count(name) == 0) usage("missing " + name);
  }
  return vm;
}

void print(const Globals& g, const json& body, const std::string& human) {
  if (g.json) {
    std::cout << body.dump(2) << "\n";
  } else {
    std::cout << human;
  }
}

int cmd_node(const Globals& g, const std::vector<std::string>& args) {
  po::options_description desc("conduit node: the agent's inventory");
  desc.add_options()("help,h", "show this help");
  parse_args(args, desc);
  Agent agent(g.agent, g);
  const json node = agent.get("/v1/node");
  std::ostringstream out;
  out << "node      " << node.value("node", "") << "\nversion   " << node.value("version", "")
      << "\nfabric   ";
  for (const auto& t : node.value("fabric", json::array())) {
    const int rails = t.value("rails", 1);
    out << " " << t.value("provider", "?") << " (" << rails << (rails == 1 ? " rail" : " rails") << ", gpu "
        << t.value("gpuDirect", "none") << ")";
  }
  const json memory = node.value("memory", json::object());
  out << "\nmemory    " << human_bytes(memory.value("used", 0.0)) << " used of "
      << human_bytes(memory.value("cap", 0.0)) << "\nnics     ";
  const json topology = node.value("topology", json::object());
  for (const auto& nic : topology.value("nics", json::array())) {
    out << " " << nic.value("name", "?") << "(" << nic.value("kind", "?") << ")";
  }
  out << "\ngpus      " << topology.value("gpus", json::array()).size() << "\nchecks\n";
  for (const auto& c : node.value("checks", json::array())) {
    out << "  " << c.value("name", "?") << ": "
        << (c.value("ok", false) ? std::string("ok") : "NOT OK: " + c.value("message", "")) << "\n";
  }
  print(g, node, out.str());
  return 0;
}

int cmd_regions(const Globals& g, std::vector<std::string> args) {
  if (args.empty()) usage("regions: say ls, create, rm, save or checksum");
  if (args.front() == "--help" || args.front() == "-h") {
    std::cout << kUsage;
    return 0;
  }
  const std::string sub = args.front();
  args.erase(args.begin());
  Agent agent(g.agent, g);
  po::options_description desc("conduit regions " + sub);
  desc.add_options()("help,h", "show this help");
  if (sub == "ls") {
    parse_args(args, desc);
    const json list = agent.get("/v1/regions");
    std::ostringstream out;
    char line[256];
    std::snprintf(line, sizeof line, "%-32s %12s %-8s %-6s %s\n", "NAME", "BYTES", "MEMORY", "USERS",
                  "SOURCE");
    out << line;
    for (const auto& r : list.value("items", json::array())) {
      std::snprintf(line, sizeof line, "%-32s %12s %-8s %-6d %s\n", r.value("name", "").c_str(),
                    human_bytes(r.value("bytes", 0.0)).c_str(), r.value("memory", "").c_str(),
                    r.value("users", 0), r.value("source", "").c_str());
      out << line;
    }
    print(g, list, out.str());
  } else if (sub == "create") {
    std::string bytes, memory, file;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "bytes", po::value(&bytes)->value_name("SIZE"), "allocate this many bytes (e.g. 256MiB)")(
        "memory", po::value(&memory)->value_name("KIND"), "host (default) or cuda:N")(
        "file", po::value(&file)->value_name("PATH"), "load this file (under the agent's data directory)");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    json body{{"name", name}};
    if (bytes.empty() == file.empty()) usage("regions create: say --bytes SIZE or --file PATH");
    if (!file.empty()) {
      if (!memory.empty()) usage("regions create: --memory goes with --bytes, not --file");
      body["file"] = file;
      body["mode"] = "load";
    } else {
      body["bytes"] = parse_size("--bytes", bytes);
      body["memory"] = memory.empty() ? "host" : memory;
    }
    const json region = agent.post("/v1/regions", body);
    print(g, region,
          "region " + name + " created: " + human_bytes(region.value("bytes", 0.0)) + " " +
              region.value("memory", "") + "\n");
  } else if (sub == "rm") {
    desc.add_options()("name", po::value<std::string>(), "region name");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    const json body = agent.del("/v1/regions/" + name);
    print(g, body, "region " + name + " deleted\n");
  } else if (sub == "save") {
    std::string file;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "file", po::value(&file)->value_name("PATH"), "file under the agent's data directory");
    const auto vm = parse_args(args, desc, {"name"});
    if (file.empty()) usage("regions save: --file PATH is required");
    const std::string name = vm["name"].as<std::string>();
    const json saved = agent.post("/v1/regions/" + name + "/save", {{"file", file}});
    print(g, saved, "region " + name + " saved to " + saved.value("file", file) + "\n");
  } else if (sub == "checksum") {
    std::string slice;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "slice", po::value(&slice)->default_value("1MiB"),
        "bytes per CRC32C (the last slice may be shorter)");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    const json sums =
        agent.get("/v1/regions/" + name + "/checksum?slice=" + std::to_string(parse_size("--slice", slice)));
    std::ostringstream out;
    for (const auto& c : sums.value("crc32c", json::array())) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%08x\n", c.get<std::uint32_t>());
      out << hex;
    }
    print(g, sums, out.str());
  } else {
    usage("regions: unknown command \"" + sub + "\" (ls, create, rm, save, checksum)");
  }
  return 0;
}

// ---- transfer -------------------------------------------------------------------------------------------

std::atomic<int> g_interrupts{0};

extern "C" void on_interrupt(int) {
  // The second Ctrl-C means "now": the grant then lives until its TTL.
  if (g_interrupts.fetch_add(1) > 0) _exit(130);
}

struct Endpoint {
  std::string url;
  std::string region;
};

// "http://10.0.0.2:7070/weights" or "weights" (on --agent).
Endpoint parse_endpoint(const std::string& flag, const std::string& text, const std::string& default_agent) {
  const auto slash = text.rfind('/');
  if (slash == std::string::npos) return {default_agent, text};
  Endpoint e{text.substr(0, slash), text.substr(slash + 1)};
  if (e.url.find("://") == std::string::npos || e.region.empty()) {
    usage(flag + ": want URL/REGION (e.g. http://10.0.0.2:7070/weights) or REGION, got \"" + text + "\"");
  }
  return e;
}

// Revokes the grant however the transfer ends, so the target's memory is not left open to the fabric.
class GrantGuard {
 public:
  GrantGuard(Agent& agent, std::string id) : agent_(agent), id_(std::move(id)) {}
  ~GrantGuard() {
    try {
      agent_.del("/v1/grants/" + id_);
    } catch (const Exit& e) {
      std::cerr << "conduit: revoking grant " << id_ << ": " << e.message << " (it expires by itself)\n";
    } catch (const std::exception& e) {
      std::cerr << "conduit: revoking grant " << id_ << ": " << e.what() << " (it expires by itself)\n";
    }
  }

 private:
  Agent& agent_;
  std::string id_;
};

void show_progress(const json& status, bool tty, bool final) {
  static auto last_line = std::chrono::steady_clock::time_point{};
  const double total = status.value("bytesTotal", 0.0);
  const double done = status.value("bytesDone", 0.0);
  const double fraction = total > 0 ? done / total : 0;
  const std::string rate = gb_per_s(status.value("throughputBytesPerSecond", 0.0));
  char pct[16];
  std::snprintf(pct, sizeof pct, "%5.1f%%", fraction * 100);
  if (tty) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
    std::cerr << "\r[" << bar << "] " << pct << "  " << human_bytes(done) << " / " << human_bytes(total)
              << "  " << rate << "\033[K" << (final ? "\n" : "") << std::flush;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!final && now - last_line < std::chrono::seconds(1)) return;
  last_line = now;
  std::cerr << "transfer " << status.value("id", "?") << ": " << status.value("state", "?") << " " << pct
            << " " << human_bytes(done) << " / " << human_bytes(total) << " " << rate << "\n";
}

int cmd_transfer(const Globals& g, const std::vector<std::string>& args) {
  std::string from, to, from_offset_text, to_offset_text, length, chunk, verify;
  std::uint64_t deadline = 0, ttl = 0;
  std::uint32_t window = 0;
  po::options_description desc(
      "conduit transfer: move a region (or part of one) into a region on another agent");
  desc.add_options()("help,h", "show this help")(
      "from", po::value(&from)->value_name("[URL/]REGION"),
      "source agent and region (the agent: --agent when left out)")(
      "to", po::value(&to)->value_name("[URL/]REGION"), "target agent and region")(
      "from-offset", po::value(&from_offset_text)->default_value("0"),
      "first byte of the source (e.g. 1GiB)")("to-offset", po::value(&to_offset_text)->default_value("0"),
                                              "where the bytes land in the target")(
      "length", po::value(&length)->value_name("SIZE"), "bytes to move (default: to the end of the source)")(
      "chunk", po::value(&chunk)->default_value("1MiB"), "slice size")(
      "window", po::value(&window)->default_value(16), "slices in flight")(
      "verify", po::value(&verify)->default_value("crc32c"), "crc32c | none")(
      "deadline", po::value(&deadline)->default_value(0), "seconds the transfer may take (0: no limit)")(
      "grant-ttl", po::value(&ttl)->default_value(600), "seconds the target's grant lives at most");
  parse_args(args, desc);
  if (from.empty() || to.empty()) usage("transfer: --from and --to are required");
  if (verify != "crc32c" && verify != "none") usage("--verify: want crc32c or none");
  const Endpoint src = parse_endpoint("--from", from, g.agent);
  const Endpoint dst = parse_endpoint("--to", to, g.agent);
  const std::uint64_t chunk_bytes = parse_size("--chunk", chunk);
  const std::uint64_t from_offset = parse_size("--from-offset", from_offset_text);
  const std::uint64_t to_offset = parse_size("--to-offset", to_offset_text);
  Agent source(src.url, g);
  Agent target(dst.url, g);

  std::uint64_t bytes = 0;
  if (!length.empty()) {
    bytes = parse_size("--length", length);
  } else {
    const auto size = source.get("/v1/regions/" + src.region).value("bytes", std::uint64_t{0});
    if (from_offset >= size)
      usage("--from-offset " + std::to_string(from_offset) + " is past the source's end");
    bytes = size - from_offset;
  }

  // From here on Ctrl-C cancels the transfer and revokes the grant rather than killing us.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const json grant =
      target.post("/v1/regions/" + dst.region + "/grants",
                  {{"offset", to_offset}, {"length", bytes}, {"access", "write"}, {"ttlSeconds", ttl}});
  GrantGuard revoke(target, grant.value("id", ""));
  json request{{"source", {{"region", src.region}, {"offset", from_offset}, {"length", bytes}}},
               {"targets",
                {{{"grant", grant["key"]},
                  {"offset", 0},
                  {"url", dst.url},
                  {"region", dst.region},
                  {"regionOffset", to_offset}}}},
               {"chunkBytes", chunk_bytes},
               {"window", window},
               {"verify", verify},
               {"deadlineSeconds", deadline}};
  if (g_interrupts.load() > 0) throw Exit{1, "interrupted before the transfer started"};
  json status = source.post("/v1/transfers", request);
  // A status answer is quick; a poll that hangs means the agent is in trouble.
  source.set_read_timeout(std::chrono::seconds(10));
  const std::string id = status.value("id", "");
  const bool tty = isatty(STDERR_FILENO) != 0;
  bool cancelled = false;
  int unreachable = 0;
  const auto begin = std::chrono::steady_clock::now();
  while (true) {
    const std::string state = status.value("state", "");
    if (state == "Succeeded" || state == "Failed" || state == "Cancelled") break;
    if (g_interrupts.load() > 0 && !cancelled) {
      cancelled = true;
      if (tty) std::cerr << "\n";
      std::cerr << "conduit: cancelling transfer " << id << "\n";
      try {
        source.del("/v1/transfers/" + id);
      } catch (const Exit& e) {
        std::cerr << "conduit: cancel: " << e.message << "\n";
      }
    }
    show_progress(status, tty, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    try {
      status = source.get("/v1/transfers/" + id);
      unreachable = 0;
    } catch (const Exit& e) {
      // A busy agent may miss one poll; ten in a row (2 s) means it is gone.
      if (++unreachable >= 10) throw Exit{1, "transfer " + id + ": lost the source agent: " + e.message};
    }
  }
  show_progress(status, tty, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (status.value("state", "") != "Succeeded") {
    if (g.json) std::cout << status.dump(2) << "\n";
    throw Exit{1, "transfer " + id + " failed: " + status.value("reason", "Unknown") + ": " +
                      status.value("message", "")};
  }
  char summary[256];
  // Where GPU memory was staged through host memory, say so: it is not GPU-direct.
  std::string gpu =
      status.value("gpuPath", "none") == "none" ? "" : ", source " + status.value("gpuPath", "");
  for (const auto& t : status.value("targets", json::array())) {
    if (t.value("staged", false)) gpu += ", target staged";
  }
  std::snprintf(summary, sizeof summary, "transfer %s succeeded: %s in %.2f s (%s)%s%s, %u retries\n",
                id.c_str(), human_bytes(status.value("bytesDone", 0.0)).c_str(), seconds,
                gb_per_s(status.value("throughputBytesPerSecond", 0.0)).c_str(),
                status.value("verified", false) ? ", verified crc32c" : "", gpu.c_str(),
                status.value("retries", 0U));
  print(g, status, summary);
  return 0;
}

int run(int argc, char** argv) {
  Globals g;
  std::string token_file;
  po::options_description global("options", 100);
  auto add = global.add_options();
  add("help,h", "show this help");
  add("agent", po::value(&g.agent)->value_name("URL"),
      "agent URL (env CONDUIT_AGENT, default http://127.0.0.1:7070)");
  add("token", po::value(&g.token)->value_name("TOKEN"), "bearer token (env CONDUIT_TOKEN)");
  add("token-file", po::value(&token_file)->value_name("FILE"),
      "file holding the token (env CONDUIT_TOKEN_FILE)");
  add("ca-cert", po::value(&g.ca_cert)->value_name("FILE"),
      "CA to trust for https agents (env CONDUIT_CA_CERT)");
  add("json", "print the agent's JSON instead of text");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("args", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(global).add(hidden);
  po::positional_options_description pos;
  pos.add("command", 1).add("args", -1);
  po::variables_map vm;
  std::vector<std::string> rest;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    const auto parsed = po::command_line_parser(argc, argv)
                            .options(all)
                            .positional(pos)
                            .style(style)
                            .allow_unregistered()
                            .run();
    po::store(parsed, vm);
    po::notify(vm);
    rest = po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    usage(e.what());
  }
  if (vm.count("command") == 0) {
    if (vm.count("help") == 0) usage("no command given");
    std::cout << kUsage << "\n" << global;
    return 0;
  }
  rest.erase(rest.begin());  // the command itself
  // --help after a command belongs to the command.
  if (vm.count("help") > 0) rest.push_back("--help");
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::string(value) : std::string();
  };
  if (g.agent.empty()) g.agent = env("CONDUIT_AGENT");
  if (g.agent.empty()) g.agent = "http://127.0.0.1:7070";
  while (g.agent.size() > 1 && g.agent.back() == '/') g.agent.pop_back();
  if (g.token.empty() && !token_file.empty()) g.token = read_token_file(token_file);
  if (g.token.empty()) g.token = env("CONDUIT_TOKEN");
  if (g.token.empty() && !env("CONDUIT_TOKEN_FILE").empty())
    g.token = read_token_file(env("CONDUIT_TOKEN_FILE"));
  if (g.ca_cert.empty()) g.ca_cert = env("CONDUIT_CA_CERT");
  g.json = vm.count("json") > 0;

  const std::string command = vm["command"].as<std::string>();
  if (command == "node") return cmd_node(g, rest);
  if (command == "regions") return cmd_regions(g, rest);
  if (command == "transfer") return cmd_transfer(g, rest);
  usage("unknown command \"" + command + "\" (node, regions, transfer)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Exit& e) {
    if (!e.message.empty()) std::cerr << "conduit: " << e.message << "\n";
    return e.code;
  } catch (const std::exception& e) {
    std::cerr << "conduit: " << e.what() << "\n";
    return 1;
  }
}
