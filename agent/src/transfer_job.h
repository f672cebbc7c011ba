// One transfer as its worker thread runs it: register the source, move each target's range in segments
// with bounded retries, verify, and stop promptly on cancel, deadline, shutdown or a stall. Internal to
// transfers.cpp and transfer_job.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "staged_source.h"
#include "transfers.h"

namespace conduit::agent::job {

using SteadyClock = std::chrono::steady_clock;

enum StopCause : int { kRun = 0, kCancel = 1, kShutdown = 2 };

// How a transfer ended when it did not succeed.
struct Failure {
  TransferState state = TransferState::Failed;
  const char* reason = reason::kTransportError;
  std::string message;
};

inline double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace conduit::agent::job

namespace conduit::agent {

struct TransferManager::Transfer {
  // Fixed by start().
  std::uint64_t seq = 0;
  TransferRequest request;
  std::uint64_t length = 0;            // resolved: never 0
  std::uint64_t resumed_bytes = 0;     // the targets' resume offsets together: in bytes_done, not moved here
  std::vector<Transport*> transports;  // per target
  job::SteadyClock::time_point created;
  std::atomic<int> stop{job::kRun};
  std::atomic<bool> ended{false};

  // The worker's own, until it ends; then the reaper's if parked.
  RegionUse source;
  std::vector<std::pair<Transport*, Registration>> registrations;
  // Transports that cannot register the (CUDA) source region go through bounce buffers instead
  // (staged_transfer.cpp). Released before `source`, whose memory their copiers read.
  std::vector<std::pair<Transport*, std::unique_ptr<StagedSource>>> staged;
  Transport* undrained_transport = nullptr;
  BatchId undrained_batch = 0;

  // Written by the worker, read by get() and list() at any moment.
  mutable std::mutex mu;
  TransferStatus status;
  job::SteadyClock::time_point started, finished;

  std::optional<job::Failure> execute(TransferManager& m);
  std::optional<job::Failure> send(TransferManager& m, std::size_t target);
  std::optional<job::Failure> verify(TransferManager& m, std::size_t target);
  std::optional<job::Failure> move(TransferManager& m, Transport& transport, const std::vector<Op>& ops,
                                   const std::function<void(std::uint64_t)>& progress);
  // staged_transfer.cpp: [begin, end) of the range to or from target `target` in pieces of at most `piece`
  // bytes, directly or through the staged source, telling a staged target when each piece landed.
  // progress(range offset reached); landed(range offset below which every byte is at the target).
  std::optional<job::Failure> move_range(
      TransferManager& m, std::size_t target, std::uint64_t begin, std::uint64_t end, std::uint64_t piece,
      const std::function<void(std::uint64_t)>& progress,
      const std::function<std::optional<job::Failure>(std::uint64_t)>& landed);
  // Registers the source range with `transport`, or opens a staged source where it cannot take CUDA memory.
  std::optional<job::Failure> prepare(TransferManager& m, Transport& transport);
  StagedSource* staged_source(const Transport* transport) const;
  std::optional<job::Failure> watch(TransferManager& m, Transport& transport, BatchId id,
                                    const std::function<void(std::uint64_t)>& progress,
                                    std::optional<Error>& error);
  std::optional<job::Failure> stopped() const;
  std::optional<job::Failure> pause(job::SteadyClock::duration d) const;
  void drain(TransferManager& m, Transport& transport, BatchId id);
  const Registration& registration(const Transport* transport) const;
  void set_target_bytes(std::size_t target, std::uint64_t bytes);
  TransferStatus snapshot() const;
};

}  // namespace conduit::agent
