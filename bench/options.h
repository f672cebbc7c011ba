// Everything one benchmark run is parameterised by, shared by the serving and the initiating side.
#pragma once

#include <cstdint>
#include <string>

#include "conduit/data_plane_settings.h"
#include "conduit/transport.h"

namespace conduit::bench {

struct Options {
  std::string provider = "tcp";
  std::string bind = "127.0.0.1";  // local address for tcp endpoints and the control server
  std::uint64_t size = 256ULL << 20;
  std::uint64_t chunk = 1ULL << 20;
  std::uint32_t window = 16;
  int rails = 1;
  int iterations = 5;
  OpKind op = OpKind::Write;
  bool json = false;
  DataPlaneSettings data_plane;  // --progress, --ib-*, ... (data_plane_flags.h)
};

// Runs the passive target: allocates and registers `size` bytes, serves the control API on `listen`
// (HOST:PORT, port 0 = any) and prints "listening PORT" once ready. Returns the exit code.
int serve(const Options& options, const std::string& listen);

// Runs the initiator against a target's control API at HOST:PORT and prints the result.
int initiate(const Options& options, const std::string& target);

// Single-threaded memcpy of `size` bytes, the ceiling one core reaches; prints GB/s.
int memcpy_baseline(const Options& options);

// One op at a time (8 B, 4 KiB, 64 KiB, 1 MiB): p50/p99/p999 of the bare provider and of conduit::Transport
// in this process, interleaved, and their ratio (latency.cpp).
int transport_latency(const Options& options);

// The same through two running agents' API (POST /v1/transfers?waitSeconds with one op), and 1,000
// scattered 16 KiB blocks in one request against one contiguous 16 MiB transfer.
int agent_latency(const Options& options, const std::string& source, const std::string& target,
                  const std::string& token);

}  // namespace conduit::bench
