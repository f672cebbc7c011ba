// The ibverbs backend of Transport: one Device and progress Rail per rail, RC connections per peer made
// through the handshake listener, batches sliced and dealt over the rails as RDMA WRITE/READ.
//
// "Finished" means every byte is where it belongs: an RC RDMA WRITE completes at the initiator only once
// the target has acknowledged it, and a READ once its data is in local memory, so the completion of every
// slice (signaled, or implied by a later signaled one on the same QP) is the proof.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../src/batch_table.h"
#include "batch.h"
#include "conduit/transport.h"
#include "conduit/verbs.h"
#include "connection.h"
#include "connector.h"
#include "device.h"
#include "handshake.h"
#include "rail.h"

namespace conduit::verbs {

// The Registration::Handles of the ibverbs backend: one MR per rail (each rail is its own PD).
struct VerbsRegistration final : Registration::Handles {
  struct RailMr {
    std::shared_ptr<Device> device;  // declared first so the MR is deregistered before the PD can go
    MrPtr mr;
  };
  std::vector<RailMr> rails;
  std::vector<std::uint32_t> indices;  // the transport's rail index of each entry of `rails`, ascending
};

class VerbsTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> open(const TransportConfig& config, const VerbsOptions& options);
  ~VerbsTransport() override;

  std::string_view name() const override { return name_; }
  const Capabilities& capabilities() const override { return caps_; }
  int rails() const override { return static_cast<int>(rails_.size()); }
  std::vector<std::byte> address() const override { return address_; }

  // Registrations for remote access are made on every rail whatever `rails` says: a connection pairs
  // each local rail with one peer rail (r mod n) at handshake, so a writer's rail may land on any of ours.
  // Local-only registrations (the source of writes, the sink of reads) honour `rails`.
  Result<Registration> register_memory(const MemoryRegion& region, Access access, std::uint64_t offset,
                                       std::uint64_t length, std::span<const std::uint32_t> rails) override;
  Result<BatchId> submit(std::span<const Op> ops, const BatchOptions& options) override;
  BatchStatus poll(BatchId id) override;
  Status cancel(BatchId id) override;

 private:
  VerbsTransport() = default;
  Status validate(std::span<const Op> ops, const BatchOptions& options) const;
  // Registers a small CUDA buffer on rail 0, DMA-BUF first, then by device address, and records in caps_
  // which worked (gpu_path) or why neither did (gpu_probe.cpp).
  void probe_gpu();
  // The live connection to the transport `peer_address` describes, made (or remade, if broken) on demand.
  Result<std::shared_ptr<Connection>> connection_to(std::span<const std::byte> peer_address);
  // The listener's handler: a peer's request in, our reply out.
  Result<std::vector<std::byte>> on_request(std::span<const std::byte> request);

  VerbsOptions options_;
  std::string name_;
  Capabilities caps_;
  std::vector<std::shared_ptr<Device>> devices_;  // one per rail
  Handshake self_;                                // our Address message
  std::vector<std::byte> address_;                // encode(self_)
  std::atomic<bool> ready_{false};                // self_ and address_ are complete

  std::mutex connect_mu_;  // one outgoing handshake at a time
  std::mutex peers_mu_;
  std::map<std::uint64_t, std::shared_ptr<Connection>> outbound_;  // by peer instance
  std::map<std::uint64_t, std::shared_ptr<Connection>> inbound_;   // by peer instance, the latest accepted

  BatchTable batches_;

  std::vector<std::unique_ptr<Rail>> rails_;
  std::unique_ptr<Listener> listener_;  // last: stopped first, before anything it hands requests to
};

}  // namespace conduit::verbs
