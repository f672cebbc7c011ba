#include "libfabric_transport.h"

#include <rdma/fi_domain.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "../src/op_validation.h"
#include "../src/registration_checks.h"
#include "conduit/cuda_device.h"
#include "conduit/net_interface.h"
#include "conduit/slicer.h"
#include "mr_mode.h"
#include "provider.h"

namespace conduit::fabric {

std::vector<std::byte> encode_rail_addresses(const std::vector<std::vector<std::byte>>& rails) {
  std::vector<std::byte> blob;
  for (const auto& a : rails) {
    blob.push_back(static_cast<std::byte>(a.size() & 0xff));
    blob.push_back(static_cast<std::byte>(a.size() >> 8));
    blob.insert(blob.end(), a.begin(), a.end());
  }
  return blob;
}

Result<std::unique_ptr<Transport>> LibfabricTransport::open(const TransportConfig& config) {
  if (config.rails < 1 || config.rails > 64) {
    return make_error(ErrorCode::InvalidArgument, "rails must be between 1 and 64");
  }
  auto provider = canonical_provider(config.provider);
  if (!provider) return provider.error();
  if (*provider != "auto") return open_provider(*provider, config);
  std::string tried;
  for (std::string_view candidate : auto_providers()) {
    auto t = open_provider(std::string(candidate), config);
    if (t) return t;
    tried += "\n  " + t.error().message;
  }
  return make_error(ErrorCode::Unavailable, "no RDMA-capable libfabric provider found:" + tried);
}

// Where CUDA is usable, an FI_HMEM endpoint whose probe registers device memory is kept (GPU-direct);
// otherwise the plain endpoint, exactly as without CUDA, and CUDA memory goes the staged way.
Result<std::unique_ptr<Transport>> LibfabricTransport::open_provider(const std::string& provider,
                                                                     const TransportConfig& config) {
  const cuda::Availability& gpu = cuda::availability();
  std::string why_staged;
  if (gpu.usable()) {
    auto hmem = open_rails(provider, config, /*hmem=*/true);
    if (hmem) {
      (*hmem)->probe_gpu();
      if ((*hmem)->caps_.device_memory) return std::unique_ptr<Transport>(std::move(*hmem));
      why_staged = (*hmem)->caps_.gpu_path_detail;
    } else {
      why_staged = hmem.error().message;
    }
  }
  auto t = open_rails(provider, config, /*hmem=*/false);
  if (!t) return t.error();
  (*t)->caps_.gpu_path = gpu.usable() ? GpuPath::Staged : GpuPath::None;
  (*t)->caps_.gpu_path_detail = gpu.usable() ? why_staged : gpu.reason;
  return std::unique_ptr<Transport>(std::move(*t));
}

Result<std::unique_ptr<LibfabricTransport>> LibfabricTransport::open_rails(const std::string& provider,
                                                                           const TransportConfig& config,
                                                                           bool hmem) {
  auto infos = query_provider(provider, config.bind_address, hmem);
  if (!infos) return infos.error();
  // fi_getinfo orders entries by preference and may return layered variants; keep exactly the provider
  // asked for.
  std::vector<const fi_info*> entries;
  for (const fi_info* i = infos->get(); i != nullptr; i = i->next) {
    if (provider == i->fabric_attr->prov_name) entries.push_back(i);
  }
  if (entries.empty()) {
    return make_error(ErrorCode::Unavailable,
                      "provider " + provider + " offers no RDM endpoint with RMA here");
  }
  const fi_info& first = *entries.front();
  auto policy = mr_policy(static_cast<std::uint64_t>(first.domain_attr->mr_mode));
  if (!policy) return make_error(policy.error().code, provider + ": " + policy.error().message);

  std::unique_ptr<LibfabricTransport> t(new LibfabricTransport());
  t->name_ = "libfabric:" + provider;
  t->caps_.provider = provider;
  t->caps_.device_memory = false;  // set by probe_gpu() where device memory registers
  t->caps_.max_message = first.ep_attr->max_msg_size;
  t->caps_.ordered_waw = (first.tx_attr->msg_order & FI_ORDER_WAW) != 0;
  t->caps_.manual_progress = first.domain_attr->data_progress == FI_PROGRESS_MANUAL;
  t->caps_.mr_mode_text = mr_mode_to_string(static_cast<std::uint64_t>(first.domain_attr->mr_mode));
  t->max_ranges_ = std::clamp<std::uint32_t>(
      static_cast<std::uint32_t>(std::min(first.tx_attr->iov_limit, first.tx_attr->rma_iov_limit)), 1,
      kMaxRanges);

  // NICs with a domain each (efa, verbs devices) take the rails in turn, and each rail records its NIC so
  // a region can be registered on the rails nearest its memory. tcp and shm have one domain per interface:
  // their rails are further endpoints on the first one, all on the same interface, so there is no NIC to
  // choose and rail_nics stays empty (every region uses every rail).
  const bool domain_per_nic = provider == "efa" || provider == "verbs;ofi_rxm";
  for (int r = 0; r < config.rails; ++r) {
    const fi_info& info = domain_per_nic ? *entries[r % entries.size()] : first;
    if (domain_per_nic) {
      t->caps_.rail_nics.push_back(
          nic_of_domain(provider, info.domain_attr->name != nullptr ? info.domain_attr->name : ""));
    }
    auto endpoint = Endpoint::open(info, *policy);
    if (!endpoint) {
      return make_error(endpoint.error().code,
                        provider + " rail " + std::to_string(r) + ": " + endpoint.error().message);
    }
    Rail::Options options;
    options.index = static_cast<std::uint32_t>(r);
    options.mode = choose_progress_mode(config.progress, **endpoint);
    options.stall_timeout = config.stall_timeout;
    if (info.addr_format == FI_SOCKADDR_IN || info.addr_format == FI_SOCKADDR_IN6 ||
        info.addr_format == FI_SOCKADDR) {
      const std::vector<std::byte>& name = (*endpoint)->address();
      if (std::string host = numeric_host(name.data(), name.size()); !host.empty())
        t->caps_.rail_addresses.push_back(std::move(host));
    }
    t->rails_.push_back(std::make_unique<Rail>(std::move(*endpoint), options));
  }
  // All or none: a provider whose rails name no address says so with an empty list.
  if (t->caps_.rail_addresses.size() != t->rails_.size()) t->caps_.rail_addresses.clear();
  return t;
}

LibfabricTransport::~LibfabricTransport() {
  // A wedged rail's thread never returns from the provider, so joining it would hang this process's
  // shutdown: that rail, its endpoint and its batches are left for the process's exit.
  // Kept reachable, not just released, so leak checkers see what they are.
  static std::mutex abandoned_mu;
  static auto* abandoned = new std::vector<std::unique_ptr<Rail>>();
  for (auto& rail : rails_) {
    if (!rail->wedged()) continue;
    std::lock_guard lock(abandoned_mu);
    abandoned->push_back(std::move(rail));
  }
  rails_.clear();  // joins progress threads before the batches they drive go away
}

std::vector<std::byte> LibfabricTransport::address() const {
  std::vector<std::vector<std::byte>> addresses;
  for (const auto& r : rails_) addresses.push_back(r->endpoint()->address());
  return encode_rail_addresses(addresses);
}

Result<Registration> LibfabricTransport::register_memory(const MemoryRegion& region, Access access,
                                                         std::uint64_t offset, std::uint64_t length,
                                                         std::span<const std::uint32_t> rails) {
  if (region.data() == nullptr)
    return make_error(ErrorCode::InvalidArgument, "cannot register an empty region");
  auto chosen = registration_rails(rails, static_cast<int>(rails_.size()));
  if (!chosen) return chosen.error();
  if (auto ok = check_memory_kind(region, caps_, name_); !ok) return ok.error();
  const bool device = region.kind() == MemoryKind::Cuda;
  auto range = registration_length(region, offset, length);
  if (!range) return range.error();
  length = *range;
  std::uint64_t flags = FI_READ | FI_WRITE;
  if (allows(access, Access::RemoteRead)) flags |= FI_REMOTE_READ;
  if (allows(access, Access::RemoteWrite)) flags |= FI_REMOTE_WRITE;

  auto* start = static_cast<std::byte*>(region.data()) + offset;
  auto handles = std::make_unique<FabricRegistration>();
  RemoteKey key;
  key.provider = caps_.provider;
  key.length = length;
  Endpoint::Hmem hmem;
  if (device) {
    hmem.device = region.device();
    if (caps_.gpu_path == GpuPath::Dmabuf && region.dmabuf_fd() >= 0) {
      hmem.dmabuf_fd = region.dmabuf_fd();
      hmem.dmabuf_offset = region.dmabuf_offset() + offset;
    }
  }
  for (const std::uint32_t r : *chosen) {
    const auto& rail = rails_[r];
    auto mr = rail->endpoint()->register_range(start, length, flags, device ? &hmem : nullptr);
    if (!mr) return mr.error();
    key.rails.push_back(RailKey{rail->endpoint()->address(), fi_mr_key(mr->get())});
    handles->rails.push_back({rail->endpoint(), std::move(*mr)});
    handles->indices.push_back(r);
  }
  // Under FI_MR_VIRT_ADDR peers address our memory by virtual address; otherwise by offset into the MR.
  key.base =
      rails_.front()->endpoint()->policy().virtual_address ? reinterpret_cast<std::uint64_t>(start) : 0;
  return Registration(start, length, std::move(key), std::move(handles));
}

Status LibfabricTransport::validate(std::span<const Op> ops, const BatchOptions& options) const {
  OpRules rules;
  rules.provider = caps_.provider;
  rules.transport = name_;
  rules.max_message = caps_.max_message != 0 ? caps_.max_message : std::numeric_limits<std::uint64_t>::max();
  rules.max_message_what = "the provider's maximum message";
  rules.owns = [this](const Registration& local) {
    auto* handles = dynamic_cast<FabricRegistration*>(local.handles());
    return handles != nullptr && !handles->rails.empty() &&
           handles->indices.size() == handles->rails.size() && handles->indices.back() < rails_.size() &&
           handles->rails.front().endpoint == rails_[handles->indices.front()]->endpoint();
  };
  return validate_ops(ops, options, rules);
}

Result<BatchId> LibfabricTransport::submit(std::span<const Op> ops, const BatchOptions& options) {
  if (auto ok = validate(ops, options); !ok) return ok.error();
  const auto nrails = static_cast<std::uint32_t>(rails_.size());

  // An op goes out only on the rails its local registration was made on (the ones nearest its memory).
  // The i-th of them talks to remote key rail i mod (the key's rails): keys name only the target's chosen
  // rails, and the two sides may have chosen different counts. Resolve each pair once. A wedged rail
  // (Rail::wedged) takes nothing more.
  struct Target {
    fi_addr_t peer;
    std::uint64_t key;
  };
  std::vector<std::vector<Target>> targets(ops.size());
  std::vector<std::span<const std::uint32_t>> local_rails(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    local_rails[i] = static_cast<FabricRegistration*>(ops[i].local->handles())->indices;
    for (std::size_t k = 0; k < local_rails[i].size(); ++k) {
      const auto& rail = rails_[local_rails[i][k]];
      if (auto why = rail->wedged()) return make_error(ErrorCode::Unavailable, why->message);
      const RailKey& rk = ops[i].remote.rails[k % ops[i].remote.rails.size()];
      auto peer = rail->endpoint()->resolve(rk.address);
      if (!peer) return peer.error();
      targets[i].push_back(Target{*peer, rk.key});
    }
  }
  const RailSlices sliced = slice_on_rails(ops, options.slice_bytes, local_rails);
  auto batch = std::make_shared<Batch>(nrails, options);
  batch->reserve(sliced.slices);

  // "Finished" must mean "visible at the target". Where writes land in order (tcp: WAW), only the last
  // write to each target on each rail asks for FI_DELIVERY_COMPLETE: its completion proves the earlier
  // ones (asking on every write costs 18-42% on tcp). Elsewhere (shm) every write asks.
  std::vector<std::map<std::pair<fi_addr_t, std::uint64_t>, std::size_t>> last_write(nrails);
  for (std::size_t j = 0; j < sliced.slices.size(); ++j) {
    const Slice& s = sliced.slices[j];
    const std::uint32_t lane = sliced.lanes[j];
    const Op& op = ops[s.op];
    const Target& target = targets[s.op][lane];
    auto* handles = static_cast<FabricRegistration*>(op.local->handles());
    const iovec local{op.local->address() + s.local_offset, s.length};
    void* desc = fi_mr_desc(handles->rails[lane].mr.get());
    const fi_rma_iov remote{op.remote.base + s.remote_offset, s.length, target.key};
    std::vector<PostedOp>& posted = batch->parts[s.rail].ops;
    // A small slice joins the rail's previous operation when that one goes to the same peer and key the
    // same way: tcp's cost is per message (1,000 scattered 16 KiB writes: 1.4 GB/s one per message, 2.1
    // four per message, on a bare endpoint), and a big slice already fills its message.
    PostedOp* joined = nullptr;
    if (!posted.empty() && s.length <= kJoinedSliceMax) {
      PostedOp& last = posted.back();
      if (last.ranges < max_ranges_ && last.kind == op.kind && last.peer == target.peer &&
          last.key == target.key && last.local[0].iov_len <= kJoinedSliceMax)
        joined = &last;
    }
    if (joined == nullptr) {
      PostedOp& p = posted.emplace_back();
      p.batch = batch.get();
      p.rail = s.rail;
      p.kind = op.kind;
      p.ranges = 0;
      p.peer = target.peer;
      p.key = target.key;
      p.deliver = op.kind == OpKind::Write && !caps_.ordered_waw;
      joined = &p;
    }
    joined->local[joined->ranges] = local;
    joined->desc[joined->ranges] = desc;
    joined->remote[joined->ranges] = remote;
    ++joined->ranges;
    joined->length += s.length;
    if (op.kind == OpKind::Write) last_write[s.rail][{target.peer, target.key}] = posted.size() - 1;
  }
  for (std::uint32_t r = 0; r < nrails; ++r) {
    for (const auto& [_, index] : last_write[r]) batch->parts[r].ops[index].deliver = true;
  }
  return batches_.start(batch, rails_);
}

BatchStatus LibfabricTransport::poll(BatchId id) {
  fail_wedged();
  return batches_.poll(id);
}

Status LibfabricTransport::health() {
  for (const auto& rail : rails_) {
    if (auto why = rail->wedged()) return make_error(ErrorCode::Unavailable, why->message);
  }
  return {};
}

void LibfabricTransport::fail_wedged() {
  for (std::uint32_t r = 0; r < rails_.size(); ++r) {
    auto why = rails_[r]->wedged();
    if (!why) continue;
    // A part's op list is fixed at submit, so reading it here does not race the (stuck) progress thread.
    batches_.fail_if(
        [r](const BatchProgress& b) { return !static_cast<const Batch&>(b).parts[r].ops.empty(); }, *why);
  }
}

// libfabric cannot take back an RMA operation once posted (fi_cancel is for receives), so in-flight slices
// are waited out: the rails reap their completions and close the batch's parts.
Status LibfabricTransport::cancel(BatchId id) {
  if (auto s = batches_.cancel(id); !s) return s;
  for (const auto& rail : rails_) rail->wake();
  return {};
}

}  // namespace conduit::fabric
