// conduit-test-peer: the passive side of the integration tests, a real second process. It allocates a
// region, fills it with a seeded pattern, registers it and prints the RemoteKey as one JSON line, then
// (--register-rails 1,3 registers on those rails only, as the agent does for the rails nearest a region's
// memory), then answers commands on stdin while its transport's progress threads serve remote reads and
// writes:
//   crc OFFSET LENGTH -> CRC32C of that range      dereg -> deregisters the key, "ok"
//   fill SEED         -> refills the region, "ok"  quit (or EOF) -> exits 0
//   hold-shm-lock     -> takes the lock in its own shm region and keeps it, "held" (see below)
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "conduit/transport.h"

namespace po = boost::program_options;

namespace {

// For the test of a peer killed inside shm's lock (rma_test.cpp, ShmWedge): takes the spinlock that
// libfabric 1.17's shm keeps in the header of this endpoint's /dev/shm region, the one a writer takes to
// post to us, and never releases it. The header is the provider's, not an API, so its layout is checked
// first (version 4, our pid at 4, the region's own address at 16, an unlocked x86-64 glibc spinlock, 1, at
// 24) and anything else is answered "error ..." for the test to skip on.
std::string hold_shm_lock(const conduit::RemoteKey& key) {
  const auto& address = key.rails.at(0).address;
  const std::string name(reinterpret_cast<const char*>(address.data()),
                         strnlen(reinterpret_cast<const char*>(address.data()), address.size()));
  const int fd = ::open(("/dev/shm/" + name).c_str(), O_RDWR);
  if (fd < 0) return "error no /dev/shm/" + name;
  void* mapped = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) return "error mmap";
  auto* header = static_cast<unsigned char*>(mapped);
  int pid = 0;
  void* base = nullptr;
  int lock = 0;
  std::memcpy(&pid, header + 4, sizeof pid);
  std::memcpy(&base, header + 16, sizeof base);
  std::memcpy(&lock, header + 24, sizeof lock);
  if (header[0] != 4 || pid != ::getpid() || base == nullptr || std::memcmp(base, header, 24) != 0 ||
      lock != 1)
    return "error the shm region's header is not libfabric 1.17's";
  pthread_spin_lock(reinterpret_cast<pthread_spinlock_t*>(header + 24));
  return "held";
}

}  // namespace

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
    } else if (cmd == "hold-shm-lock") {
      std::cout << hold_shm_lock(reg->remote_key()) << std::endl;
    } else if (cmd == "quit") {
      break;
    } else {
      std::cout << "error unknown command " << cmd << std::endl;
    }
  }
  return 0;
}
