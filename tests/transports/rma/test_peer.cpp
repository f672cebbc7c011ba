// conduit-test-peer: the passive side of the integration tests, a real second process. It allocates a
// region, fills it with a seeded pattern, registers it and prints the RemoteKey as one JSON line, then
// (--register-rails 1,3 registers on those rails only, as the agent does for the rails nearest a region's
// memory), then answers commands on stdin while its transport's progress threads serve remote reads and
// writes:
//   crc OFFSET LENGTH -> CRC32C of that range      dereg -> deregisters the key, "ok"
//   fill SEED         -> refills the region, "ok"  quit (or EOF) -> exits 0
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>
#include <string>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "conduit/transport.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  conduit::TransportConfig config;
  std::uint64_t bytes = 0;
  std::uint64_t seed = 0;
  std::string access = "rw";
  std::string register_rails;
  po::options_description desc("conduit-test-peer");
  desc.add_options()("provider", po::value(&config.provider)->required())(
      "bytes", po::value(&bytes)->required())("seed", po::value(&seed)->default_value(1))(
      "access", po::value(&access)->default_value("rw"))("rails", po::value(&config.rails)->default_value(1))(
      "bind", po::value(&config.bind_address)->default_value("127.0.0.1"))(
      "register-rails", po::value(&register_rails)->default_value(""));
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "conduit-test-peer: " << e.what() << "\n";
    return 2;
  }

  auto transport = conduit::open_transport(config);
  if (!transport) {
    std::cout << "error " << transport.error().message << std::endl;
    return 1;
  }
  auto region = conduit::MemoryRegion::allocate_host(bytes);
  if (!region) {
    std::cout << "error " << region.error().message << std::endl;
    return 1;
  }
  conduit::fill_pattern(region->bytes(), seed);
  const conduit::Access a = access == "write"  ? conduit::Access::RemoteWrite
                            : access == "read" ? conduit::Access::RemoteRead
                                               : conduit::Access::RemoteReadWrite;
  std::vector<std::uint32_t> rails;
  std::istringstream rail_list(register_rails);
  for (std::string r; std::getline(rail_list, r, ',');)
    rails.push_back(static_cast<std::uint32_t>(std::stoul(r)));
  auto reg = (*transport)->register_memory(*region, a, 0, conduit::Transport::kWholeRegion, rails);
  if (!reg) {
    std::cout << "error " << reg.error().message << std::endl;
    return 1;
  }
  std::cout << reg->remote_key().to_string() << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "crc") {
      std::uint64_t off = 0;
      std::uint64_t len = 0;
      in >> off >> len;
      std::cout << conduit::crc32c(region->bytes().subspan(off, len)) << std::endl;
    } else if (cmd == "dereg") {
      reg->reset();
      std::cout << "ok" << std::endl;
    } else if (cmd == "fill") {
      std::uint64_t s = 0;
      in >> s;
      conduit::fill_pattern(region->bytes(), s);
      std::cout << "ok" << std::endl;
    } else if (cmd == "quit") {
      break;
    } else {
      std::cout << "error unknown command " << cmd << std::endl;
    }
  }
  return 0;
}
