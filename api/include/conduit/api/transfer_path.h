// A transfer's proof of path (docs/path.md): per NIC, the bytes the transfer put on that NIC's rails, the
// NIC's own counter delta over the transfer's lifetime, and a verdict; and one verdict for the transfer.
// The `path` of a TransferStatus (GET /v1/transfers/{id}), copied by the controller into the TransferJob.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conduit::api {

// Per NIC.
namespace nic_verdict {
inline constexpr std::string_view kCarried = "Carried";        // planned, and its counters moved enough
inline constexpr std::string_view kNotCarried = "NotCarried";  // planned, its counters did not move enough
inline constexpr std::string_view kUnplanned = "Unplanned";    // not planned, moved by the shortfall
// EFA: the one-sided bytes did not move, its send/recv bytes did: RMA emulated by messages.
inline constexpr std::string_view kEmulatedSendRecv = "EmulatedSendRecv";
inline constexpr std::string_view kUnreadable = "Unreadable";  // its counters could not be read
}  // namespace nic_verdict

// For the transfer: Matched, or the mismatch named.
namespace path_verdict {
inline constexpr std::string_view kMatched = "Matched";
inline constexpr std::string_view kNotCarried = "NotCarried";  // a planned NIC short, no other NIC moved
inline constexpr std::string_view kMisrouted = "Misrouted";    // a planned NIC short, another moved instead
inline constexpr std::string_view kEmulatedSendRecv = "EmulatedSendRecv";
inline constexpr std::string_view kUnreadable = "Unreadable";
inline constexpr std::string_view kNotApplicable = "NotApplicable";  // no NIC (shm), or no byte sent
}  // namespace path_verdict

struct NicPath {
  std::string nic;   // "eth0", "lo", "mlx5_0", "efa_0"
  std::string kind;  // "net" | "verbs" | "efa"
  bool planned = false;
  std::uint64_t planned_bytes = 0;  // this transfer's bytes on the rails of this NIC
  // planned_bytes and the bytes of every transfer that ran wholly within this one's lifetime on this NIC:
  // what the counter delta is judged against (the attribution rule, docs/path.md).
  std::uint64_t window_bytes = 0;
  struct Delta {
    std::uint64_t tx_bytes = 0;
    std::uint64_t rx_bytes = 0;
    // EFA only.
    std::optional<std::uint64_t> rdma_write_bytes{}, rdma_read_bytes{}, send_bytes{}, recv_bytes{};
  };
  std::optional<Delta> counter_delta{};  // absent when Unreadable
  std::string verdict;
  std::string message{};  // why, for any verdict but Carried
};

struct TransferPath {
  std::string verdict;
  std::string message{};  // the mismatch named, NICs and bytes
  std::string counted{};  // "tx" (a write: this node sends) or "rx" (a read: this node receives)
  std::vector<NicPath> nics{};

  static TransferPath from_json(const nlohmann::json& body);  // lenient, as TransferStatus::from_json
  nlohmann::json to_json() const;
};

}  // namespace conduit::api
