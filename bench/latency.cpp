// Latency of one op at a time (docs/kv-cache.md), in one process and one run, interleaved:
//   bare      the provider alone: fi_writemsg(FI_DELIVERY_COMPLETE) of one buffer, spinning on fi_cq_read
//             (both endpoints' completion queues, which drives the provider's progress), nothing else;
//   bare/2    the same with the target's completion queue read by a thread of its own, spinning: two
//             threads, as any two processes are, where the first drives both ends from one;
//   conduit   the same write through conduit::Transport: submit one op, spin on poll() until finished.
// Then 1,000 scattered 16 KiB blocks against one contiguous 16 MiB range, the bare provider (as many blocks
// per fi_writemsg as its iov limits allow, the last message delivered) against conduit::Transport (one
// batch of 1,000 ops): what the provider itself loses to scattering, measured beside what conduit loses.
// And through the agent API: POST /v1/transfers?waitSeconds with one op (submit to completion, one HTTP
// round trip) beside GET /healthz (the HTTP round trip alone), plus the same 1,000 blocks in one request
// against one contiguous 16 MiB transfer.
#include <httplib.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conduit/common/base64.h"
#include "conduit/memory_region.h"
#include "kube_client/kube_config.h"
#include "options.h"

namespace conduit::bench {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr std::uint64_t kSizes[] = {8, 4096, 65536, 1 << 20};

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0;  // microseconds
};

Percentiles percentiles(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))]; };
  return {at(0.5), at(0.99), at(0.999)};
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// The provider alone: two RDM endpoints of one domain in this process, one writing into the other.
class Bare {
 public:
  ~Bare() { close(); }

  std::string open(const std::string& provider, std::uint64_t bytes) {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = strdup(provider == "tcp" ? "tcp;ofi_rxm" : provider.c_str());
    const bool tcp = provider == "tcp";
    int rc = fi_getinfo(FI_VERSION(1, 17), tcp ? "127.0.0.1" : nullptr, nullptr, tcp ? FI_SOURCE : 0, hints,
                        &info_);
    fi_freeinfo(hints);
    if (rc != 0) return std::string("fi_getinfo: ") + fi_strerror(-rc);
    if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return "fi_fabric";
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return "fi_domain";
    for (Side* s : {&target_, &initiator_}) {
      fi_av_attr av_attr{};
      av_attr.type = FI_AV_TABLE;
      fi_cq_attr cq_attr{};
      cq_attr.format = FI_CQ_FORMAT_CONTEXT;
      if (fi_av_open(domain_, &av_attr, &s->av, nullptr) || fi_cq_open(domain_, &cq_attr, &s->cq, nullptr) ||
          fi_endpoint(domain_, info_, &s->ep, nullptr) || fi_ep_bind(s->ep, &s->av->fid, 0) ||
          fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV) || fi_enable(s->ep)) {
        return "opening an endpoint";
      }
      s->memory = MemoryRegion::allocate_host(bytes).value();
    }
    char name[256];
    std::size_t len = sizeof name;
    if (fi_getname(&target_.ep->fid, name, &len) != 0) return "fi_getname";
    if (fi_av_insert(initiator_.av, name, 1, &peer_, 0, nullptr) != 1) return "fi_av_insert";
    const bool per_ep = (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
    virt_ = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    std::uint64_t key = 1;  // where the provider does not pick keys, each registration needs its own
    for (auto [s, access] : {std::pair{&target_, FI_REMOTE_WRITE}, std::pair{&initiator_, FI_WRITE}}) {
      if (int r = fi_mr_reg(domain_, s->memory.data(), bytes, access, 0, key++, 0, &s->mr, nullptr); r != 0)
        return std::string("fi_mr_reg: ") + fi_strerror(-r);
      if (per_ep && (fi_mr_bind(s->mr, &s->ep->fid, 0) != 0 || fi_mr_enable(s->mr) != 0)) return "fi_mr_bind";
    }
    return "";
  }

  // Ranges (local offset, remote offset, length) per fi_writemsg: the most both iov limits allow.
  std::size_t ranges_per_message() const {
    return std::max<std::size_t>(1, std::min(info_->tx_attr->iov_limit, info_->tx_attr->rma_iov_limit));
  }

  // `ops` written as messages of `per_message` ranges each, at most `window` messages in flight, the last
  // one delivered (the provider orders writes after writes: docs FABRIC-NOTES), the target driven by a
  // thread of its own; microseconds, -1 on error.
  double batch(const std::vector<std::array<std::uint64_t, 3>>& ops, std::size_t per_message, int window) {
    const std::size_t messages = (ops.size() + per_message - 1) / per_message;
    std::vector<iovec> iov(ops.size());
    std::vector<fi_rma_iov> rma(ops.size());
    std::vector<void*> desc(ops.size(), fi_mr_desc(initiator_.mr));
    const auto base = virt_ ? reinterpret_cast<std::uint64_t>(target_.memory.data()) : 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      iov[i] = {static_cast<char*>(initiator_.memory.data()) + ops[i][0], ops[i][2]};
      rma[i] = {base + ops[i][1], ops[i][2], fi_mr_key(target_.mr)};
    }
    // The target's progress on a thread of its own, as conduit's target rail has: each side a core.
    std::atomic<bool> stop{false};
    std::thread target([&] {
      fi_cq_entry entry;
      while (!stop.load(std::memory_order_relaxed)) (void)fi_cq_read(target_.cq, &entry, 1);
    });
    const auto t0 = Clock::now();
    std::size_t posted = 0, done = 0;
    while (done < messages) {
      while (posted < messages && static_cast<int>(posted - done) < window) {
        const std::size_t first = posted * per_message, n = std::min(per_message, ops.size() - first);
        fi_msg_rma msg{};
        msg.msg_iov = &iov[first];
        msg.desc = &desc[first];
        msg.iov_count = n;
        msg.addr = peer_;
        msg.rma_iov = &rma[first];
        msg.rma_iov_count = n;
        msg.context = &context_;
        const std::uint64_t flags = FI_COMPLETION | (posted + 1 == messages ? FI_DELIVERY_COMPLETE : 0);
        const ssize_t rc = fi_writemsg(initiator_.ep, &msg, flags);
        if (rc == -FI_EAGAIN) break;
        if (rc != 0) break;
        ++posted;
      }
      fi_cq_entry entries[16];
      const ssize_t rc = fi_cq_read(initiator_.cq, entries, 16);
      if (rc > 0) {
        done += static_cast<std::size_t>(rc);
      } else if (rc != -FI_EAGAIN) {
        break;
      }
    }
    const double us = micros(Clock::now() - t0);
    stop.store(true);
    target.join();
    return done == messages ? us : -1;
  }

  // The target's progress on a thread of its own (`on`), spinning, or back in write()'s loop; returns once
  // the thread is spinning (or asleep), so no timed write shares the completion queue with a switch.
  void drive_target(bool on) {
    if (!driver_.joinable()) {
      driver_ = std::thread([this] {
        std::unique_lock lock(driver_mu_);
        for (;;) {
          driver_cv_.wait(lock, [&] { return driver_want_ != driver_on_ || driver_quit_; });
          if (driver_quit_) return;
          driver_on_ = driver_want_;
          driver_cv_.notify_all();
          if (!driver_on_) continue;
          lock.unlock();
          fi_cq_entry entry;
          while (driver_spin_.load(std::memory_order_relaxed)) (void)fi_cq_read(target_.cq, &entry, 1);
          lock.lock();
        }
      });
    }
    std::unique_lock lock(driver_mu_);
    if (on) driver_spin_.store(true);
    driver_want_ = on;
    driver_cv_.notify_all();
    if (!on) driver_spin_.store(false);
    driver_cv_.wait(lock, [&] { return driver_on_ == on; });
  }

  // One write of `bytes`, delivered; its microseconds, or -1 on an error.
  double write(std::uint64_t bytes) {
    iovec iov{initiator_.memory.data(), bytes};
    void* desc = fi_mr_desc(initiator_.mr);
    fi_rma_iov rma{virt_ ? reinterpret_cast<std::uint64_t>(target_.memory.data()) : 0, bytes,
                   fi_mr_key(target_.mr)};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peer_;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &context_;
    const auto t0 = Clock::now();
    ssize_t rc;
    while ((rc = fi_writemsg(initiator_.ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)) == -FI_EAGAIN)
      progress();
    if (rc != 0) return -1;
    fi_cq_entry entry;
    for (;;) {
      rc = fi_cq_read(initiator_.cq, &entry, 1);
      if (rc == 1) break;
      if (rc != -FI_EAGAIN) return -1;
      progress();
    }
    return micros(Clock::now() - t0);
  }

 private:
  struct Side {
    fid_av* av = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
    fid_mr* mr = nullptr;
    MemoryRegion memory;
  };
  void progress() {
    if (driver_spin_.load(std::memory_order_relaxed)) return;  // the target's own thread reads its queue
    fi_cq_entry entry;
    (void)fi_cq_read(target_.cq, &entry, 1);
  }
  void close() {
    if (driver_.joinable()) {
      {
        std::lock_guard lock(driver_mu_);
        driver_quit_ = true;
        driver_spin_.store(false);
      }
      driver_cv_.notify_all();
      driver_.join();
    }
    for (Side* s : {&initiator_, &target_}) {
      if (s->mr) fi_close(&s->mr->fid);
      if (s->ep) fi_close(&s->ep->fid);
      if (s->cq) fi_close(&s->cq->fid);
      if (s->av) fi_close(&s->av->fid);
    }
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
  }
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  Side target_, initiator_;
  fi_addr_t peer_ = 0;
  bool virt_ = true;
  fi_context2 context_{};
  std::thread driver_;  // drive_target's
  std::mutex driver_mu_;
  std::condition_variable driver_cv_;
  bool driver_want_ = false, driver_on_ = false, driver_quit_ = false;
  std::atomic<bool> driver_spin_{false};
};

// The same through conduit: two transports in this process.
struct Conduit {
  std::unique_ptr<Transport> target, initiator;
  MemoryRegion target_memory, local_memory;
  Registration remote, local;

  std::string open(const Options& o, std::uint64_t bytes) {
    const TransportConfig config =
        o.data_plane.applied_to({.provider = o.provider, .rails = 1, .bind_address = o.bind});
    auto t = open_transport(config);
    auto i = open_transport(config);
    if (!t || !i) return "opening the transports: " + (t ? i.error() : t.error()).message;
    target = std::move(*t);
    initiator = std::move(*i);
    target_memory = MemoryRegion::allocate_host(bytes).value();
    local_memory = MemoryRegion::allocate_host(bytes).value();
    auto r = target->register_memory(target_memory, Access::RemoteWrite);
    auto l = initiator->register_memory(local_memory, Access::Local);
    if (!r || !l) return "registering";
    remote = std::move(*r);
    local = std::move(*l);
    return "";
  }

  // `ops` (local offset, remote offset, length) as one batch; microseconds, -1 on an error. The caller sleeps
  // until the batch's end wakes it (BatchOptions::on_finished), as the agent's executor does: spinning here
  // took a third of the two cores from the rail threads that move the bytes.
  double batch(const std::vector<std::array<std::uint64_t, 3>>& ops, std::uint64_t slice, int window) {
    std::vector<Op> batch;
    batch.reserve(ops.size());
    for (const auto& [from, to, n] : ops)
      batch.push_back(Op{OpKind::Write, &local, from, remote.remote_key(), to, n});
    struct End {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
    };
    auto end = std::make_shared<End>();
    const auto t0 = Clock::now();
    auto id = initiator->submit(batch, BatchOptions{slice, static_cast<std::uint32_t>(window), [end] {
                                                      {
                                                        std::lock_guard lock(end->mu);
                                                        end->done = true;
                                                      }
                                                      end->cv.notify_one();
                                                    }});
    if (!id) return -1;
    {
      std::unique_lock lock(end->mu);
      end->cv.wait(lock, [&] { return end->done; });
    }
    const double us = micros(Clock::now() - t0);
    const BatchStatus s = initiator->poll(*id);
    return s.finished && !s.error ? us : -1;
  }

  double write(std::uint64_t bytes) {
    const Op op{OpKind::Write, &local, 0, remote.remote_key(), 0, bytes};
    const auto t0 = Clock::now();
    auto id = initiator->submit(std::span(&op, 1), BatchOptions{std::max<std::uint64_t>(bytes, 4096), 1});
    if (!id) return -1;
    for (;;) {
      const BatchStatus s = initiator->poll(*id);
      if (s.finished) return s.error ? -1 : micros(Clock::now() - t0);
      // The rails' progress threads do the work: leave them the cores (two here) while waiting.
      std::this_thread::yield();
    }
  }
};

int count_for(std::uint64_t bytes, int scale) { return (bytes >= (1 << 20) ? 200 : 2000) * scale; }

void print(const char* what, std::uint64_t bytes, const Percentiles& p) {
  std::printf("  %-8s %8llu B  p50 %8.1f us  p99 %8.1f us  p999 %8.1f us\n", what,
              static_cast<unsigned long long>(bytes), p.p50, p.p99, p.p999);
}

}  // namespace

// 1,000 blocks of 16 KiB scattered over 32 MiB on both sides (the agent bench's layout), each side's slots
// shuffled with one seed.
std::vector<std::array<std::uint64_t, 3>> scattered_blocks() {
  std::mt19937_64 rng(1);
  std::vector<std::uint64_t> from(2048), to(2048);
  for (std::size_t i = 0; i < from.size(); ++i) from[i] = to[i] = i;
  std::shuffle(from.begin(), from.end(), rng);
  std::shuffle(to.begin(), to.end(), rng);
  std::vector<std::array<std::uint64_t, 3>> ops;
  for (int i = 0; i < 1000; ++i) ops.push_back({from[i] * 16384, to[i] * 16384, 16384});
  return ops;
}

// The scattered blocks against one contiguous 16 MiB, on the bare provider and on conduit::Transport,
// interleaved; "" or why it failed. Adds {bare,conduit}_scattered_over_contiguous to `out`.
std::string scattered_throughput(const Options& options, json& out) {
  constexpr std::uint64_t kRegion = 32 << 20, kMiB = 1 << 20;
  Bare bare;
  Conduit ours;
  if (auto e = bare.open(options.provider, kRegion); !e.empty()) return "bare provider: " + e;
  if (auto e = ours.open(options, kRegion); !e.empty()) return "conduit: " + e;
  const auto blocks = scattered_blocks();
  // The transport joins slices that follow one another in target order (as the agent's executor sorts).
  auto sorted = blocks;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a[1] < b[1]; });
  std::vector<std::array<std::uint64_t, 3>> contiguous;
  for (std::uint64_t at = 0; at < 16 * kMiB; at += kMiB) contiguous.push_back({at, at, kMiB});
  const std::vector<std::array<std::uint64_t, 3>> one_range{{0, 0, 16 * kMiB}};
  const std::size_t per = bare.ranges_per_message();
  std::vector<double> bs, bc, cs, cc;
  for (int round = 0; round < 20 * options.iterations; ++round) {
    // Windows as the agent's: 256 for the scattered request, 16 (the default) for the contiguous one.
    const double w = bare.batch(sorted, per, 256), x = bare.batch(contiguous, 1, 16);
    const double y = ours.batch(sorted, kMiB, 256), z = ours.batch(one_range, kMiB, 16);
    if (w < 0 || x < 0 || y < 0 || z < 0) return "a 16 MiB batch failed";
    bs.push_back(w);
    bc.push_back(x);
    cs.push_back(y);
    cc.push_back(z);
  }
  const double scattered_bytes = 1000.0 * 16384, contiguous_bytes = 16.0 * kMiB;
  auto gbps = [](double bytes, double us) { return bytes / us / 1e3; };
  const double b_s = gbps(scattered_bytes, percentiles(bs).p50),
               b_c = gbps(contiguous_bytes, percentiles(bc).p50);
  const double c_s = gbps(scattered_bytes, percentiles(cs).p50),
               c_c = gbps(contiguous_bytes, percentiles(cc).p50);
  std::printf("1,000 x 16 KiB scattered against one contiguous 16 MiB, %s, %d rounds interleaved (p50):\n",
              options.provider.c_str(), 20 * options.iterations);
  std::printf("  bare     %zu blocks per message: scattered %.2f GB/s, contiguous %.2f GB/s; ratio %.2fx\n",
              per, b_s, b_c, b_s / b_c);
  std::printf("  conduit  one batch:             scattered %.2f GB/s, contiguous %.2f GB/s; ratio %.2fx\n",
              c_s, c_c, c_s / c_c);
  out.push_back(
      {{"bare_scattered_over_contiguous", b_s / b_c}, {"conduit_scattered_over_contiguous", c_s / c_c}});
  return "";
}

int transport_latency(const Options& options) {
  Bare bare;
  Conduit ours;
  if (auto e = bare.open(options.provider, 1 << 20); !e.empty())
    return std::cerr << "bare provider: " << e << "\n", 1;
  if (auto e = ours.open(options, 1 << 20); !e.empty()) return std::cerr << "conduit: " << e << "\n", 1;
  std::printf("one %s write at a time, delivered; %d interleaved rounds; microseconds\n",
              options.provider.c_str(), options.iterations);
  json out = json::array();
  for (std::uint64_t bytes : kSizes) {
    std::vector<double> b, b2, c;
    for (int round = 0; round < options.iterations; ++round) {
      // In blocks of 100 (switching the target's thread per write would time its wake-up), interleaved.
      for (int i = 0; i < count_for(bytes, 1); i += 100) {
        for (int k = 0; k < 100; ++k) {
          const double x = bare.write(bytes), y = ours.write(bytes);
          if (x < 0 || y < 0) return std::cerr << "a write failed at " << bytes << " B\n", 1;
          b.push_back(x);
          c.push_back(y);
        }
        bare.drive_target(true);
        for (int k = 0; k < 100; ++k) {
          const double x = bare.write(bytes);
          if (x < 0) return std::cerr << "a write failed at " << bytes << " B\n", 1;
          b2.push_back(x);
        }
        bare.drive_target(false);
      }
    }
    const Percentiles pb = percentiles(b), pb2 = percentiles(b2), pc = percentiles(c);
    print("bare", bytes, pb);
    print("bare/2", bytes, pb2);
    print("conduit", bytes, pc);
    std::printf("  %-8s %8llu B  p50 ratio %.2fx (to bare/2 %.2fx)\n", "",
                static_cast<unsigned long long>(bytes), pc.p50 / pb.p50, pc.p50 / pb2.p50);
    out.push_back({{"bytes", bytes},
                   {"bare_p50", pb.p50},
                   {"bare_two_threads_p50", pb2.p50},
                   {"conduit_p50", pc.p50},
                   {"ratio_p50", pc.p50 / pb.p50},
                   {"ratio_two_threads_p50", pc.p50 / pb2.p50},
                   {"bare_p99", pb.p99},
                   {"conduit_p99", pc.p99}});
  }
  if (auto e = scattered_throughput(options, out); !e.empty()) return std::cerr << e << "\n", 1;
  if (options.json) std::cout << out.dump() << "\n";
  return 0;
}

int agent_latency(const Options& options, const std::string& source, const std::string& target,
                  const std::string& token) {
  auto client = [&](const std::string& url) {
    auto c = std::make_unique<httplib::Client>(url);
    c->set_bearer_token_auth(token);
    c->set_read_timeout(60, 0);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // else Nagle holds the body behind the headers for a delayed ACK (40 ms)
    return c;
  };
  auto a = client(source), b = client(target);
  constexpr std::uint64_t kRegion = 32 << 20;
  auto ok = [](const httplib::Result& r, int want) { return r && r->status == want; };
  (void)a->Delete("/v1/regions/bench-src");
  (void)b->Delete("/v1/regions/bench-dst");
  if (!ok(a->Post("/v1/regions", json{{"name", "bench-src"}, {"bytes", kRegion}}.dump(), "application/json"),
          201) ||
      !ok(b->Post("/v1/regions", json{{"name", "bench-dst"}, {"bytes", kRegion}}.dump(), "application/json"),
          201)) {
    return std::cerr << "creating the bench regions failed\n", 1;
  }
  auto g = b->Post("/v1/regions/bench-dst/grants", json{{"access", "write"}, {"ttlSeconds", 86400}}.dump(),
                   "application/json");
  if (!ok(g, 201)) return std::cerr << "taking a grant failed\n", 1;
  const json key = json::parse(g->body)["key"];
  auto post = [&](const json& body) {
    const std::string text = body.dump();
    const auto t0 = Clock::now();
    auto r = a->Post("/v1/transfers?waitSeconds=30", text, "application/json");
    const double us = micros(Clock::now() - t0);
    if (!r || r->status != 200 || json::parse(r->body).value("state", "") != "Succeeded") return -1.0;
    return us;
  };
  auto ops_body = [&](const json& ops) {
    return json{{"source", {{"region", "bench-src"}}},
                {"targets", {{{"grant", key}}}},
                {"ops", ops},
                {"window", 256}};
  };
  std::printf("through the agent API (POST /v1/transfers?waitSeconds, one op): submit to completion\n");
  json out = json::object();
  {
    // The HTTP round trip alone on the same connection, what every call pays before any transfer work: the
    // floor under the figures below.
    std::vector<double> us;
    for (int i = 0; i < count_for(0, 1) / 2; ++i) {
      const auto t0 = Clock::now();
      auto r = a->Get("/healthz");
      if (!ok(r, 200)) return std::cerr << "GET /healthz failed\n", 1;
      us.push_back(micros(Clock::now() - t0));
    }
    const Percentiles p = percentiles(us);
    std::printf("  %-8s %10s  p50 %8.1f us  p99 %8.1f us  p999 %8.1f us\n", "http", "GET /healthz", p.p50,
                p.p99, p.p999);
    out["p50_us_healthz"] = p.p50;
  }
  for (std::uint64_t bytes : kSizes) {
    std::vector<double> us;
    const json body = ops_body(json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", bytes}}}));
    for (int i = 0; i < count_for(bytes, 1) / 2; ++i) {
      const double x = post(body);
      if (x < 0) return std::cerr << "a transfer failed\n", 1;
      us.push_back(x);
    }
    const Percentiles p = percentiles(us);
    print("agent", bytes, p);
    out["p50_us_" + std::to_string(bytes)] = p.p50;
  }
  // 1,000 blocks of 16 KiB scattered over 32 MiB on both sides, against one contiguous 16 MiB range.
  std::mt19937_64 rng(1);
  std::vector<std::uint64_t> from(2048), to(2048);
  for (std::size_t i = 0; i < from.size(); ++i) from[i] = to[i] = i;
  std::shuffle(from.begin(), from.end(), rng);
  std::shuffle(to.begin(), to.end(), rng);
  json blocks = json::array();
  for (int i = 0; i < 1000; ++i) {
    blocks.push_back({{"sourceOffset", from[i] * 16384}, {"targetOffset", to[i] * 16384}, {"length", 16384}});
  }
  const json scattered = ops_body(blocks);
  // The same blocks as opsPacked: little-endian uint64 triples, base64.
  std::string raw;
  for (int i = 0; i < 1000; ++i) {
    for (std::uint64_t v : {from[i] * 16384, to[i] * 16384, std::uint64_t{16384}}) {
      for (int b = 0; b < 8; ++b) raw.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
    }
  }
  json packed = scattered;
  packed.erase("ops");
  packed["opsPacked"] = base64_encode(raw);
  const json contiguous = json{{"source", {{"region", "bench-src"}, {"offset", 0}, {"length", 16 << 20}}},
                               {"targets", {{{"grant", key}}}}};
  std::vector<double> ts, tp, tc;
  for (int round = 0; round < 10 * options.iterations; ++round) {
    const double x = post(scattered), p = post(packed), y = post(contiguous);
    if (x < 0 || p < 0 || y < 0) return std::cerr << "a 16 MiB transfer failed\n", 1;
    ts.push_back(x);
    tp.push_back(p);
    tc.push_back(y);
  }
  const double s = percentiles(ts).p50, sp = percentiles(tp).p50, c = percentiles(tc).p50;
  const double bytes = 1000.0 * 16384, contiguous_gbps = 16.0 * (1 << 20) / c / 1e3;
  std::printf("  one contiguous 16 MiB: %.2f GB/s (p50 %.0f us)\n", contiguous_gbps, c);
  std::printf("  1,000 x 16 KiB scattered, ops: %.2f GB/s (p50 %.0f us); ratio %.2fx\n", bytes / s / 1e3, s,
              bytes / s / 1e3 / contiguous_gbps);
  std::printf("  1,000 x 16 KiB scattered, opsPacked: %.2f GB/s (p50 %.0f us); ratio %.2fx\n",
              bytes / sp / 1e3, sp, bytes / sp / 1e3 / contiguous_gbps);
  out["scattered_over_contiguous"] = bytes / s / 1e3 / contiguous_gbps;
  out["packed_over_contiguous"] = bytes / sp / 1e3 / contiguous_gbps;
  if (options.json) std::cout << out.dump() << "\n";
  (void)a->Delete("/v1/regions/bench-src");
  (void)b->Delete("/v1/grants/" + json::parse(g->body)["id"].get<std::string>());
  (void)b->Delete("/v1/regions/bench-dst");
  return 0;
}

}  // namespace conduit::bench
