// The libfabric backend of Transport: one Endpoint and progress Rail per rail, batches sliced and dealt
// over the rails, delivery proven by FI_DELIVERY_COMPLETE on the last write (WAW-ordered providers) or on
// every write.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../src/batch_table.h"
#include "batch.h"
#include "conduit/transport.h"
#include "rail.h"

namespace conduit::fabric {

class LibfabricTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> open(const TransportConfig& config);
  ~LibfabricTransport() override;

  std::string_view name() const override { return name_; }
  const Capabilities& capabilities() const override { return caps_; }
  int rails() const override { return static_cast<int>(rails_.size()); }
  std::vector<std::byte> address() const override;

  Result<Registration> register_memory(const MemoryRegion& region, Access access, std::uint64_t offset,
                                       std::uint64_t length, std::span<const std::uint32_t> rails) override;
  Result<BatchId> submit(std::span<const Op> ops, const BatchOptions& options) override;
  BatchStatus poll(BatchId id) override;
  Status cancel(BatchId id) override;
  Status health() override;

 private:
  LibfabricTransport() = default;
  static Result<std::unique_ptr<Transport>> open_provider(const std::string& provider,
                                                          const TransportConfig& config);
  // Every rail of `provider`, asking for FI_HMEM endpoints when `hmem`.
  static Result<std::unique_ptr<LibfabricTransport>> open_rails(const std::string& provider,
                                                                const TransportConfig& config, bool hmem);
  // Registers a small CUDA buffer on rail 0, DMA-BUF first, then by device address, and records in caps_
  // which worked (gpu_path) or why neither did (cuda_registration.cpp).
  void probe_gpu();
  Status validate(std::span<const Op> ops, const BatchOptions& options) const;
  // Fails the batches with work on a wedged rail (Rail::wedged), which would otherwise never finish.
  void fail_wedged();

  // Slices up to this size share a posted operation (batch.h), up to max_ranges_ of them: the most both
  // the provider's iov limits and PostedOp allow; 1 where the provider takes a single range.
  static constexpr std::uint64_t kJoinedSliceMax = 64 << 10;

  std::string name_;
  Capabilities caps_;
  std::uint32_t max_ranges_ = 1;
  std::vector<std::unique_ptr<Rail>> rails_;

  BatchTable batches_;
};

// The multi-rail address: for each rail a 16-bit little-endian length and that many bytes.
std::vector<std::byte> encode_rail_addresses(const std::vector<std::vector<std::byte>>& rails);

}  // namespace conduit::fabric
