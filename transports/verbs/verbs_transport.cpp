#include "verbs_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>

#include "../src/op_validation.h"
#include "../src/registration_checks.h"
#include "conduit/slicer.h"
#include "conduit/topology.h"
#include "device_choice.h"
#include "link.h"

namespace conduit::verbs {

namespace {

constexpr std::chrono::seconds kHandshakeTimeout{10};
constexpr std::size_t kMaxInbound = 1024;  // peer transports that may hold connections to us at once
// An ibv_sge length is 32 bits; keep slices well inside it.
constexpr std::uint64_t kMaxSlice = std::uint64_t{1} << 30;

struct DeviceList {
  DeviceListPtr list;
  std::vector<std::string> rc;                 // names of devices that run RC
  std::map<std::string, ibv_device*> by_name;  // all of them
};

// ibv_get_device_list with the reasons a person can act on.
Result<DeviceList> list_devices() {
  int n = 0;
  errno = 0;
  DeviceList out;
  out.list.reset(ibv_get_device_list(&n));
  if (!out.list) {
    const int err = errno;
    if (err == EPERM || err == EACCES) {
      return make_error(ErrorCode::Unavailable,
                        std::string("no permission to list RDMA devices (ibv_get_device_list: ") +
                            std::strerror(err) + ")");
    }
    // ENOSYS: the kernel exposes no verbs at all (no /sys/class/infiniband_verbs).
    if (err == 0 || err == ENOSYS || err == ENODEV || err == ENOENT) {
      return make_error(ErrorCode::Unavailable, "no RDMA device (ibv_get_device_list found none)");
    }
    return make_error(ErrorCode::Unavailable,
                      std::string("ibv_get_device_list failed: ") + std::strerror(err));
  }
  std::string others;
  for (int i = 0; i < n; ++i) {
    ibv_device* d = out.list.get()[i];
    const std::string name = ibv_get_device_name(d);
    out.by_name[name] = d;
    if (runs_rc(*d)) {
      out.rc.push_back(name);
    } else {
      others += (others.empty() ? "" : ", ") + name;
    }
  }
  if (n == 0) return make_error(ErrorCode::Unavailable, "no RDMA device (ibv_get_device_list found none)");
  if (out.rc.empty()) {
    return make_error(ErrorCode::Unavailable, "no RDMA device that runs RC queue pairs (found " + others +
                                                  "; EFA devices are used through libfabric's efa provider)");
  }
  return out;
}

// What stops a device from opening on this machine (permission, memlock, a port that is down) makes the
// backend unavailable here; a name or port that does not exist stays NotFound.
Error unavailable(const Error& e) {
  if (e.code == ErrorCode::NotFound || e.code == ErrorCode::InvalidArgument) return e;
  return make_error(ErrorCode::Unavailable, e.message);
}

Result<DeviceChoice> choose(const DeviceList& list, const VerbsOptions& options, int rails) {
  auto topology = Topology::scan(options.sysfs_root);
  return choose_devices(list.rc, options, topology ? &*topology : nullptr, rails);
}

std::uint64_t random_instance() {
  std::random_device rd;
  std::uint64_t v = 0;
  while (v == 0) v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return v;
}

}  // namespace

Result<std::unique_ptr<Transport>> open(const TransportConfig& config, const VerbsOptions& options) {
  return VerbsTransport::open(config, options);
}

Status probe(const VerbsOptions& options) {
  if (auto ok = options.validate(); !ok) return ok.error();
  auto list = list_devices();
  if (!list) return list.error();
  auto choice = choose(*list, options, 1);
  if (!choice) return choice.error();
  auto device = Device::open(list->by_name.at(choice->rails.front()), options);
  if (!device) return unavailable(device.error());
  return {};
}

Result<std::unique_ptr<Transport>> VerbsTransport::open(const TransportConfig& config,
                                                        const VerbsOptions& options) {
  if (auto ok = options.validate(); !ok) return ok.error();
  if (config.rails < 1 || config.rails > static_cast<int>(kMaxRails)) {
    return make_error(ErrorCode::InvalidArgument, "rails must be between 1 and 64");
  }
  auto list = list_devices();
  if (!list) return list.error();
  auto choice = choose(*list, options, config.rails);
  if (!choice) return choice.error();

  std::unique_ptr<VerbsTransport> t(new VerbsTransport());
  t->options_ = options;
  std::vector<std::string> distinct;
  for (const std::string& name : choice->rails) {
    auto device = Device::open(list->by_name.at(name), options);
    if (!device) return unavailable(device.error());
    if (std::find(distinct.begin(), distinct.end(), name) == distinct.end()) distinct.push_back(name);
    t->devices_.push_back(std::move(*device));
  }
  t->name_ = std::string(kProviderName) + ":";
  for (std::size_t i = 0; i < distinct.size(); ++i) t->name_ += (i == 0 ? "" : ",") + distinct[i];

  Capabilities& caps = t->caps_;
  caps.provider = kProviderName;
  caps.max_message = kMaxSlice;
  for (const auto& d : t->devices_) caps.max_message = std::min(caps.max_message, d->max_message());
  caps.ordered_waw = false;  // slices spread over several QPs and rails
  caps.manual_progress = false;
  caps.mr_mode_text = t->devices_.front()->dmabuf() ? "ibv_reg_mr|ibv_reg_dmabuf_mr" : "ibv_reg_mr";
  caps.rail_nics = choice->rails;
  t->probe_gpu();

  // Where peers reach our handshake listener: asked for, else the address the data path itself uses.
  std::string listen = options.listen;
  if (listen.empty()) listen = config.bind_address;
  if (listen.empty()) listen = ipv4_of(t->devices_.front()->info().gid);
  if (listen.empty()) listen = first_ipv4_address();
  if (listen.empty()) listen = "127.0.0.1";
  auto at = parse_endpoint(listen);
  if (!at) return at.error();

  t->self_.kind = HandshakeKind::Address;
  t->self_.instance = random_instance();
  for (const auto& d : t->devices_) t->self_.rails.push_back(d->info());

  for (std::uint32_t r = 0; r < t->devices_.size(); ++r) {
    t->rails_.push_back(std::make_unique<Rail>(t->devices_[r], Rail::Options{r, config.stall_timeout}));
  }
  // Started last: from here on peers may ask for connections. Requests wait for `ready_` (below).
  auto listener = Listener::start(
      *at, [p = t.get()](std::span<const std::byte> request) { return p->on_request(request); });
  if (!listener) return listener.error();
  t->self_.listener = (*listener)->endpoint();
  t->address_ = encode(t->self_);
  t->listener_ = std::move(*listener);
  t->ready_.store(true, std::memory_order_release);
  return std::unique_ptr<Transport>(std::move(t));
}

VerbsTransport::~VerbsTransport() {
  listener_.reset();  // no new connections
  rails_.clear();     // joins progress threads before the batches and connections they drive go
}

Result<Registration> VerbsTransport::register_memory(const MemoryRegion& region, Access access,
                                                     std::uint64_t offset, std::uint64_t length,
                                                     std::span<const std::uint32_t> rails) {
  if (region.data() == nullptr)
    return make_error(ErrorCode::InvalidArgument, "cannot register an empty region");
  auto chosen = registration_rails(access == Access::Local ? rails : std::span<const std::uint32_t>{},
                                   static_cast<int>(devices_.size()));
  if (!chosen) return chosen.error();
  auto range = registration_length(region, offset, length);
  if (!range) return range.error();
  length = *range;
  int flags = IBV_ACCESS_LOCAL_WRITE;  // the sink of a READ is written by the device
  if (allows(access, Access::RemoteRead)) flags |= IBV_ACCESS_REMOTE_READ;
  if (allows(access, Access::RemoteWrite)) flags |= IBV_ACCESS_REMOTE_WRITE;

  auto* start = static_cast<std::byte*>(region.data()) + offset;
  const auto iova = reinterpret_cast<std::uint64_t>(start);
  auto handles = std::make_unique<VerbsRegistration>();
  RemoteKey key;
  key.provider = kProviderName;
  key.base = iova;  // peers address the range by virtual address, as ibv_reg_mr does
  key.length = length;
  if (auto ok = check_memory_kind(region, caps_, name_); !ok) return ok.error();
  const bool device_memory = region.kind() == MemoryKind::Cuda;
  const bool dmabuf = device_memory && caps_.gpu_path == GpuPath::Dmabuf && region.dmabuf_fd() >= 0;
  for (const std::uint32_t r : *chosen) {
    const auto& device = devices_[r];
    // Host memory, and CUDA memory without a DMA-BUF (nvidia-peermem), register by address.
    Result<MrPtr> mr = dmabuf ? device->register_dmabuf(region.dmabuf_fd(), region.dmabuf_offset() + offset,
                                                        length, iova, flags)
                              : device->register_host(start, length, flags);
    if (!mr) return mr.error();
    key.rails.push_back(RailKey{address_, (*mr)->rkey});
    handles->rails.push_back({device, std::move(*mr)});
    handles->indices.push_back(r);
  }
  return Registration(start, length, std::move(key), std::move(handles));
}

Result<std::shared_ptr<Connection>> VerbsTransport::connection_to(std::span<const std::byte> peer_address) {
  auto peer = decode(peer_address);
  if (!peer) return peer.error();
  if (peer->kind != HandshakeKind::Address) {
    return make_error(ErrorCode::InvalidArgument,
                      "ibverbs peer address is a handshake " + std::string(to_string(peer->kind)));
  }
  auto live = [&]() -> std::shared_ptr<Connection> {
    std::lock_guard lock(peers_mu_);
    auto it = outbound_.find(peer->instance);
    return it != outbound_.end() && !it->second->broken() ? it->second : nullptr;
  };
  if (auto c = live()) return c;
  std::lock_guard connecting(connect_mu_);
  if (auto c = live()) return c;  // made by another thread while we waited

  auto connection = Connection::prepare(devices_, *peer, options_);
  if (!connection) return connection.error();
  auto reply_bytes = exchange(peer->listener, encode((*connection)->request(self_)), kHandshakeTimeout);
  if (!reply_bytes) return reply_bytes.error();
  auto reply = decode(*reply_bytes);
  if (!reply)
    return make_error(ErrorCode::Provider,
                      "reply from " + peer->listener.to_string() + ": " + reply.error().message);
  if (auto ok = (*connection)->complete(*reply, options_); !ok) return ok.error();
  std::lock_guard lock(peers_mu_);
  // Broken connections to other peers (gone, or not asked for since they failed) hold QPs for nothing;
  // batches still draining one keep it alive themselves.
  std::erase_if(outbound_, [](const auto& entry) { return entry.second->broken(); });
  outbound_[peer->instance] = *connection;
  return *connection;
}

Result<std::vector<std::byte>> VerbsTransport::on_request(std::span<const std::byte> request) {
  if (!ready_.load(std::memory_order_acquire)) {
    return make_error(ErrorCode::Unavailable, "the transport is still starting");
  }
  auto h = decode(request);
  if (!h) return h.error();
  {
    std::lock_guard lock(peers_mu_);
    if (inbound_.size() >= kMaxInbound && inbound_.count(h->instance) == 0) {
      return make_error(
          ErrorCode::ResourceExhausted,
          std::to_string(kMaxInbound) + " peer transports are connected to " + name_ + " already");
    }
  }
  auto connection = Connection::accept(devices_, *h, options_);
  if (!connection) return connection.error();
  Handshake reply = self_;
  reply.kind = HandshakeKind::Reply;
  reply.qps = (*connection)->reply_qps();
  std::lock_guard lock(peers_mu_);
  // A peer asks again only after its old connection broke: the newest replaces it.
  inbound_[h->instance] = std::move(*connection);
  return encode(reply);
}

Status VerbsTransport::validate(std::span<const Op> ops, const BatchOptions& options) const {
  OpRules rules;
  rules.provider = caps_.provider;
  rules.transport = name_;
  rules.max_message = caps_.max_message;
  rules.max_message_what = "the maximum message";
  rules.owns = [this](const Registration& local) {
    auto* handles = dynamic_cast<VerbsRegistration*>(local.handles());
    return handles != nullptr && !handles->rails.empty() &&
           handles->indices.size() == handles->rails.size() && handles->indices.back() < devices_.size() &&
           handles->rails.front().device == devices_[handles->indices.front()];
  };
  rules.key_problem = [](const RemoteKey& remote) -> std::optional<std::string> {
    for (const RailKey& rk : remote.rails) {
      if (rk.key > std::numeric_limits<std::uint32_t>::max())
        return "remote key exceeds 32 bits (not an rkey)";
    }
    return std::nullopt;
  };
  return validate_ops(ops, options, rules);
}

Result<BatchId> VerbsTransport::submit(std::span<const Op> ops, const BatchOptions& options) {
  if (auto ok = validate(ops, options); !ok) return ok.error();
  const auto nrails = static_cast<std::uint32_t>(rails_.size());

  // One connection per distinct peer: every rail of a RemoteKey carries the same address.
  std::vector<std::shared_ptr<Connection>> connections(ops.size());
  std::map<std::vector<std::byte>, std::shared_ptr<Connection>> resolved;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& address = ops[i].remote.rails.front().address;
    auto it = resolved.find(address);
    if (it == resolved.end()) {
      auto c = connection_to(address);
      if (!c) return make_error(c.error().code, "op " + std::to_string(i) + ": " + c.error().message);
      it = resolved.emplace(address, std::move(*c)).first;
    }
    connections[i] = it->second;
    for (std::uint32_t r = 0; r < nrails; ++r) {
      if (connections[i]->rail(r).peer_rail >= ops[i].remote.rails.size()) {
        return make_error(ErrorCode::InvalidArgument, "op " + std::to_string(i) + ": the remote key has " +
                                                          std::to_string(ops[i].remote.rails.size()) +
                                                          " rails, fewer than its address describes");
      }
    }
  }

  // An op goes out only on the rails its local registration was made on (the ones nearest its memory).
  std::vector<std::span<const std::uint32_t>> local_rails(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    local_rails[i] = static_cast<VerbsRegistration*>(ops[i].local->handles())->indices;
  }
  const RailSlices sliced = slice_on_rails(ops, options.slice_bytes, local_rails);
  auto batch = std::make_shared<Batch>(nrails, options);
  batch->reserve(sliced.slices);
  for (std::size_t j = 0; j < sliced.slices.size(); ++j) {
    const Slice& s = sliced.slices[j];
    const Op& op = ops[s.op];
    auto* handles = static_cast<VerbsRegistration*>(op.local->handles());
    const std::shared_ptr<Connection>& connection = connections[s.op];
    PostedOp p;
    p.batch = batch.get();
    p.connection = connection;
    p.kind = op.kind;
    p.local_address = reinterpret_cast<std::uint64_t>(op.local->address() + s.local_offset);
    p.lkey = handles->rails[sliced.lanes[j]].mr->lkey;
    p.remote_address = op.remote.base + s.remote_offset;
    p.rkey = static_cast<std::uint32_t>(op.remote.rails[connection->rail(s.rail).peer_rail].key);
    p.length = static_cast<std::uint32_t>(s.length);
    batch->parts[s.rail].ops.push_back(std::move(p));
  }
  return batches_.start(batch, rails_);
}

BatchStatus VerbsTransport::poll(BatchId id) { return batches_.poll(id); }

// Posted work requests are not flushed: on RC each completes, or fails once the retry count is spent, so
// the rails reap them and close the batch's parts without tearing the connection down for other batches.
Status VerbsTransport::cancel(BatchId id) {
  if (auto s = batches_.cancel(id); !s) return s;
  for (const auto& rail : rails_) rail->wake();
  return {};
}

}  // namespace conduit::verbs
