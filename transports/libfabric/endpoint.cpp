#include "endpoint.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "conduit/common/random.h"
#include "shm_names.h"

namespace conduit::fabric {

namespace {

Error fi_error(const char* call, int rc) {
  return make_error(ErrorCode::Provider, std::string(call) + ": " + fi_strerror(rc < 0 ? -rc : rc));
}

// A key the application picks, from the kernel's CSPRNG: with the base 0 (offsets) or a plain virtual
// address, the key is all that keeps a peer who can reach our endpoint from writing into a granted range it
// was never given, so it must not be guessable (a counter made the first grant's key 1).
std::uint64_t random_key(std::uint64_t mask) {
  for (;;) {
    const std::uint64_t key = conduit::secure_random64() & mask;
    if (key != 0) return key;
  }
}

}  // namespace

Result<std::shared_ptr<Endpoint>> Endpoint::open(const fi_info& info, const MrPolicy& policy) {
  std::shared_ptr<Endpoint> e(new Endpoint());
  e->policy_ = policy;
  if (info.domain_attr != nullptr && info.domain_attr->mr_key_size > 0 && info.domain_attr->mr_key_size < 8) {
    e->key_mask_ = (std::uint64_t{1} << (8 * info.domain_attr->mr_key_size)) - 1;
  }
  fi_info& mutable_info = const_cast<fi_info&>(info);  // libfabric's open calls take non-const pointers

  fid_fabric* fabric = nullptr;
  if (int rc = fi_fabric(info.fabric_attr, &fabric, nullptr); rc != 0) return fi_error("fi_fabric", rc);
  e->fabric_.reset(fabric);

  fid_domain* domain = nullptr;
  if (int rc = fi_domain(fabric, &mutable_info, &domain, nullptr); rc != 0) return fi_error("fi_domain", rc);
  e->domain_.reset(domain);

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  if (int rc = fi_av_open(domain, &av_attr, &av, nullptr); rc != 0) return fi_error("fi_av_open", rc);
  e->av_.reset(av);

  // A pollable fd lets an idle progress thread sleep in the kernel until the peer sends something, instead
  // of spinning a core away. Providers without one (shm) get FI_WAIT_NONE and a polling backoff.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = 4096;
  cq_attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (int rc = fi_cq_open(domain, &cq_attr, &cq, nullptr); rc != 0) return fi_error("fi_cq_open", rc);
  } else if (fi_control(&cq->fid, FI_GETWAIT, &e->wait_fd_) != 0) {
    e->wait_fd_ = -1;
  }
  e->cq_.reset(cq);

  fid_ep* ep = nullptr;
  if (int rc = fi_endpoint(domain, &mutable_info, &ep, nullptr); rc != 0) return fi_error("fi_endpoint", rc);
  e->ep_.reset(ep);
  if (int rc = fi_ep_bind(ep, &av->fid, 0); rc != 0) return fi_error("fi_ep_bind(av)", rc);
  if (int rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV); rc != 0)
    return fi_error("fi_ep_bind(cq)", rc);
  // shm's default endpoint name is the pid: a killed process's leftover file makes the next holder of that
  // pid fail here with EBUSY (shm_names.h).
  const bool shm = info.fabric_attr != nullptr && info.fabric_attr->prov_name != nullptr &&
                   std::string_view(info.fabric_attr->prov_name) == "shm";
  e->shm_ = shm;
  if (shm) {
    remove_stale_shm_endpoints();
    const std::string name = shm_endpoint_name();
    if (int rc = fi_setname(&ep->fid, const_cast<char*>(name.c_str()), name.size() + 1); rc != 0)
      return fi_error("fi_setname", rc);
    e->doorbell_ = std::make_unique<Doorbell>(name);
  }
  if (int rc = fi_enable(ep); rc != 0) return fi_error("fi_enable", rc);

  std::size_t len = 0;
  fi_getname(&ep->fid, nullptr, &len);
  e->address_.resize(len);
  if (int rc = fi_getname(&ep->fid, e->address_.data(), &len); rc != 0) return fi_error("fi_getname", rc);
  e->address_.resize(len);

  return e;
}

Endpoint::~Endpoint() {
  ep_.reset();  // before the CQ and AV it is bound to
}

Result<fi_addr_t> Endpoint::resolve(std::span<const std::byte> peer_address) {
  std::vector<std::byte> key(peer_address.begin(), peer_address.end());
  std::lock_guard lock(av_mu_);
  if (auto it = peers_.find(key); it != peers_.end()) return it->second;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int n = fi_av_insert(av_.get(), key.data(), 1, &addr, 0, nullptr);
  if (n != 1) {
    return make_error(ErrorCode::PeerUnreachable,
                      "fi_av_insert rejected the peer address (" + std::to_string(key.size()) + " bytes)");
  }
  if (shm_) {
    const std::string_view name(reinterpret_cast<const char*>(key.data()), key.size());
    if (auto bell = Doorbell::address_of(name)) doorbells_[addr] = *bell;
  }
  peers_.emplace(std::move(key), addr);
  return addr;
}

void Endpoint::ring(fi_addr_t peer) {
  if (!doorbell_) return;
  std::lock_guard lock(av_mu_);
  if (auto it = doorbells_.find(peer); it != doorbells_.end()) doorbell_->ring(it->second);
}

bool Endpoint::peer_process_gone(fi_addr_t peer) {
  if (!shm_) return false;
  std::lock_guard lock(av_mu_);
  for (const auto& [address, addr] : peers_) {
    if (peer != FI_ADDR_UNSPEC && addr != peer) continue;
    const std::string_view name(reinterpret_cast<const char*>(address.data()), address.size());
    if (shm_endpoint_process_gone(name)) return true;
  }
  return false;
}

Result<Fid<fid_mr>> Endpoint::register_range(void* address, std::uint64_t length, std::uint64_t access,
                                             const Hmem* hmem) {
  iovec iov{address, length};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.iface = FI_HMEM_SYSTEM;
  std::uint64_t flags = 0;
#ifdef FI_MR_DMABUF
  fi_mr_dmabuf dmabuf{};
#endif
  if (hmem != nullptr) {
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = hmem->device;
    if (hmem->dmabuf_fd >= 0) {
#ifdef FI_MR_DMABUF
      // fi_mr_attr's mr_iov and dmabuf share a union: the DMA-BUF replaces the iovec. base_addr is the
      // virtual address of the fd's offset 0, which FI_MR_VIRT_ADDR peers address from.
      dmabuf.fd = hmem->dmabuf_fd;
      dmabuf.offset = hmem->dmabuf_offset;
      dmabuf.len = length;
      dmabuf.base_addr = static_cast<std::byte*>(address) - hmem->dmabuf_offset;
      attr.dmabuf = &dmabuf;
      flags |= FI_MR_DMABUF;
#else
      return make_error(ErrorCode::Unsupported, "this libfabric (" + std::to_string(FI_MAJOR_VERSION) + "." +
                                                    std::to_string(FI_MINOR_VERSION) +
                                                    ") has no FI_MR_DMABUF (1.20+)");
#endif
    }
  }
  fid_mr* mr = nullptr;
  // Keys must also be unique within a domain: a random one that is taken already (FI_ENOKEY) is drawn again.
  for (int attempt = 1;; ++attempt) {
    attr.requested_key = policy_.provider_key ? 0 : random_key(key_mask_);
    const int rc = fi_mr_regattr(domain_.get(), &attr, flags, &mr);
    if (rc == 0) break;
    if (rc != -FI_ENOKEY || policy_.provider_key || attempt == 8) return fi_error("fi_mr_regattr", rc);
  }
  Fid<fid_mr> owned(mr);
  if (policy_.bind_endpoint) {
    if (int rc = fi_mr_bind(mr, &ep_->fid, 0); rc != 0) return fi_error("fi_mr_bind", rc);
    if (int rc = fi_mr_enable(mr); rc != 0) return fi_error("fi_mr_enable", rc);
  }
  return owned;
}

}  // namespace conduit::fabric
