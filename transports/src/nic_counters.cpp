#include "conduit/nic_counters.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <system_error>

namespace conduit {

namespace fs = std::filesystem;

namespace {

// One counter file: a decimal number and a newline. Anything else is an error naming the file, so a
// counter that cannot be read is reported as such and never read as 0.
Result<std::uint64_t> read_counter(const fs::path& file) {
  std::ifstream in(file);
  if (!in) {
    const int err = errno;
    return make_error(err == ENOENT ? ErrorCode::NotFound : ErrorCode::Unavailable,
                      "cannot read " + file.string() + ": " + std::strerror(err));
  }
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
  if (line.empty() || ec != std::errc{} || end != line.data() + line.size()) {
    return make_error(ErrorCode::Unavailable,
                      file.string() + " holds \"" + line.substr(0, 40) + "\", not a byte count");
  }
  return value;
}

// The port directories of an infiniband device ("1", "2"), sorted; an error naming the directory when it
// has none.
Result<std::vector<fs::path>> ports_of(const fs::path& device) {
  std::error_code ec;
  std::vector<fs::path> ports;
  for (const auto& entry : fs::directory_iterator(device / "ports", ec)) ports.push_back(entry.path());
  if (ec || ports.empty()) {
    return make_error(ErrorCode::NotFound, "no ports under " + (device / "ports").string() +
                                               (ec ? ": " + ec.message() : std::string()));
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

// Sums counter `name` of directory `sub` over every port.
Result<std::uint64_t> sum_over_ports(const std::vector<fs::path>& ports, const char* sub, const char* name) {
  std::uint64_t sum = 0;
  for (const fs::path& port : ports) {
    auto v = read_counter(port / sub / name);
    if (!v) return v.error();
    sum += *v;
  }
  return sum;
}

Result<NicCounters> read_net(const fs::path& root, const std::string& name) {
  const fs::path stats = root / "class" / "net" / name / "statistics";
  auto tx = read_counter(stats / "tx_bytes");
  if (!tx) return tx.error();
  auto rx = read_counter(stats / "rx_bytes");
  if (!rx) return rx.error();
  return NicCounters{.kind = NicKind::Net, .tx_bytes = *tx, .rx_bytes = *rx, .efa = std::nullopt};
}

Result<NicCounters> read_verbs(const std::vector<fs::path>& ports) {
  // port_xmit_data / port_rcv_data count 4-byte words (the InfiniBand PortCounters unit).
  auto tx = sum_over_ports(ports, "counters", "port_xmit_data");
  if (!tx) return tx.error();
  auto rx = sum_over_ports(ports, "counters", "port_rcv_data");
  if (!rx) return rx.error();
  return NicCounters{.kind = NicKind::Verbs, .tx_bytes = *tx * 4, .rx_bytes = *rx * 4, .efa = std::nullopt};
}

Result<NicCounters> read_efa(const std::vector<fs::path>& ports) {
  NicCounters c;
  c.kind = NicKind::Efa;
  NicCounters::OneSided one;
  struct Field {
    const char* name;
    std::uint64_t* into;
  };
  for (const Field& f :
       {Field{"tx_bytes", &c.tx_bytes}, Field{"rx_bytes", &c.rx_bytes},
        Field{"rdma_write_bytes", &one.rdma_write_bytes}, Field{"rdma_read_bytes", &one.rdma_read_bytes},
        Field{"send_bytes", &one.send_bytes}, Field{"recv_bytes", &one.recv_bytes}}) {
    auto v = sum_over_ports(ports, "hw_counters", f.name);
    if (!v) return v.error();
    *f.into = *v;
  }
  c.efa = one;
  return c;
}

}  // namespace

std::string_view to_string(NicKind kind) {
  switch (kind) {
    case NicKind::Net:
      return "net";
    case NicKind::Verbs:
      return "verbs";
    case NicKind::Efa:
      return "efa";
  }
  return "net";
}

Result<NicCounters> SysfsCounters::read(const NicRef& nic) const {
  if (nic.name.empty() || nic.name.find('/') != std::string::npos || nic.name == "." || nic.name == "..") {
    return make_error(ErrorCode::InvalidArgument, "\"" + nic.name + "\" is not a NIC name");
  }
  if (nic.cls == NicClass::Net) return read_net(root_, nic.name);
  auto ports = ports_of(root_ / "class" / "infiniband" / nic.name);
  if (!ports) return ports.error();
  std::error_code ec;
  const fs::path& first = ports->front();
  const bool standard = fs::exists(first / "counters" / "port_xmit_data", ec);
  const bool efa = fs::exists(first / "hw_counters" / "rdma_read_bytes", ec);
  return efa && !standard ? read_efa(*ports) : read_verbs(*ports);
}

std::vector<NicRef> SysfsCounters::infiniband() const {
  std::vector<NicRef> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_ / "class" / "infiniband", ec))
    out.push_back({entry.path().filename().string(), NicClass::Infiniband});
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace conduit
