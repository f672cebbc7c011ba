// A NIC's own byte counters, read from sysfs: the evidence of which NIC carried a transfer's bytes
// (docs/path.md). Read through a sysfs root, so tests hand in a fake tree in a temp dir instead of "/sys".
//
//   net (tcp, veth, Ethernet, lo)  /sys/class/net/<if>/statistics/{tx_bytes,rx_bytes}: bytes, headers
//   included verbs (InfiniBand, RoCE)       /sys/class/infiniband/<dev>/ports/<p>/counters/{port_xmit_data,
//                                  port_rcv_data}: 4-byte words, summed over the device's ports
//   EFA                            /sys/class/infiniband/<dev>/ports/<p>/hw_counters/{tx_bytes,rx_bytes,
//                                  rdma_write_bytes,rdma_read_bytes,send_bytes,recv_bytes}: bytes, summed
//                                  over ports; the only layout that tells one-sided RDMA from send/recv
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"

namespace conduit {

// Where a NIC's counters are found: /sys/class/net or /sys/class/infiniband.
enum class NicClass : std::uint8_t { Net, Infiniband };
// What the counters read are: an interface's, a verbs device's port counters, or EFA's hw_counters.
enum class NicKind : std::uint8_t { Net, Verbs, Efa };
std::string_view to_string(NicKind kind);  // "net" | "verbs" | "efa"

struct NicRef {
  std::string name;  // "eth0", "lo", "mlx5_0", "efa_0"
  NicClass cls = NicClass::Net;
  bool operator==(const NicRef&) const = default;
  auto operator<=>(const NicRef&) const = default;
};

struct NicCounters {
  NicKind kind = NicKind::Net;
  std::uint64_t tx_bytes = 0;
  std::uint64_t rx_bytes = 0;
  // EFA only: the one-sided and two-sided parts of tx/rx (what this node wrote or read by RDMA as the
  // requester; what it sent and received as messages).
  struct OneSided {
    std::uint64_t rdma_write_bytes = 0;
    std::uint64_t rdma_read_bytes = 0;
    std::uint64_t send_bytes = 0;
    std::uint64_t recv_bytes = 0;
  };
  std::optional<OneSided> efa;
};

// The seam the agent's proof of path reads through: one call per NIC, at a transfer's start and end.
class CounterSource {
 public:
  virtual ~CounterSource() = default;
  // NotFound / Unavailable with the file and the reason when a counter cannot be read (a missing device,
  // permission, text that is not a number): said, never taken as zero. An infiniband device reads as EFA
  // where its ports have hw_counters with rdma_read_bytes and no standard counters/ (EFA has no port
  // counters), else as verbs.
  virtual Result<NicCounters> read(const NicRef& nic) const = 0;
  // Every infiniband device (sorted): with the interfaces that hold an address, where a NIC outside a
  // transfer's plan is looked for.
  virtual std::vector<NicRef> infiniband() const = 0;
};

// The real one: counters under `root` ("/sys" on a node; a temp dir in tests).
class SysfsCounters final : public CounterSource {
 public:
  explicit SysfsCounters(std::filesystem::path root = "/sys") : root_(std::move(root)) {}
  Result<NicCounters> read(const NicRef& nic) const override;  // any thread
  std::vector<NicRef> infiniband() const override;

 private:
  // One counter. Its file stays open between reads, each a pread at offset 0 (which makes sysfs print the
  // value anew): one system call instead of open, read and close, about 1 us against 25 here. A read that
  // fails closes it and opens the file again once (a device removed and made again under its name).
  Result<std::uint64_t> counter(const std::filesystem::path& file) const;

  std::filesystem::path root_;
  mutable std::mutex mu_;
  mutable std::map<std::string, UniqueFd> open_;  // path -> its file; at most kMaxOpen, then emptied
};

}  // namespace conduit
