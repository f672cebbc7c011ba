// The simulated device of fake_verbs.h. One coarse lock guards everything; a device thread executes the
// posted work requests in order, per QP, interleaving QPs.
#include "fake_verbs.h"

#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace conduit::verbs::fake {
namespace {

struct FakeCq;
struct FakeQp;

struct FakeContext {
  ibv_context ctx{};  // first: the library hands out &ctx
  int pds = 0;
  int cqs = 0;
  int channels = 0;
};

struct FakePd {
  ibv_pd pd{};
  int mrs = 0;
  int qps = 0;
};

struct FakeMr {
  ibv_mr mr{};
  FakePd* pd = nullptr;
  unsigned access = 0;
};

struct FakeChannel {
  ibv_comp_channel ch{};
  std::deque<FakeCq*> events;
  int cqs = 0;
};

struct Cqe {
  ibv_wc wc{};
  FakeQp* qp = nullptr;
  std::uint64_t index = 0;  // the WR's position in its QP's send queue
};

struct FakeCq {
  ibv_cq cq{};
  FakeChannel* channel = nullptr;
  std::deque<Cqe> entries;
  int capacity = 0;
  bool armed = false;
  std::uint64_t delivered = 0;  // events handed out by ibv_get_cq_event
  std::uint64_t acked = 0;
  int qps = 0;
};

struct Pending {
  std::uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  ibv_sge sge{};
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t index = 0;
};

struct FakeQp {
  ibv_qp qp{};
  FakePd* pd = nullptr;
  FakeCq* cq = nullptr;
  std::uint32_t max_send_wr = 0;
  bool sig_all = false;
  unsigned access = 0;
  std::uint32_t dest_qpn = 0;
  int max_rd_atomic = 0;
  int max_dest_rd_atomic = 0;
  std::deque<Pending> pending;
  std::uint64_t posted = 0;
  std::uint64_t retired = 0;  // WRs whose completion (own or implied by a later one) was polled
};

constexpr int kGids = 4;
constexpr ibv_mtu kActiveMtu = IBV_MTU_1024;

struct World {
  std::mutex mu;
  std::condition_variable cv;
  Mode mode = Mode::Roce;
  std::map<std::uint32_t, FakeQp*> qps;
  std::map<std::uint32_t, FakeMr*> mrs;  // by rkey (== lkey)
  std::uint32_t next_qpn = 0x100;
  std::uint32_t next_key = 0x1000;
  std::vector<std::string> violations;
  Counters counters;
  bool thread_started = false;
  ibv_device device{};
};

World& world() {
  static World* w = new World();  // leaked: the device thread may outlive static destruction
  return *w;
}

void violation(World& w, std::string what) { w.violations.push_back(std::move(what)); }

// Index 0/1: fe80::1 (RoCE v1 / v2); 2/3: ::ffff:127.0.0.1 (RoCE v1 / v2), so the handshake listens on
// loopback.
ibv_gid gid_at(int index) {
  ibv_gid g{};
  if (index < 2) {
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
  } else {
    g.raw[10] = 0xff;
    g.raw[11] = 0xff;
    g.raw[12] = 127;
  }
  g.raw[15] = 1;
  return g;
}

void push_cqe(World& w, FakeQp& qp, const Pending& p, ibv_wc_status status) {
  Cqe e;
  e.wc.wr_id = p.wr_id;
  e.wc.status = status;
  e.wc.opcode = p.opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_READ;
  e.wc.qp_num = qp.qp.qp_num;
  e.wc.byte_len = status == IBV_WC_SUCCESS ? p.sge.length : 0;
  e.qp = &qp;
  e.index = p.index;
  FakeCq& cq = *qp.cq;
  cq.entries.push_back(e);
  ++w.counters.completions;
  if (static_cast<int>(cq.entries.size()) > cq.capacity) {
    violation(w, "CQ overflow: " + std::to_string(cq.entries.size()) + " completions in a CQ of " +
                     std::to_string(cq.capacity));
  }
  if (cq.armed && cq.channel != nullptr) {
    cq.armed = false;
    cq.channel->events.push_back(&cq);
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(cq.channel->ch.fd, &one, sizeof(one));
  }
}

FakeMr* find_mr(World& w, std::uint32_t key, FakePd* pd, std::uint64_t addr, std::uint64_t len) {
  auto it = w.mrs.find(key);
  if (it == w.mrs.end() || it->second->pd != pd) return nullptr;
  const auto base = reinterpret_cast<std::uint64_t>(it->second->mr.addr);
  if (addr < base || len > it->second->mr.length || addr - base > it->second->mr.length - len) return nullptr;
  return it->second;
}

void fail_and_flush(World& w, FakeQp& qp, const Pending& p, ibv_wc_status status) {
  push_cqe(w, qp, p, status);
  qp.qp.state = IBV_QPS_ERR;
  for (const Pending& rest : qp.pending) push_cqe(w, qp, rest, IBV_WC_WR_FLUSH_ERR);
  qp.pending.clear();
}

// Executes the oldest pending WR of `qp`.
void execute(World& w, FakeQp& qp) {
  const Pending p = qp.pending.front();
  qp.pending.pop_front();
  if (qp.qp.state == IBV_QPS_ERR) {
    push_cqe(w, qp, p, IBV_WC_WR_FLUSH_ERR);
    return;
  }
  auto peer_it = w.qps.find(qp.dest_qpn);
  if (peer_it == w.qps.end() || peer_it->second->dest_qpn != qp.qp.qp_num ||
      (peer_it->second->qp.state != IBV_QPS_RTR && peer_it->second->qp.state != IBV_QPS_RTS)) {
    fail_and_flush(w, qp, p, IBV_WC_RETRY_EXC_ERR);  // nobody acknowledges
    return;
  }
  FakeQp& peer = *peer_it->second;
  const bool read = p.opcode == IBV_WR_RDMA_READ;
  FakeMr* local = find_mr(w, p.sge.lkey, qp.pd, p.sge.addr, p.sge.length);
  if (local == nullptr || (read && (local->access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    fail_and_flush(w, qp, p, IBV_WC_LOC_PROT_ERR);
    return;
  }
  FakeMr* remote = find_mr(w, p.rkey, peer.pd, p.remote_addr, p.sge.length);
  const unsigned need = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
  if (remote == nullptr || (remote->access & need) == 0 || (peer.access & need) == 0) {
    peer.qp.state = IBV_QPS_ERR;  // the responder's QP fails with it
    fail_and_flush(w, qp, p, IBV_WC_REM_ACCESS_ERR);
    return;
  }
  if (read && (qp.max_rd_atomic < 1 || peer.max_dest_rd_atomic < 1)) {
    violation(w, "RDMA READ on a QP pair without read resources (max_rd_atomic / max_dest_rd_atomic)");
    fail_and_flush(w, qp, p, IBV_WC_REM_INV_REQ_ERR);
    return;
  }
  auto* src = reinterpret_cast<void*>(read ? p.remote_addr : p.sge.addr);
  auto* dst = reinterpret_cast<void*>(read ? p.sge.addr : p.remote_addr);
  std::memcpy(dst, src, p.sge.length);
  w.counters.bytes += p.sge.length;
  if (p.signaled || qp.sig_all) push_cqe(w, qp, p, IBV_WC_SUCCESS);
}

void device_thread() {
  World& w = world();
  std::unique_lock lock(w.mu);
  for (;;) {
    w.cv.wait(lock, [&] {
      return std::any_of(w.qps.begin(), w.qps.end(),
                         [](const auto& q) { return !q.second->pending.empty(); });
    });
    // One WR per QP per pass, the lock released in between: posters and pollers run meanwhile, and WRs
    // stay outstanding long enough for send queues to fill.
    std::vector<std::uint32_t> busy;
    for (const auto& [qpn, qp] : w.qps) {
      if (!qp->pending.empty()) busy.push_back(qpn);
    }
    for (std::uint32_t qpn : busy) {
      auto it = w.qps.find(qpn);
      if (it != w.qps.end() && !it->second->pending.empty()) execute(w, *it->second);
    }
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

int fake_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  for (ibv_send_wr* cur = wr; cur != nullptr; cur = cur->next) {
    if (qp->qp.state != IBV_QPS_RTS && qp->qp.state != IBV_QPS_ERR) {
      violation(w, "post_send on a QP that is not in RTS");
      *bad = cur;
      return EINVAL;
    }
    if (cur->num_sge != 1 || (cur->opcode != IBV_WR_RDMA_WRITE && cur->opcode != IBV_WR_RDMA_READ)) {
      *bad = cur;
      return EINVAL;
    }
    if (qp->posted - qp->retired >= qp->max_send_wr) {
      violation(w, "send queue overflow: " + std::to_string(qp->posted - qp->retired) +
                       " WRs outstanding on a queue of " + std::to_string(qp->max_send_wr));
      *bad = cur;
      return ENOMEM;
    }
    Pending p;
    p.wr_id = cur->wr_id;
    p.opcode = cur->opcode;
    p.signaled = (cur->send_flags & IBV_SEND_SIGNALED) != 0;
    p.sge = cur->sg_list[0];
    p.remote_addr = cur->wr.rdma.remote_addr;
    p.rkey = cur->wr.rdma.rkey;
    p.index = qp->posted++;
    qp->pending.push_back(p);
    ++w.counters.posted;
    w.counters.max_outstanding = std::max(w.counters.max_outstanding, qp->posted - qp->retired);
  }
  w.cv.notify_all();
  return 0;
}

int fake_poll_cq(ibv_cq* ibcq, int num, ibv_wc* wc) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* cq = reinterpret_cast<FakeCq*>(ibcq);
  int n = 0;
  while (n < num && !cq->entries.empty()) {
    const Cqe e = cq->entries.front();
    cq->entries.pop_front();
    wc[n++] = e.wc;
    // The CQE frees its WR's send-queue slot and those of every WR before it.
    e.qp->retired = std::max(e.qp->retired, e.index + 1);
  }
  return n;
}

int fake_req_notify_cq(ibv_cq* ibcq, int) {
  World& w = world();
  std::lock_guard lock(w.mu);
  reinterpret_cast<FakeCq*>(ibcq)->armed = true;
  return 0;
}

}  // namespace

void set_mode(Mode mode) {
  std::lock_guard lock(world().mu);
  world().mode = mode;
}

Counters counters() {
  std::lock_guard lock(world().mu);
  return world().counters;
}

void reset_counters() {
  std::lock_guard lock(world().mu);
  world().counters = Counters{};
}

std::vector<std::string> violations() {
  std::lock_guard lock(world().mu);
  return world().violations;
}

void clear_violations() {
  std::lock_guard lock(world().mu);
  world().violations.clear();
}

}  // namespace conduit::verbs::fake

// ---- the libibverbs entry points (C linkage from <infiniband/verbs.h>) ----------------------------------

using namespace conduit::verbs::fake;

ibv_device** ibv_get_device_list(int* num_devices) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (num_devices != nullptr) *num_devices = 0;
  if (w.mode == Mode::NoDevice) {
    errno = ENOSYS;
    return nullptr;
  }
  if (w.mode == Mode::NoPermission) {
    errno = EPERM;
    return nullptr;
  }
  const bool efa = w.mode == Mode::EfaOnly;
  std::snprintf(w.device.name, sizeof(w.device.name), "%s", efa ? "sim_efa0" : "sim_roce0");
  w.device.node_type = efa ? IBV_NODE_UNSPECIFIED : IBV_NODE_CA;
  w.device.transport_type = efa ? IBV_TRANSPORT_UNSPECIFIED : IBV_TRANSPORT_IB;
  auto** list = new ibv_device* [2] { &w.device, nullptr };
  if (num_devices != nullptr) *num_devices = 1;
  return list;
}

void ibv_free_device_list(ibv_device** list) { delete[] list; }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ibv_context* ibv_open_device(ibv_device* device) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (!w.thread_started) {
    std::thread(device_thread).detach();
    w.thread_started = true;
  }
  auto* c = new FakeContext();
  c->ctx.device = device;
  c->ctx.ops.post_send = fake_post_send;
  c->ctx.ops.poll_cq = fake_poll_cq;
  c->ctx.ops.req_notify_cq = fake_req_notify_cq;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.abi_compat = nullptr;  // not an extended context: ibv_query_port goes to the exported call
  return &c->ctx;
}

int ibv_close_device(ibv_context* context) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* c = reinterpret_cast<FakeContext*>(context);
  if (c->pds != 0 || c->cqs != 0 || c->channels != 0) {
    violation(w, "ibv_close_device with " + std::to_string(c->pds) + " PDs, " + std::to_string(c->cqs) +
                     " CQs and " + std::to_string(c->channels) + " completion channels still open");
  }
  delete c;
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  attr->max_qp_wr = 16384;
  attr->max_cqe = 4194303;
  attr->max_qp = 1 << 16;
  attr->max_cq = 1 << 16;
  attr->max_mr_size = ~0ULL;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->max_sge = 30;
  attr->phys_port_cnt = 1;
  return 0;
}

int(ibv_query_port)(ibv_context*, uint8_t port_num, _compat_ibv_port_attr* compat) {
  if (port_num != 1) return EINVAL;
  // The inline wrapper passes a whole struct ibv_port_attr.
  auto* attr = reinterpret_cast<ibv_port_attr*>(compat);
  attr->state = world().mode == Mode::PortDown ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = kActiveMtu;  // a 1500-byte netdev
  attr->gid_tbl_len = kGids;
  attr->max_msg_sz = 1u << 30;
  attr->lid = 0;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(ibv_context*, uint8_t port_num, int index, ibv_gid* gid) {
  if (port_num != 1 || index < 0 || index >= kGids) {
    errno = EINVAL;
    return -1;
  }
  *gid = gid_at(index);
  return 0;
}

int _ibv_query_gid_ex(ibv_context*, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry, uint32_t,
                      size_t) {
  if (port_num != 1 || gid_index >= static_cast<uint32_t>(kGids)) return ENODATA;
  entry->gid = gid_at(static_cast<int>(gid_index));
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = gid_index % 2 == 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  entry->ndev_ifindex = 1;
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* pd = new FakePd();
  pd->pd.context = context;
  ++reinterpret_cast<FakeContext*>(context)->pds;
  return &pd->pd;
}

int ibv_dealloc_pd(ibv_pd* ibpd) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* pd = reinterpret_cast<FakePd*>(ibpd);
  if (pd->mrs != 0 || pd->qps != 0) {
    violation(w, "ibv_dealloc_pd with " + std::to_string(pd->mrs) + " MRs and " + std::to_string(pd->qps) +
                     " QPs still on it");
    return EBUSY;
  }
  --reinterpret_cast<FakeContext*>(pd->pd.context)->pds;
  delete pd;
  return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* ibpd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (w.mode == Mode::Memlock) {
    errno = ENOMEM;
    return nullptr;
  }
  if (iova != reinterpret_cast<uint64_t>(addr))
    violation(w, "registration with an iova other than the address");
  if ((access & (IBV_ACCESS_REMOTE_WRITE)) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    errno = EINVAL;  // as the kernel: remote write needs local write
    return nullptr;
  }
  auto* pd = reinterpret_cast<FakePd*>(ibpd);
  auto* mr = new FakeMr();
  mr->pd = pd;
  mr->access = access;
  mr->mr.context = ibpd->context;
  mr->mr.pd = ibpd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.lkey = mr->mr.rkey = w.next_key++;
  w.mrs[mr->mr.rkey] = mr;
  ++pd->mrs;
  return &mr->mr;
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int fd, int) {
  errno = fd < 0 ? EBADF : EOPNOTSUPP;  // a driver that implements it rejects fd -1 as a bad fd
  return nullptr;
}

int ibv_dereg_mr(ibv_mr* ibmr) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* mr = reinterpret_cast<FakeMr*>(ibmr);
  w.mrs.erase(mr->mr.rkey);
  --mr->pd->mrs;
  delete mr;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* ch = new FakeChannel();
  ch->ch.context = context;
  ch->ch.fd = eventfd(0, EFD_CLOEXEC);
  ++reinterpret_cast<FakeContext*>(context)->channels;
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* ch = reinterpret_cast<FakeChannel*>(channel);
  if (ch->cqs != 0) {
    violation(w, "ibv_destroy_comp_channel with " + std::to_string(ch->cqs) + " CQs still using it");
    return EBUSY;
  }
  --reinterpret_cast<FakeContext*>(ch->ch.context)->channels;
  ::close(ch->ch.fd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (w.mode == Mode::Memlock) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* cq = new FakeCq();
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  cq->capacity = cqe;
  cq->channel = reinterpret_cast<FakeChannel*>(channel);
  if (cq->channel != nullptr) ++cq->channel->cqs;
  ++reinterpret_cast<FakeContext*>(context)->cqs;
  return &cq->cq;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* cq = reinterpret_cast<FakeCq*>(ibcq);
  if (cq->qps != 0) {
    violation(w, "ibv_destroy_cq with " + std::to_string(cq->qps) + " QPs still on it");
    return EBUSY;
  }
  if (cq->delivered != cq->acked) {
    violation(w, "ibv_destroy_cq with unacknowledged completion events (the real call would block forever)");
  }
  if (cq->channel != nullptr) {
    // The kernel drops the events nobody read.
    std::erase(cq->channel->events, cq);
    --cq->channel->cqs;
  }
  --reinterpret_cast<FakeContext*>(cq->cq.context)->cqs;
  delete cq;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* ch = reinterpret_cast<FakeChannel*>(channel);
  std::uint64_t drained = 0;
  if (ch->events.empty()) {
    [[maybe_unused]] auto n = ::read(ch->ch.fd, &drained, sizeof(drained));  // non-blocking by the caller
    errno = EAGAIN;
    return -1;
  }
  FakeCq* c = ch->events.front();
  ch->events.pop_front();
  if (ch->events.empty()) {
    [[maybe_unused]] auto n = ::read(ch->ch.fd, &drained, sizeof(drained));
  }
  ++c->delivered;
  *cq = &c->cq;
  *cq_context = c->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  World& w = world();
  std::lock_guard lock(w.mu);
  reinterpret_cast<FakeCq*>(cq)->acked += nevents;
}

ibv_qp* ibv_create_qp(ibv_pd* ibpd, ibv_qp_init_attr* init) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (init->qp_type != IBV_QPT_RC || init->send_cq == nullptr || init->cap.max_send_wr == 0 ||
      init->cap.max_send_wr > 16384 || init->cap.max_send_sge < 1) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = reinterpret_cast<FakePd*>(ibpd);
  auto* qp = new FakeQp();
  qp->pd = pd;
  qp->cq = reinterpret_cast<FakeCq*>(init->send_cq);
  qp->max_send_wr = init->cap.max_send_wr;
  qp->sig_all = init->sq_sig_all != 0;
  qp->qp.context = ibpd->context;
  qp->qp.pd = ibpd;
  qp->qp.send_cq = init->send_cq;
  qp->qp.recv_cq = init->recv_cq;
  qp->qp.qp_num = w.next_qpn++;
  qp->qp.qp_type = IBV_QPT_RC;
  qp->qp.state = IBV_QPS_RESET;
  w.qps[qp->qp.qp_num] = qp;
  ++pd->qps;
  ++qp->cq->qps;
  if (init->recv_cq != nullptr && init->recv_cq != init->send_cq)
    ++reinterpret_cast<FakeCq*>(init->recv_cq)->qps;
  return &qp->qp;
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  auto refuse = [&](const std::string& why) {
    violation(w, "ibv_modify_qp: " + why);
    return EINVAL;
  };
  auto has = [&](int bits) { return (mask & bits) == bits; };
  if (!has(IBV_QP_STATE)) return refuse("no state");
  const ibv_qp_state from = qp->qp.state;
  switch (attr->qp_state) {
    case IBV_QPS_INIT:
      if (from != IBV_QPS_RESET) return refuse("INIT from a state other than RESET");
      if (!has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return refuse("INIT without pkey/port/access");
      if (attr->port_num != 1) return refuse("INIT on a port that does not exist");
      qp->access = attr->qp_access_flags;
      break;
    case IBV_QPS_RTR:
      if (from != IBV_QPS_INIT) return refuse("RTR from a state other than INIT");
      if (!has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER)) {
        return refuse("RTR without the attributes RC needs");
      }
      if (attr->ah_attr.is_global != 1) return refuse("RTR on RoCE without a GRH");
      if (attr->ah_attr.grh.sgid_index >= kGids)
        return refuse("RTR with a source GID index beyond the table");
      if (attr->path_mtu > kActiveMtu) return refuse("RTR with a path MTU above the port's active MTU");
      if (attr->ah_attr.port_num != 1) return refuse("RTR with an address vector on another port");
      qp->dest_qpn = attr->dest_qp_num;
      qp->max_dest_rd_atomic = attr->max_dest_rd_atomic;
      break;
    case IBV_QPS_RTS:
      if (from != IBV_QPS_RTR) return refuse("RTS from a state other than RTR");
      if (!has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC)) {
        return refuse("RTS without the attributes RC needs");
      }
      qp->max_rd_atomic = attr->max_rd_atomic;
      break;
    case IBV_QPS_ERR:
      break;  // anything may go to error; pending WRs flush as the device reaches them
    default:
      return refuse("unexpected target state");
  }
  qp->qp.state = attr->qp_state;
  w.cv.notify_all();
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  World& w = world();
  std::lock_guard lock(w.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  w.qps.erase(qp->qp.qp_num);
  std::erase_if(qp->cq->entries, [&](const Cqe& e) { return e.qp == qp; });
  --qp->cq->qps;
  if (qp->qp.recv_cq != nullptr && qp->qp.recv_cq != qp->qp.send_cq)
    --reinterpret_cast<FakeCq*>(qp->qp.recv_cq)->qps;
  --qp->pd->qps;
  delete qp;
  return 0;
}
