// conduit-bench: one-sided RMA throughput between two processes, verified by CRC32C.
//   conduit-bench --self [options]           target and initiator as two processes on this machine
//   conduit-bench serve --listen HOST:PORT   the target, for a run across two hosts
//   conduit-bench --connect HOST:PORT        the initiator against such a target
//   conduit-bench --memcpy --size 1GiB       the single-core memcpy baseline
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include "conduit/common/size.h"
#include "conduit/cuda_device.h"
#include "data_plane_flags.h"
#include "options.h"

namespace po = boost::program_options;
using conduit::bench::Options;

namespace {

// --self: re-executes this binary as `serve` on an ephemeral loopback port, reads the port it prints,
// runs the initiator against it, then stops it.
int run_self(const Options& options, char* self, const std::vector<std::string>& passthrough) {
  int out[2];
  if (pipe(out) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    std::vector<std::string> args{self, "serve", "--listen", options.bind + ":0"};
    args.insert(args.end(), passthrough.begin(), passthrough.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  int rc = 1;
  if (line.rfind("listening ", 0) == 0) {
    rc = conduit::bench::initiate(options, options.bind + ":" + line.substr(10));
  } else {
    std::cerr << "conduit-bench: the target process did not start\n";
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string size = "256MiB";
  std::string chunk = "1MiB";
  std::string op = "write";
  std::string listen;
  std::string connect;
  std::string agents;
  std::string token_file;
  po::options_description desc("conduit-bench: one-sided RMA throughput, verified by CRC32C");
  desc.add_options()("help,h", "show this help")("self", "run target and initiator as two local processes")(
      "connect", po::value(&connect), "initiate against a `serve` target at HOST:PORT")(
      "listen", po::value(&listen), "serve: control address HOST:PORT (port 0: any)")(
      "memcpy", "measure single-threaded memcpy of --size instead")(
      "provider", po::value(&options.provider)->default_value("tcp"), "tcp | shm | efa | verbs | auto")(
      "bind", po::value(&options.bind)->default_value("127.0.0.1"),
      "local address for endpoints and control")("size", po::value(&size)->default_value("256MiB"),
                                                 "bytes per pass (e.g. 256MiB, 1GiB)")(
      "chunk", po::value(&chunk)->default_value("1MiB"), "slice size")(
      "window", po::value(&options.window)->default_value(16), "slices in flight per rail")(
      "rails", po::value(&options.rails)->default_value(1), "endpoints to stripe over")(
      "iterations", po::value(&options.iterations)->default_value(5), "timed passes")(
      "op", po::value(&op)->default_value("write"), "write | read")("json", "print one JSON object")(
      "latency", "one op at a time: the bare provider against conduit::Transport (--iterations rounds)")(
      "agent-latency", po::value(&agents)->value_name("SRC_URL,DST_URL"),
      "one op at a time through two running agents' API, and scattered against contiguous 16 MiB")(
      "token-file", po::value(&token_file), "the agents' bearer token (with --agent-latency)");
  po::options_description data_plane_desc("Data-plane options (the agent's, same names and ranges)");
  conduit::bench::add_data_plane_flags(data_plane_desc);
  desc.add(data_plane_desc);
  po::options_description hidden;
  hidden.add_options()("mode", po::value<std::string>(), "serve");
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("mode", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "conduit-bench: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  const auto size_bytes = conduit::parse_size(size);
  const auto chunk_bytes = conduit::parse_size(chunk);
  if (!size_bytes || *size_bytes == 0) return std::cerr << "conduit-bench: bad --size " << size << "\n", 2;
  if (!chunk_bytes || *chunk_bytes == 0)
    return std::cerr << "conduit-bench: bad --chunk " << chunk << "\n", 2;
  if (op != "write" && op != "read") return std::cerr << "conduit-bench: --op is write or read\n", 2;
  if (options.iterations < 1) return std::cerr << "conduit-bench: --iterations must be >= 1\n", 2;
  options.size = *size_bytes;
  options.chunk = *chunk_bytes;
  options.op = op == "read" ? conduit::OpKind::Read : conduit::OpKind::Write;
  options.json = vm.count("json") > 0;
  auto data_plane = conduit::bench::read_data_plane_flags(vm);
  if (!data_plane) return std::cerr << "conduit-bench: " << data_plane.error().message << "\n", 2;
  options.data_plane = data_plane->settings;
  if (auto driver = conduit::cuda::set_driver_library(options.data_plane.cuda_driver); !driver)
    return std::cerr << "conduit-bench: " << driver.error().message << "\n", 2;

  if (vm.count("mode")) {
    if (vm["mode"].as<std::string>() != "serve") {
      std::cerr << "conduit-bench: unknown command " << vm["mode"].as<std::string>() << "\n";
      return 2;
    }
    return conduit::bench::serve(options, listen.empty() ? options.bind + ":0" : listen);
  }
  if (vm.count("memcpy")) return conduit::bench::memcpy_baseline(options);
  if (vm.count("latency")) return conduit::bench::transport_latency(options);
  if (!agents.empty()) {
    const auto comma = agents.find(',');
    std::ifstream in(token_file);
    std::string token;
    if (comma == std::string::npos || !std::getline(in, token))
      return std::cerr << "conduit-bench: --agent-latency SRC_URL,DST_URL needs --token-file FILE\n", 2;
    return conduit::bench::agent_latency(options, agents.substr(0, comma), agents.substr(comma + 1), token);
  }
  if (!connect.empty()) return conduit::bench::initiate(options, connect);
  if (vm.count("self")) {
    std::vector<std::string> passthrough{"--provider", options.provider, "--size",
                                         size,         "--rails",        std::to_string(options.rails),
                                         "--bind",     options.bind};
    // The target opens its transport with the same data-plane settings (the environment goes with it).
    passthrough.insert(passthrough.end(), data_plane->given.begin(), data_plane->given.end());
    return run_self(options, argv[0], passthrough);
  }
  std::cerr << "conduit-bench: say --self, --connect HOST:PORT, serve or --memcpy (see --help)\n";
  return 2;
}
