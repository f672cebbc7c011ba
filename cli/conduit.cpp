// conduit: the command line for Conduit agents.
//   conduit node
//   conduit regions ls | create NAME --bytes SIZE [--memory host] | create NAME --file PATH | rm NAME
//   conduit regions save NAME --file PATH | checksum NAME | manifest NAME
//   conduit transfer --from [URL/]REGION --to [URL/]REGION [--length SIZE --verify crc32c --pull ...]
// Exit status: 0 done, 1 the agent or the transfer failed, 2 bad usage.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conduit/api/agent_client.h"
#include "conduit/common/size.h"
#include "conduit/common/token_file.h"

namespace {

namespace po = boost::program_options;
using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: conduit [--agent URL] [--token TOKEN | --token-file FILE] [--ca-cert FILE] [--tls-server-name "
    "NAME] [--client-cert FILE --client-key FILE] [--json] COMMAND\n"
    "commands:\n"
    "  node                                       what the agent's node has, and why RDMA/GPU may not work\n"
    "  regions ls                                 the agent's regions\n"
    "  regions create NAME --bytes SIZE [--memory host|cuda:N]\n"
    "  regions create NAME --file PATH            load a file under the agent's data directory (a\n"
    "                                             *.safetensors file brings its tensors' manifest)\n"
    "  regions rm NAME\n"
    "  regions save NAME --file PATH              write a region to a file under the data directory\n"
    "  regions checksum NAME [--slice SIZE]       CRC32C of each slice (host or GPU memory)\n"
    "  regions manifest NAME                      the named tensors a region holds (docs/tensors.md)\n"
    "  transfer --from [URL/]REGION --to [URL/]REGION [options]   (conduit transfer --help)\n";

// Leaves main() with an exit status and one line for stderr.
struct Exit {
  int code;
  std::string message;
};

[[noreturn]] void usage(const std::string& why) { throw Exit{2, why + " (see conduit --help)"}; }

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
  conduit::api::TokenSource token;
  std::string ca_cert;          // trusted CA for https agents (else the system's)
  std::string tls_server_name;  // the name agents' certificates carry (else their address)
  std::string client_cert;      // the certificate (conduit:operator) presented to https agents
  std::string client_key;
  bool json = false;
};

// The value of an agent call; a failure leaves through Exit with the agent's own error code and message.
template <typename T>
T check(conduit::Result<T> result) {
  if (!result) throw Exit{1, result.error().message};
  return std::move(*result);
}

void check(const conduit::Status& status) {
  if (!status) throw Exit{1, status.error().message};
}

// One agent's REST API. `read_timeout`: creating, loading and saving a region of many GiB takes a while.
conduit::api::AgentClient agent_at(const std::string& url, const Globals& g,
                                   std::chrono::milliseconds read_timeout = std::chrono::minutes(10)) {
  if (!conduit::api::AgentClient::valid_url(url))
    usage("bad agent URL \"" + url + "\" (want http://HOST:PORT)");
  return conduit::api::AgentClient(url, {.token = g.token,
                                         .connect_timeout = std::chrono::seconds(5),
                                         .read_timeout = read_timeout,
                                         .write_timeout = std::chrono::seconds(5),
                                         .slow_timeout = read_timeout,
                                         .ca_cert = g.ca_cert,
                                         .server_name = g.tls_server_name,
                                         .client_cert = g.client_cert,
                                         .client_key = g.client_key});
}

conduit::api::TokenSource read_token_file(const std::string& path) {
  auto file = conduit::TokenFile::open(path);
  if (!file) throw Exit{2, "token file " + path + " is unreadable or empty"};
  return conduit::api::TokenSource(std::shared_ptr<const conduit::TokenFile>(std::move(*file)));
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
  const auto agent = agent_at(g.agent, g);
  const json node = check(agent.node());
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
  if (args.empty()) usage("regions: say ls, create, rm, save, checksum or manifest");
  if (args.front() == "--help" || args.front() == "-h") {
    std::cout << kUsage;
    return 0;
  }
  const std::string sub = args.front();
  args.erase(args.begin());
  const auto agent = agent_at(g.agent, g);
  po::options_description desc("conduit regions " + sub);
  desc.add_options()("help,h", "show this help");
  if (sub == "ls") {
    parse_args(args, desc);
    const auto regions = check(agent.list_regions());
    std::ostringstream out;
    char line[256];
    std::snprintf(line, sizeof line, "%-32s %12s %-8s %-6s %s\n", "NAME", "BYTES", "MEMORY", "USERS",
                  "SOURCE");
    out << line;
    for (const auto& r : regions) {
      std::snprintf(line, sizeof line, "%-32s %12s %-8s %-6llu %s\n", r.name.c_str(),
                    human_bytes(static_cast<double>(r.bytes)).c_str(), r.memory.c_str(),
                    static_cast<unsigned long long>(r.users), r.source.c_str());
      out << line;
    }
    print(g, conduit::api::regions_to_json(regions), out.str());
  } else if (sub == "create") {
    std::string bytes, memory, file;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "bytes", po::value(&bytes)->value_name("SIZE"), "allocate this many bytes (e.g. 256MiB)")(
        "memory", po::value(&memory)->value_name("KIND"), "host (default) or cuda:N")(
        "file", po::value(&file)->value_name("PATH"),
        "load this file (under the agent's data directory; a *.safetensors file: its tensors, with its "
        "header as the region's manifest)");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    if (bytes.empty() == file.empty()) usage("regions create: say --bytes SIZE or --file PATH");
    conduit::api::Region region;
    if (!file.empty()) {
      if (!memory.empty()) usage("regions create: --memory goes with --bytes, not --file");
      region = check(agent.load_region({name, file}));
    } else {
      region =
          check(agent.create_region({name, parse_size("--bytes", bytes), memory.empty() ? "host" : memory}));
    }
    print(g, region.to_json(),
          "region " + name + " created: " + human_bytes(static_cast<double>(region.bytes)) + " " +
              region.memory + "\n");
  } else if (sub == "rm") {
    desc.add_options()("name", po::value<std::string>(), "region name");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    check(agent.delete_region(name));
    print(g, json::object(), "region " + name + " deleted\n");
  } else if (sub == "save") {
    std::string file;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "file", po::value(&file)->value_name("PATH"), "file under the agent's data directory");
    const auto vm = parse_args(args, desc, {"name"});
    if (file.empty()) usage("regions save: --file PATH is required");
    const std::string name = vm["name"].as<std::string>();
    const auto saved = check(agent.save_region(name, {file}));
    print(g, saved.to_json(),
          "region " + name + " saved to " + (saved.file.empty() ? file : saved.file) + "\n");
  } else if (sub == "manifest") {
    desc.add_options()("name", po::value<std::string>(), "region name");
    const auto vm = parse_args(args, desc, {"name"});
    const auto manifest = check(agent.manifest(vm["name"].as<std::string>()));
    std::ostringstream out;
    char line[512];
    std::snprintf(line, sizeof line, "%-48s %-8s %-20s %14s %12s\n", "TENSOR", "DTYPE", "SHAPE", "OFFSET",
                  "BYTES");
    out << line;
    for (const auto& t : manifest.tensors) {
      std::snprintf(line, sizeof line, "%-48s %-8s %-20s %14llu %12s\n", t.name.c_str(), t.dtype.c_str(),
                    json(t.shape).dump().c_str(), static_cast<unsigned long long>(t.offset),
                    human_bytes(static_cast<double>(t.length)).c_str());
      out << line;
    }
    print(g, manifest.to_json(), out.str());
  } else if (sub == "checksum") {
    std::string slice;
    desc.add_options()("name", po::value<std::string>(), "region name")(
        "slice", po::value(&slice)->default_value("1MiB"),
        "bytes per CRC32C (the last slice may be shorter)");
    const auto vm = parse_args(args, desc, {"name"});
    const std::string name = vm["name"].as<std::string>();
    const auto sums =
        check(agent.checksum(name, {.offset = 0, .length = 0, .slice = parse_size("--slice", slice)}));
    std::ostringstream out;
    for (const std::uint32_t c : sums.crc32c) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%08x\n", c);
      out << hex;
    }
    print(g, sums.to_json(), out.str());
  } else {
    usage("regions: unknown command \"" + sub + "\" (ls, create, rm, save, checksum, manifest)");
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
  GrantGuard(const conduit::api::AgentClient& agent, std::string id) : agent_(agent), id_(std::move(id)) {}
  ~GrantGuard() {
    try {
      if (auto s = agent_.revoke_grant(id_); !s) {
        std::cerr << "conduit: revoking grant " << id_ << ": " << s.error().message
                  << " (it expires by itself)\n";
      }
    } catch (const std::exception& e) {
      std::cerr << "conduit: revoking grant " << id_ << ": " << e.what() << " (it expires by itself)\n";
    }
  }

 private:
  const conduit::api::AgentClient& agent_;
  std::string id_;
};

void show_progress(const conduit::api::TransferStatus& status, bool tty, bool final) {
  static auto last_line = std::chrono::steady_clock::time_point{};
  const auto total = static_cast<double>(status.bytes_total);
  const auto done = static_cast<double>(status.bytes_done);
  const double fraction = total > 0 ? done / total : 0;
  const std::string rate = gb_per_s(status.throughput);
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
  std::cerr << "transfer " << (status.id.empty() ? "?" : status.id) << ": "
            << (status.state.empty() ? "?" : status.state) << " " << pct << " " << human_bytes(done) << " / "
            << human_bytes(total) << " " << rate << "\n";
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
      "grant-ttl", po::value(&ttl)->default_value(600), "seconds the target's grant lives at most")(
      "pull",
      "the --to agent reads the bytes from --from (a one-sided read; --from only grants) instead of "
      "--from writing them");
  const bool pull = parse_args(args, desc).count("pull") > 0;
  if (from.empty() || to.empty()) usage("transfer: --from and --to are required");
  if (verify != "crc32c" && verify != "none") usage("--verify: want crc32c or none");
  const Endpoint src = parse_endpoint("--from", from, g.agent);
  const Endpoint dst = parse_endpoint("--to", to, g.agent);
  const std::uint64_t chunk_bytes = parse_size("--chunk", chunk);
  const std::uint64_t from_offset = parse_size("--from-offset", from_offset_text);
  const std::uint64_t to_offset = parse_size("--to-offset", to_offset_text);
  const auto source = agent_at(src.url, g);
  const auto target = agent_at(dst.url, g);

  std::uint64_t bytes = 0;
  if (!length.empty()) {
    bytes = parse_size("--length", length);
  } else {
    const auto size = check(source.get_region(src.region)).bytes;
    if (from_offset >= size)
      usage("--from-offset " + std::to_string(from_offset) + " is past the source's end");
    bytes = size - from_offset;
  }

  // From here on Ctrl-C cancels the transfer and revokes the grant rather than killing us.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  // A push: --to grants a write and --from's agent writes. A pull: --from grants a read and --to's agent
  // reads into its own region (the op "read": the one target is the remote side).
  const auto& granter = pull ? source : target;
  const auto& runner = pull ? target : source;
  const Endpoint& remote = pull ? src : dst;
  const Endpoint& local = pull ? dst : src;
  const std::uint64_t remote_offset = pull ? from_offset : to_offset;
  // The grant names the node of the agent that uses it, so no other node's agent identity may (a grant
  // naming no node is any agent's: docs/security.md, "Identities").
  const auto runner_node = check(runner.node());
  const std::string peer = runner_node.is_object() ? runner_node.value("node", "") : "";
  if (peer.empty()) throw Exit{1, "the agent at " + local.url + " did not say its node (GET /v1/node)"};
  const auto grant = check(granter.create_grant(remote.region, {.offset = remote_offset,
                                                                .length = bytes,
                                                                .access = pull ? "read" : "write",
                                                                .ttl_seconds = ttl,
                                                                .peer = peer}));
  GrantGuard revoke(granter, grant.id);
  conduit::api::TransferRequest request;
  request.source_region = local.region;
  request.offset = pull ? to_offset : from_offset;
  request.length = bytes;
  request.op = pull ? conduit::OpKind::Read : conduit::OpKind::Write;
  request.targets.push_back(
      {.grant = grant.key, .url = remote.url, .region = remote.region, .region_offset = remote_offset});
  request.chunk_bytes = chunk_bytes;
  request.window = window;
  request.verify = verify == "crc32c" ? conduit::api::Verify::Crc32c : conduit::api::Verify::None;
  request.deadline_seconds = deadline;
  if (g_interrupts.load() > 0) throw Exit{1, "interrupted before the transfer started"};
  auto status = check(runner.start_transfer(request));
  // A status answer is quick; a poll that hangs means the agent is in trouble.
  const auto poll = agent_at(local.url, g, std::chrono::seconds(10));
  const std::string id = status.id;
  const bool tty = isatty(STDERR_FILENO) != 0;
  bool cancelled = false;
  int unreachable = 0;
  const auto begin = std::chrono::steady_clock::now();
  while (true) {
    if (status.finished()) break;
    if (g_interrupts.load() > 0 && !cancelled) {
      cancelled = true;
      if (tty) std::cerr << "\n";
      std::cerr << "conduit: cancelling transfer " << id << "\n";
      if (auto s = poll.cancel_transfer(id); !s)
        std::cerr << "conduit: cancel: " << s.error().message << "\n";
    }
    show_progress(status, tty, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (auto now = poll.get_transfer(id)) {
      status = std::move(*now);
      unreachable = 0;
    } else if (++unreachable >= 10) {
      // A busy agent may miss one poll; ten in a row (2 s) means it is gone.
      throw Exit{1, "transfer " + id + ": lost the agent running it: " + now.error().message};
    }
  }
  show_progress(status, tty, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (status.state != "Succeeded") {
    if (g.json) std::cout << status.to_json().dump(2) << "\n";
    throw Exit{1, "transfer " + id + " failed: " + (status.reason.empty() ? "Unknown" : status.reason) +
                      ": " + status.message};
  }
  char summary[256];
  // Where GPU memory was staged through host memory, say so: it is not GPU-direct.
  std::string gpu = status.gpu_path.empty() || status.gpu_path == "none" ? "" : ", source " + status.gpu_path;
  for (const auto& t : status.targets) {
    if (t.staged) gpu += ", target staged";
  }
  std::snprintf(summary, sizeof summary, "transfer %s succeeded: %s in %.2f s (%s)%s%s, %u retries\n",
                id.c_str(), human_bytes(static_cast<double>(status.bytes_done)).c_str(), seconds,
                gb_per_s(status.throughput).c_str(), status.verified ? ", verified crc32c" : "", gpu.c_str(),
                status.retries);
  print(g, status.to_json(), summary);
  return 0;
}

int run(int argc, char** argv) {
  Globals g;
  std::string token, token_file;
  po::options_description global("options", 100);
  auto add = global.add_options();
  add("help,h", "show this help");
  add("agent", po::value(&g.agent)->value_name("URL"),
      "agent URL (env CONDUIT_AGENT, default http://127.0.0.1:7070)");
  add("token", po::value(&token)->value_name("TOKEN"), "bearer token (env CONDUIT_TOKEN)");
  add("token-file", po::value(&token_file)->value_name("FILE"),
      "file holding the token (env CONDUIT_TOKEN_FILE)");
  add("ca-cert", po::value(&g.ca_cert)->value_name("FILE"),
      "CA to trust for https agents (env CONDUIT_CA_CERT)");
  add("tls-server-name", po::value(&g.tls_server_name)->value_name("NAME"),
      "the name https agents' certificates carry, checked instead of their address (env "
      "CONDUIT_TLS_SERVER_NAME)");
  add("client-cert", po::value(&g.client_cert)->value_name("FILE"),
      "certificate presented to https agents, naming conduit:operator (env CONDUIT_CLIENT_CERT)");
  add("client-key", po::value(&g.client_key)->value_name("FILE"),
      "the key of --client-cert (env CONDUIT_CLIENT_KEY)");
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
  // --token, --token-file, CONDUIT_TOKEN, CONDUIT_TOKEN_FILE: the first one set. A token file is re-read
  // when it changes, as the agent's and the controller's are.
  if (!token.empty()) {
    g.token = conduit::api::TokenSource(token);
  } else if (!token_file.empty()) {
    g.token = read_token_file(token_file);
  } else if (!env("CONDUIT_TOKEN").empty()) {
    g.token = conduit::api::TokenSource(env("CONDUIT_TOKEN"));
  } else if (!env("CONDUIT_TOKEN_FILE").empty()) {
    g.token = read_token_file(env("CONDUIT_TOKEN_FILE"));
  }
  if (g.ca_cert.empty()) g.ca_cert = env("CONDUIT_CA_CERT");
  if (g.tls_server_name.empty()) g.tls_server_name = env("CONDUIT_TLS_SERVER_NAME");
  if (g.client_cert.empty()) g.client_cert = env("CONDUIT_CLIENT_CERT");
  if (g.client_key.empty()) g.client_key = env("CONDUIT_CLIENT_KEY");
  if (g.client_cert.empty() != g.client_key.empty()) usage("--client-cert and --client-key go together");
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
