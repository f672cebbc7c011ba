// One rail's libfabric objects: fabric, domain, address vector, completion queue and RDM endpoint, plus
// the memory registrations made in its domain. Shared-owned so a Registration that outlives the transport
// still closes its MR before the domain goes away.
#pragma once

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/transport.h"
#include "doorbell.h"
#include "fi_handles.h"
#include "mr_mode.h"

namespace conduit::fabric {

class Endpoint {
 public:
  // Opens every object of one rail from `info` (one entry of fi_getinfo's list).
  static Result<std::shared_ptr<Endpoint>> open(const fi_info& info, const MrPolicy& policy);
  ~Endpoint();

  const std::vector<std::byte>& address() const { return address_; }
  const MrPolicy& policy() const { return policy_; }
  fid_ep* ep() const { return ep_.get(); }
  fid_cq* cq() const { return cq_.get(); }
  fid_fabric* fabric() const { return fabric_.get(); }
  int wait_fd() const { return wait_fd_; }  // -1 when the CQ has no pollable fd

  // Address vector entry for a peer's endpoint address, inserted on first use.
  Result<fi_addr_t> resolve(std::span<const std::byte> peer_address);

  bool shm() const { return shm_; }
  // shm only: whether the process behind `peer` (FI_ADDR_UNSPEC: behind any peer resolved here) has
  // exited (shm_names.h says which processes it can judge). Takes the AV lock; not for the hot path.
  bool peer_process_gone(fi_addr_t peer);
  // shm only (doorbell.h): the fd an idle rail also sleeps on (-1: none), its drain, and a ring of the
  // doorbell of `peer` (resolved here) after posting to it. Best effort; ring takes the AV lock.
  int doorbell_fd() const { return doorbell_ ? doorbell_->fd() : -1; }
  void drain_doorbell() const {
    if (doorbell_) doorbell_->drain();
  }
  void ring(fi_addr_t peer);

  // CUDA memory: iface FI_HMEM_CUDA on `device`, through its DMA-BUF when dmabuf_fd >= 0 (libfabric 1.20+,
  // FI_MR_DMABUF: [dmabuf_offset, +length) of the fd), else by device address (nvidia-peermem).
  struct Hmem {
    int device = 0;
    int dmabuf_fd = -1;
    std::uint64_t dmabuf_offset = 0;
  };

  // Registers [address, +length) in this domain; the returned fid is owned by the caller. Host memory
  // unless `hmem` says otherwise.
  Result<Fid<fid_mr>> register_range(void* address, std::uint64_t length, std::uint64_t access,
                                     const Hmem* hmem = nullptr);

 private:
  Endpoint() = default;

  MrPolicy policy_;
  // Declaration order is the close order reversed: MR and EP close before CQ/AV, which close before the
  // domain, which closes before the fabric.
  Fid<fid_fabric> fabric_;
  Fid<fid_domain> domain_;
  Fid<fid_av> av_;
  Fid<fid_cq> cq_;
  Fid<fid_ep> ep_;
  int wait_fd_ = -1;
  bool shm_ = false;
  std::vector<std::byte> address_;
  std::uint64_t key_mask_ = ~std::uint64_t{0};  // the domain's mr_key_size, for keys we pick

  std::unique_ptr<Doorbell> doorbell_;  // shm only

  std::mutex av_mu_;
  std::map<std::vector<std::byte>, fi_addr_t> peers_;
  std::map<fi_addr_t, Doorbell::Address> doorbells_;  // shm peers' doorbells, by AV entry
};

// The Registration::Handles of the libfabric backend: one MR per rail.
struct FabricRegistration final : Registration::Handles {
  struct RailMr {
    std::shared_ptr<Endpoint> endpoint;  // declared first so the MR closes before the domain can go
    Fid<fid_mr> mr;
  };
  std::vector<RailMr> rails;
  std::vector<std::uint32_t> indices;  // the transport's rail index of each entry of `rails`, ascending
};

}  // namespace conduit::fabric
