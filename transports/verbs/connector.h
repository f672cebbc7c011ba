// The out-of-band channel RC connections are set up over. An RC queue pair needs the peer's QPN and PSN
// before it can reach RTR, and a one-sided target never reaches out to its writers itself, so each
// transport runs a small TCP listener (its address travels in the ibverbs address blob) that answers
// handshake requests. Hardware-free: a handler turns request bytes into reply bytes.
//
// Wire: the request is u32 little-endian length + that many bytes (<= 64 KiB). The response is u8 status,
// u8 error code, u32 length, bytes: status 0 carries the reply; status 1 the ErrorCode and a message saying
// why the peer refused.
// Each connection carries one exchange and has a deadline, so a silent client cannot hold the listener.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "conduit/common/result.h"
#include "handshake.h"

namespace conduit::verbs {

inline constexpr std::size_t kMaxFrame = 64 * 1024;

// "10.0.0.5", "10.0.0.5:18515", "[fd00::1]:18515" -> Endpoint (port 0 when absent).
Result<Endpoint> parse_endpoint(const std::string& text);

// The first IPv4 address of an up, non-loopback interface; "" when there is none.
std::string first_ipv4_address();

class Listener {
 public:
  using Handler = std::function<Result<std::vector<std::byte>>(std::span<const std::byte> request)>;

  // Binds `at` (port 0: any free port) and serves requests on its own thread until destroyed.
  static Result<std::unique_ptr<Listener>> start(
      const Endpoint& at, Handler handler, std::chrono::milliseconds deadline = std::chrono::seconds(5));
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  const Endpoint& endpoint() const { return endpoint_; }  // with the bound port

 private:
  Listener() = default;
  void run();
  void serve(int fd);

  Endpoint endpoint_;
  Handler handler_;
  std::chrono::milliseconds deadline_{5000};
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One exchange with the listener at `peer`. PeerUnreachable when it cannot be reached or goes quiet;
// the peer's refusal comes back with its own message.
Result<std::vector<std::byte>> exchange(const Endpoint& peer, std::span<const std::byte> request,
                                        std::chrono::milliseconds timeout);

}  // namespace conduit::verbs
