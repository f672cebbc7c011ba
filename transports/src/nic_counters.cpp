#include "conduit/nic_counters.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <system_error>

namespace conduit {

namespace fs = std::filesystem;

namespace {

// More open counter files than any node has NICs for: past it the cache is emptied (names that went away).
constexpr std::size_t kMaxOpen = 512;

// A counter file's text: a decimal number and a newline. Anything else is an error naming the file, so a
// counter that cannot be read is reported as such and never read as 0.
Result<std::uint64_t> parse_counter(const fs::path& file, std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
    return make_error(ErrorCode::Unavailable,
                      file.string() + " holds \"" + std::string(text.substr(0, 40)) + "\", not a byte count");
  }
  return value;
}

Error open_error(const fs::path& file, int err) {
  return make_error(err == ENOENT ? ErrorCode::NotFound : ErrorCode::Unavailable,
                    "cannot read " + file.string() + ": " + std::strerror(err));
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
template <class Read>
Result<std::uint64_t> sum_over_ports(const Read& read_counter, const std::vector<fs::path>& ports,
                                     const char* sub, const char* name) {
  std::uint64_t sum = 0;
  for (const fs::path& port : ports) {
    auto v = read_counter(port / sub / name);
    if (!v) return v.error();
    sum += *v;
  }
  return sum;
}

template <class Read>
Result<NicCounters> read_net(const Read& read_counter, const fs::path& root, const std::string& name) {
  const fs::path stats = root / "class" / "net" / name / "statistics";
  auto tx = read_counter(stats / "tx_bytes");
  if (!tx) return tx.error();
  auto rx = read_counter(stats / "rx_bytes");
  if (!rx) return rx.error();
  return NicCounters{.kind = NicKind::Net, .tx_bytes = *tx, .rx_bytes = *rx, .efa = std::nullopt};
}

template <class Read>
Result<NicCounters> read_verbs(const Read& read_counter, const std::vector<fs::path>& ports) {
  // port_xmit_data / port_rcv_data count 4-byte words (the InfiniBand PortCounters unit).
  auto tx = sum_over_ports(read_counter, ports, "counters", "port_xmit_data");
  if (!tx) return tx.error();
  auto rx = sum_over_ports(read_counter, ports, "counters", "port_rcv_data");
  if (!rx) return rx.error();
  return NicCounters{.kind = NicKind::Verbs, .tx_bytes = *tx * 4, .rx_bytes = *rx * 4, .efa = std::nullopt};
}

template <class Read>
Result<NicCounters> read_efa(const Read& read_counter, const std::vector<fs::path>& ports) {
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
    auto v = sum_over_ports(read_counter, ports, "hw_counters", f.name);
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
  const auto read_counter = [this](const fs::path& file) { return counter(file); };
  if (nic.cls == NicClass::Net) return read_net(read_counter, root_, nic.name);
  auto ports = ports_of(root_ / "class" / "infiniband" / nic.name);
  if (!ports) return ports.error();
  std::error_code ec;
  const fs::path& first = ports->front();
  const bool standard = fs::exists(first / "counters" / "port_xmit_data", ec);
  const bool efa = fs::exists(first / "hw_counters" / "rdma_read_bytes", ec);
  return efa && !standard ? read_efa(read_counter, *ports) : read_verbs(read_counter, *ports);
}

Result<std::uint64_t> SysfsCounters::counter(const fs::path& file) const {
  std::lock_guard lock(mu_);
  const std::string key = file.string();
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = open_.find(key);
    if (it == open_.end()) {
      if (open_.size() >= kMaxOpen) open_.clear();
      UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd) return open_error(file, errno);
      it = open_.emplace(key, std::move(fd)).first;
    }
    char text[64];
    const ssize_t n = ::pread(it->second.get(), text, sizeof text - 1, 0);
    if (n >= 0) return parse_counter(file, std::string_view(text, static_cast<std::size_t>(n)));
    const int err = errno;
    open_.erase(it);  // a device gone (ENODEV) or replaced: open the file again, once
    if (attempt == 1) return open_error(file, err);
  }
  return make_error(ErrorCode::Unavailable, "cannot read " + file.string());
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
