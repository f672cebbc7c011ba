// The part of a transfer that differs when GPU memory is involved: preparing the source (a registration,
// or a staged source where the transport cannot take CUDA memory), and moving a range piece by piece so
// that a staged source copies through its bounce slots and a staged target copies each landed piece to
// its device. Host-to-host transfers take the plain path here too. docs/gpu.md.
#include <algorithm>

#include "conduit/log.h"
#include "metrics/agent_metrics.h"
#include "staged_target.h"
#include "transfer_job.h"

namespace conduit::agent {

using job::Failure;
using job::SteadyClock;

namespace {

// Each staged source holds two slots of this much pinned memory; each piece is one batch (unit of retry).
constexpr std::uint64_t kMaxStageSlot = 32ULL << 20;

Failure staging_failure(const Error& e, const std::string& what) {
  const char* why = e.code == ErrorCode::PeerUnreachable ? reason::kPeerUnreachable : reason::kTransportError;
  return Failure{TransferState::Failed, why, what + ": " + e.message};
}

}  // namespace

StagedSource* TransferManager::Transfer::staged_source(const Transport* transport) const {
  for (const auto& [t, s] : staged) {
    if (t == transport) return s.get();
  }
  return nullptr;
}

std::optional<Failure> TransferManager::Transfer::prepare(TransferManager& m, Transport& transport) {
  const MemoryRegion& memory = source->memory();
  const auto t0 = SteadyClock::now();
  const Capabilities& caps = transport.capabilities();
  // The rails nearest the source's memory; a staged source's bounce slots take its GPU's rails too.
  const RailChoice rails = m.fabric_.rails_for(transport, memory);
  {
    std::lock_guard lock(mu);
    for (const auto& nic : rails.nics) {
      if (std::find(status.source_nics.begin(), status.source_nics.end(), nic) == status.source_nics.end())
        status.source_nics.push_back(nic);
    }
  }
  if (memory.kind() == MemoryKind::Cuda && !caps.device_memory) {
    const std::uint64_t slot =
        std::min(length, std::max(request.chunk_bytes, std::min(m.options_.segment_bytes, kMaxStageSlot)));
    auto s = StagedSource::open(memory, transport, slot, {}, {}, rails.rails);
    if (!s) {
      return Failure{TransferState::Failed, reason::kRegistrationFailed,
                     "staging the CUDA source through host memory on " + std::string(transport.name()) +
                         ": " + s.error().message};
    }
    staged.emplace_back(&transport, std::move(*s));
    {
      std::lock_guard lock(mu);
      status.gpu_path = std::string(to_string(GpuPath::Staged));
    }
    if (m.metrics_ != nullptr) m.metrics_->staged_fallback();
    log::info("CUDA source staged through host bounce buffers", {{"transfer", status.id},
                                                                 {"transport", std::string(transport.name())},
                                                                 {"why", caps.gpu_path_detail}});
  } else {
    auto reg = transport.register_memory(memory, Access::Local, request.offset, length, rails.rails);
    if (!reg) {
      return Failure{TransferState::Failed, reason::kRegistrationFailed,
                     "registering the source range: " + reg.error().message};
    }
    registrations.emplace_back(&transport, std::move(*reg));
    if (memory.kind() == MemoryKind::Cuda) {
      std::lock_guard lock(mu);
      // A staged path on another target's transport stays the visible one.
      if (status.gpu_path != to_string(GpuPath::Staged))
        status.gpu_path = std::string(to_string(caps.gpu_path));
    }
  }
  if (m.metrics_ != nullptr) m.metrics_->observe_registration(job::seconds(SteadyClock::now() - t0));
  return std::nullopt;
}

std::optional<Failure> TransferManager::Transfer::move_range(
    TransferManager& m, std::size_t target, std::uint64_t begin, std::uint64_t end, std::uint64_t piece,
    const std::function<void(std::uint64_t)>& progress,
    const std::function<std::optional<Failure>(std::uint64_t)>& landed) {
  const TransferTarget& t = request.targets[target];
  Transport& transport = *transports[target];
  const bool staged_target = t.grant.staged;
  LandingNotices notices(m.peers_, t.url, t.region, t.region_offset + t.offset);

  // One piece [pos, +n) of the range between `local` at `local_offset` and the target.
  auto one = [&](std::uint64_t pos, std::uint64_t n, const Registration& local,
                 std::uint64_t local_offset) -> std::optional<Failure> {
    if (staged_target && request.op == OpKind::Read) {
      // The target copies the piece from its device into the staging buffer we read from.
      if (auto s =
              m.peers_.staging(t.url, t.region, t.region_offset + t.offset + pos, n, /*to_device=*/false);
          !s) {
        return staging_failure(s.error(), "the target agent could not stage CUDA memory for reading");
      }
    }
    const std::vector<Op> ops{Op{request.op, &local, local_offset, t.grant, t.offset + pos, n}};
    if (auto f = move(m, transport, ops, [&](std::uint64_t done) { progress(pos + done); })) return f;
    if (!staged_target || request.op == OpKind::Read) return landed(pos + n);
    // Landed in the target's staging buffer: the target copies it to its device while the next piece goes.
    if (auto s = notices.push(pos, n); !s) {
      return staging_failure(s.error(), "the target agent could not copy landed bytes to CUDA memory");
    }
    return notices.confirmed_end() > begin ? landed(notices.confirmed_end()) : std::nullopt;
  };

  StagedSource* stage = staged_source(&transport);
  if (stage == nullptr) {
    const Registration& local = registration(&transport);
    for (std::uint64_t pos = begin; pos < end;) {
      const std::uint64_t n = std::min(piece, end - pos);
      if (auto f = one(pos, n, local, pos)) return f;
      pos += n;
    }
  } else {
    std::optional<Failure> failure;
    const auto direction =
        request.op == OpKind::Write ? cuda::StageDirection::Outbound : cuda::StageDirection::Inbound;
    // Device offsets are the region's; range offsets start at request.offset.
    const Status s = stage->run(
        direction, request.offset + begin, request.offset + end, [&](const cuda::StagePiece& p) -> Status {
          failure = one(p.offset - request.offset, p.length, stage->registration(), p.slot_offset);
          if (failure) return make_error(ErrorCode::Cancelled, failure->message);
          return {};
        });
    if (failure) return failure;
    if (!s) return staging_failure(s.error(), "staging CUDA memory through host bounce buffers");
  }
  if (staged_target && request.op == OpKind::Write) {
    if (auto s = notices.finish(); !s) {
      return staging_failure(s.error(), "the target agent could not copy landed bytes to CUDA memory");
    }
    if (end > begin) return landed(end);
  }
  return std::nullopt;
}

}  // namespace conduit::agent
