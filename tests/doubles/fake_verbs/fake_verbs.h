// A simulated RoCE device for tests on machines without RDMA hardware. Test-only: never part of the
// conduit_transports library. Linked into a test executable, fake_verbs.cpp defines the libibverbs entry
// points the ibverbs backend calls (and the post_send / poll_cq / req_notify_cq ops behind the inline
// wrappers), so those calls land here instead of in libibverbs.
//
// The device executes RDMA WRITE and READ between queue pairs of this process on its own thread, with the
// semantics the backend relies on: WRs run in order per QP; a completion only for signaled WRs and failed
// ones; a send-queue slot is freed only when a completion at or after its WR is polled; a bad rkey or range
// fails the WR with IBV_WC_REM_ACCESS_ERR and flushes everything behind it (IBV_WC_WR_FLUSH_ERR, one
// completion per WR); completion events fire once per ibv_req_notify_cq.
//
// What the real library or kernel would punish (an overfull send queue or CQ, a CQ destroyed with QPs on it
// or with unacknowledged events, a PD or context closed with children alive, a QP modified out of order or
// without the attributes a transition needs) is refused as the real one would be and recorded in
// violations(), which tests check stays empty.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace conduit::verbs::fake {

enum class Mode {
  Roce,          // one RoCE v2 device "sim_roce0", port 1 ACTIVE, GID 3 = ::ffff:127.0.0.1
  NoDevice,      // ibv_get_device_list: NULL, errno ENOSYS (a kernel without verbs)
  NoPermission,  // ibv_get_device_list: NULL, errno EPERM
  EfaOnly,       // one device that does not run RC (transport unspecified), like EFA
  PortDown,      // the port is DOWN
  Memlock,       // CQ creation and registration fail with ENOMEM, as under a tiny RLIMIT_MEMLOCK
};

void set_mode(Mode mode);

struct Counters {
  std::uint64_t posted = 0;           // WRs accepted by post_send
  std::uint64_t completions = 0;      // CQEs produced (success and failure)
  std::uint64_t bytes = 0;            // bytes moved by successful WRs
  std::uint64_t max_outstanding = 0;  // most WRs ever outstanding on one send queue
};
Counters counters();
void reset_counters();

std::vector<std::string> violations();
void clear_violations();

}  // namespace conduit::verbs::fake
