// The one seam of the data plane: every backend (libfabric providers, ibverbs) implements Transport, and
// nothing above it knows which backend runs. One-sided only: the target registers memory and hands out a
// RemoteKey; the initiator writes into or reads from it while the target's CPU merely drives progress.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/op_kind.h"
#include "conduit/common/result.h"
#include "conduit/memory_region.h"
#include "conduit/remote_key.h"
#include "conduit/verbs_options.h"

namespace conduit {

// What a registration lets peers do. Local use (as the source of a write or sink of a read) is always
// allowed.
enum class Access : std::uint8_t { Local = 0, RemoteRead = 1, RemoteWrite = 2, RemoteReadWrite = 3 };

inline bool allows(Access have, Access want) {
  return (static_cast<unsigned>(have) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

// A registered range. Owns the backend's handles: destroying (or reset()) deregisters, after which the
// RemoteKey it handed out no longer works. Must outlive every batch that uses it.
class Registration {
 public:
  struct Handles {
    virtual ~Handles() = default;
  };

  Registration() = default;
  Registration(std::byte* address, std::uint64_t length, RemoteKey key, std::unique_ptr<Handles> handles)
      : address_(address), length_(length), key_(std::move(key)), handles_(std::move(handles)) {}

  std::byte* address() const { return address_; }
  std::uint64_t length() const { return length_; }
  const RemoteKey& remote_key() const { return key_; }
  Handles* handles() const { return handles_.get(); }
  bool valid() const { return handles_ != nullptr; }
  void reset() { handles_.reset(); }

 private:
  std::byte* address_ = nullptr;
  std::uint64_t length_ = 0;
  RemoteKey key_;
  std::unique_ptr<Handles> handles_;
};

// Move `length` bytes between [local_offset, +length) of a local registration and [remote_offset, +length)
// of the range behind `remote`. Write: local -> remote. Read: remote -> local.
struct Op {
  OpKind kind = OpKind::Write;
  const Registration* local = nullptr;
  std::uint64_t local_offset = 0;
  RemoteKey remote;
  std::uint64_t remote_offset = 0;
  std::uint64_t length = 0;
};

// A batch goes on the wire in slices of `slice_bytes` (what the API and TransferJob call chunkBytes).
struct BatchOptions {
  BatchOptions(std::uint64_t slice = 1u << 20, std::uint32_t in_flight = 16,
               std::function<void()> finished = {})
      : slice_bytes(slice), window(in_flight), on_finished(std::move(finished)) {}

  std::uint64_t slice_bytes;
  std::uint32_t window;  // posted operations of this batch in flight on each rail (a slice each, or
                         // several small ones where a backend joins them)
  // Called once as the batch finishes (from then on poll() reports it finished), on the transport's thread
  // that saw it end, or in submit() itself: so that whoever waits on the batch is woken instead of polling
  // for it. It must return at once and not call into the transport.
  std::function<void()> on_finished;
};

// `finished` means every byte is visible at the target (writes) or in local memory (reads), not merely sent.
// A cancelled batch finishes with an ErrorCode::Cancelled error once none of its slices is in flight.
struct BatchStatus {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  bool finished = false;
  std::optional<Error> error;  // set once the batch failed; finished is then true as well
};

using BatchId = std::uint64_t;

// How a transport reaches CUDA memory, decided when it opens by registering a probe buffer. Dmabuf and
// Peermem register device memory with the NIC (GPU-direct); Staged moves it through pinned host bounce
// buffers (docs/gpu.md); None: CUDA is not usable in this process (no build support, driver or device).
enum class GpuPath : std::uint8_t { None, Dmabuf, Peermem, Staged };
std::string_view to_string(GpuPath path);  // "none" | "dmabuf" | "peermem" | "staged"

struct Capabilities {
  std::string provider;
  bool device_memory = false;  // registers CUDA memory directly (FI_HMEM / dmabuf); else staged
  GpuPath gpu_path = GpuPath::None;
  std::string gpu_path_detail;  // why not a better path: the probe's own error text, or CUDA's reason
  std::uint64_t max_message = 0;
  bool ordered_waw = false;  // writes land in order: the last one delivered proves the earlier ones
  bool manual_progress = true;
  std::string mr_mode_text;  // the provider's FI_MR_* bits by name ("ibv_reg_mr" for ibverbs)
  // The NIC each rail sits on (its /sys/class/infiniband name), so a region can be registered on the rails
  // nearest its memory (conduit/rail_choice.h). Empty where every rail is an endpoint on one interface
  // (tcp, shm): there is nothing to choose between.
  std::vector<std::string> rail_nics;
  // The local IP each rail's endpoint is bound to, where its address is a socket address (tcp): what ties a
  // rail that names no NIC to the interface carrying it (conduit/net_interface.h, docs/path.md). Empty
  // for providers without one (shm, efa, verbs).
  std::vector<std::string> rail_addresses;
};

// How an idle libfabric progress thread waits. Fd: sleep in poll() on the CQ's wait fd (tcp). Backoff: spin
// briefly, then sleep with growing intervals (providers without a wait fd, e.g. shm). Spin: never sleep
// (costs a core; the baseline the other two are measured against). Auto: Fd where the CQ has a wait fd, else
// Backoff; Fd asked of a provider without one gets Backoff too.
enum class ProgressMode : std::uint8_t { Auto, Fd, Backoff, Spin };
std::string_view to_string(ProgressMode mode);  // "auto" | "fd" | "backoff" | "spin"

// How to open one transport. Every field is a value the caller chose (the agent from its options,
// conduit-bench from its flags): no backend reads settings of its own from the environment.
struct TransportConfig {
  std::string provider = "auto";  // tcp | shm | efa | verbs | ibverbs | auto, or the full "tcp;ofi_rxm" form
  int rails = 1;                  // endpoints to stripe over (NICs on a real node)
  std::string bind_address;       // tcp/verbs: local IP to bind; empty = the provider's default interface
  std::chrono::milliseconds stall_timeout{30000};  // fail a batch with no completion for this long
  ProgressMode progress = ProgressMode::Auto;      // libfabric providers: how idle rails wait
  verbs::VerbsOptions ibverbs{};                   // provider "ibverbs": devices, queues, link settings
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;  // "libfabric:tcp;ofi_rxm"
  virtual const Capabilities& capabilities() const = 0;
  virtual int rails() const = 0;
  virtual std::vector<std::byte> address() const = 0;  // what a peer needs to reach every rail of ours

  static constexpr std::uint64_t kWholeRegion = std::numeric_limits<std::uint64_t>::max();
  // `rails`: the rails to register on (ascending indices, conduit/rail_choice.h); empty = every rail. The
  // RemoteKey names only those rails, and batches whose local side is this registration go out only on
  // them. InvalidArgument for an index out of range.
  virtual Result<Registration> register_memory(const MemoryRegion& region, Access access,
                                               std::uint64_t offset = 0, std::uint64_t length = kWholeRegion,
                                               std::span<const std::uint32_t> rails = {}) = 0;

  // Validates every op (bounds, keys, provider) before posting anything, then runs the batch in the
  // background. A finished batch is forgotten after poll() has reported it once.
  virtual Result<BatchId> submit(std::span<const Op> ops, const BatchOptions& options = {}) = 0;
  virtual BatchStatus poll(BatchId id) = 0;
  // Stops a batch without waiting: slices not yet posted never will be; those in flight complete (or fail)
  // and are reaped. poll() reports it finished, with ErrorCode::Cancelled, once none is in flight, so the
  // memory its ops name may then be freed (not the target's: tcp completes writes once sent, so sent bytes
  // may land there later). A slice that never completes is given up after the stall timeout, as in any
  // batch. A batch that already finished keeps its outcome; NotFound for an unknown (or already reported)
  // id.
  virtual Status cancel(BatchId id) = 0;
  // Unavailable, saying why, once some rail can never move bytes again and only a restart of the process
  // brings it back (libfabric's shm wedged by a peer killed inside its lock); ok otherwise. What the
  // agent's /healthz answers, so that a supervisor restarts it.
  virtual Status health() { return {}; }
};

// Opens a backend for `config.provider`. Unknown names are NotFound; known but absent ones Unavailable.
Result<std::unique_ptr<Transport>> open_transport(const TransportConfig& config);

// The rails a register_memory call asked for, checked: ascending, no repeats, each below `rails`; empty
// asks for all of them. Shared by the backends so they read the argument alike.
Result<std::vector<std::uint32_t>> registration_rails(std::span<const std::uint32_t> asked, int rails);

// Runs poll() until the batch finishes, sleeping between polls (the transport progresses on its own).
BatchStatus wait(Transport& transport, BatchId id);

}  // namespace conduit
