// One-sided RMA between two real processes over each provider this machine has: bytes land intact
// (checked by CRC32C on the target), and every failure is an error value within a bounded time.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "build_paths.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "conduit/transport.h"
#include "peer_process.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::PeerProcess;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

struct Target {
  std::unique_ptr<PeerProcess> process;
  RemoteKey key;

  std::uint32_t crc(std::uint64_t offset, std::uint64_t length) {
    auto answer = process->ask("crc " + std::to_string(offset) + " " + std::to_string(length));
    EXPECT_TRUE(answer.has_value()) << "target did not answer";
    return answer ? static_cast<std::uint32_t>(std::stoul(*answer)) : 0;
  }
};

Target spawn_target(const std::string& provider, std::uint64_t bytes, std::uint64_t seed,
                    const std::string& access = "rw", int rails = 1, const std::string& register_rails = "") {
  Target t;
  t.process = std::make_unique<PeerProcess>(
      std::vector<std::string>{conduit::testing::built_binary("conduit-test-peer"), "--provider", provider,
                               "--bytes", std::to_string(bytes), "--seed", std::to_string(seed), "--access",
                               access, "--rails", std::to_string(rails), "--register-rails", register_rails});
  auto line = t.process->read_line(30s);
  if (!line) {
    ADD_FAILURE() << "target printed no key";
    return t;
  }
  auto key = RemoteKey::parse(*line);
  if (!key) {
    ADD_FAILURE() << "target said: " << *line;
    return t;
  }
  t.key = *key;
  return t;
}

class Rma : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { open(/*rails=*/1); }

  // transport_ anew with `rails` rails.
  void open(int rails) {
    TransportConfig config;
    config.provider = GetParam();
    config.bind_address = "127.0.0.1";
    config.stall_timeout = 3s;
    config.rails = rails;
    auto t = open_transport(config);
    ASSERT_TRUE(t) << t.error().message;
    transport_ = std::move(*t);
  }

  // A seeded local region registered for local use.
  std::pair<MemoryRegion, Registration> local_region(std::uint64_t bytes, std::uint64_t seed) {
    auto region = MemoryRegion::allocate_host(bytes);
    EXPECT_TRUE(region);
    fill_pattern(region->bytes(), seed);
    auto reg = transport_->register_memory(*region, Access::Local);
    EXPECT_TRUE(reg) << reg.error().message;
    return {std::move(*region), std::move(*reg)};
  }

  BatchStatus run(OpKind kind, const Registration& local, std::uint64_t local_offset, const RemoteKey& key,
                  std::uint64_t remote_offset, std::uint64_t length, BatchOptions options = {}) {
    Op op{kind, &local, local_offset, key, remote_offset, length};
    auto id = transport_->submit({&op, 1}, options);
    if (!id) return BatchStatus{0, 0, true, id.error()};
    return wait(*transport_, *id);
  }

  std::unique_ptr<Transport> transport_;
};

struct Case {
  std::uint64_t length;
  std::uint64_t local_offset;
  std::uint64_t remote_offset;
};

TEST_P(Rma, WriteLandsIntactInPeerProcess) {
  for (const Case c : {Case{1, 0, 0}, Case{4 * KiB, 0, 0}, Case{MiB + 1, 3, 5}, Case{256 * MiB, 0, 0}}) {
    SCOPED_TRACE("length " + std::to_string(c.length));
    const std::uint64_t size = c.length + 8;
    Target target = spawn_target(GetParam(), size, /*seed=*/99);
    auto [region, local] = local_region(size, /*seed=*/7);
    const BatchStatus s = run(OpKind::Write, local, c.local_offset, target.key, c.remote_offset, c.length);
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_TRUE(s.finished);
    EXPECT_EQ(s.bytes_done, c.length);
    EXPECT_EQ(target.crc(c.remote_offset, c.length),
              crc32c(region.bytes().subspan(c.local_offset, c.length)));
    // Bytes around the written range are untouched.
    if (c.remote_offset > 0) {
      std::vector<std::byte> before(size);
      fill_pattern(before, 99);
      EXPECT_EQ(target.crc(0, c.remote_offset), crc32c(std::span(before).first(c.remote_offset)));
    }
  }
}

TEST_P(Rma, ReadFetchesPeerBytes) {
  for (const Case c : {Case{1, 0, 0}, Case{4 * KiB, 0, 0}, Case{MiB + 1, 3, 5}, Case{256 * MiB, 0, 0}}) {
    SCOPED_TRACE("length " + std::to_string(c.length));
    const std::uint64_t size = c.length + 8;
    Target target = spawn_target(GetParam(), size, /*seed=*/42);
    auto [region, local] = local_region(size, /*seed=*/7);
    const BatchStatus s = run(OpKind::Read, local, c.local_offset, target.key, c.remote_offset, c.length);
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_EQ(s.bytes_done, c.length);
    EXPECT_EQ(crc32c(region.bytes().subspan(c.local_offset, c.length)),
              target.crc(c.remote_offset, c.length));
  }
}

TEST_P(Rma, RailsStripeOneBatchIntact) {
  Target target = spawn_target(GetParam(), 64 * MiB, 5, "rw", /*rails=*/2);
  // More local rails than the target has: rail r talks to target rail r mod 2.
  ASSERT_NO_FATAL_FAILURE(open(3));
  auto [region, local] = local_region(64 * MiB, 11);
  const BatchStatus s = run(OpKind::Write, local, 0, target.key, 0, 64 * MiB, {256 * KiB, 8});
  ASSERT_FALSE(s.error) << s.error->message;
  EXPECT_EQ(target.crc(0, 64 * MiB), crc32c(region.bytes()));
}

// A region registered on some rails only (the ones nearest its memory): its key names just those, and a
// writer whose own registration covers other rails, and another count of them, still lands every byte.
TEST_P(Rma, RegistrationOnChosenRailsCarriesOnlyThoseAndStillLands) {
  Target target = spawn_target(GetParam(), 32 * MiB, 5, "rw", /*rails=*/4, /*register_rails=*/"1,3");
  ASSERT_EQ(target.key.rails.size(), 2u) << "the key names only rails 1 and 3";
  EXPECT_NE(target.key.rails[0].address, target.key.rails[1].address);
  ASSERT_NO_FATAL_FAILURE(open(3));
  auto region = MemoryRegion::allocate_host(32 * MiB);
  ASSERT_TRUE(region);
  fill_pattern(region->bytes(), 12);
  for (const std::vector<std::uint32_t>& rails :
       {std::vector<std::uint32_t>{0, 2}, std::vector<std::uint32_t>{1}, std::vector<std::uint32_t>{}}) {
    SCOPED_TRACE("local rails " + std::to_string(rails.size()));
    auto local = transport_->register_memory(*region, Access::Local, 0, Transport::kWholeRegion, rails);
    ASSERT_TRUE(local) << local.error().message;
    EXPECT_EQ(local->remote_key().rails.size(), rails.empty() ? 3u : rails.size());
    fill_pattern(region->bytes(), 12 + rails.size());
    const BatchStatus s = run(OpKind::Write, *local, 0, target.key, 0, 32 * MiB, {256 * KiB, 8});
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_EQ(target.crc(0, 32 * MiB), crc32c(region->bytes()));
    const BatchStatus r = run(OpKind::Read, *local, 0, target.key, 0, 32 * MiB, {256 * KiB, 8});
    ASSERT_FALSE(r.error) << r.error->message;
  }
  const std::vector<std::uint32_t> missing{3};
  auto bad = transport_->register_memory(*region, Access::Local, 0, Transport::kWholeRegion, missing);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);
}

// Many small ops in one batch, scattered on both sides (the KV-cache shape): the transport carries several
// of them per message where the provider allows it (batch.h), and each must still land at its own offsets.
// Sizes from 1 byte to past the size that is joined, on two rails, written and then read back.
TEST_P(Rma, ScatteredSmallOpsLandEachAtItsOwnOffsets) {
  constexpr std::uint64_t kBytes = 16 * MiB;
  Target target = spawn_target(GetParam(), kBytes, /*seed=*/31, "rw", /*rails=*/2);
  ASSERT_NO_FATAL_FAILURE(open(2));
  auto [region, local] = local_region(kBytes, /*seed=*/32);

  // Disjoint slots of 96 KiB in a random order on each side; each op a random length within its slot.
  std::mt19937_64 rng(GetParam().size());
  constexpr std::uint64_t kSlot = 96 * KiB;
  std::vector<std::uint64_t> local_slots(kBytes / kSlot), remote_slots(kBytes / kSlot);
  std::iota(local_slots.begin(), local_slots.end(), 0);
  std::iota(remote_slots.begin(), remote_slots.end(), 0);
  std::shuffle(local_slots.begin(), local_slots.end(), rng);
  std::shuffle(remote_slots.begin(), remote_slots.end(), rng);
  const std::uint64_t lengths[] = {1,       8, 100, 4 * KiB, 16 * KiB, 16 * KiB + 3, 64 * KiB, 64 * KiB + 1,
                                   90 * KiB};
  std::vector<Op> ops;
  for (std::size_t i = 0; i < local_slots.size(); ++i) {
    const std::uint64_t length = lengths[rng() % std::size(lengths)];
    const std::uint64_t skew = rng() % (kSlot - length + 1);
    ops.push_back(Op{OpKind::Write, &local, local_slots[i] * kSlot + skew, target.key,
                     remote_slots[i] * kSlot + (kSlot - length - skew), length});
  }
  auto id = transport_->submit(ops, {MiB, 16});
  ASSERT_TRUE(id) << id.error().message;
  BatchStatus s = wait(*transport_, *id);
  ASSERT_FALSE(s.error) << s.error->message;
  std::vector<std::byte> expected(kBytes);
  fill_pattern(expected, 31);
  std::uint64_t total = 0;
  for (const Op& op : ops) {
    std::copy_n(region.bytes().begin() + op.local_offset, op.length, expected.begin() + op.remote_offset);
    total += op.length;
  }
  EXPECT_EQ(s.bytes_done, total);
  EXPECT_EQ(target.crc(0, kBytes), crc32c(expected)) << "a range landed elsewhere, or not at all";

  // Read every range back into a cleared region at the local offsets it came from.
  std::fill(region.bytes().begin(), region.bytes().end(), std::byte{0});
  for (Op& op : ops) op.kind = OpKind::Read;
  id = transport_->submit(ops, {MiB, 16});
  ASSERT_TRUE(id) << id.error().message;
  s = wait(*transport_, *id);
  ASSERT_FALSE(s.error) << s.error->message;
  std::vector<std::byte> read_back(kBytes);
  for (const Op& op : ops) {
    std::copy_n(expected.begin() + op.remote_offset, op.length, read_back.begin() + op.local_offset);
  }
  EXPECT_TRUE(std::equal(read_back.begin(), read_back.end(), region.bytes().begin()))
      << "a read range came back to the wrong place";
}

TEST_P(Rma, OutOfRangeIsRejectedBeforePosting) {
  Target target = spawn_target(GetParam(), 4 * KiB, 1);
  auto [region, local] = local_region(64 * KiB, 2);
  Op past_end{OpKind::Write, &local, 0, target.key, 4 * KiB - 10, 11};
  auto id = transport_->submit({&past_end, 1});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(id.error().message.find("outside the 4096-byte remote region"), std::string::npos)
      << id.error().message;

  Op local_past_end{OpKind::Write, &local, 64 * KiB, target.key, 0, 1};
  id = transport_->submit({&local_past_end, 1});
  ASSERT_FALSE(id);
  EXPECT_NE(id.error().message.find("local range"), std::string::npos) << id.error().message;
  // Nothing was written: the target still holds its own pattern.
  std::vector<std::byte> expected(4 * KiB);
  fill_pattern(expected, 1);
  EXPECT_EQ(target.crc(0, 4 * KiB), crc32c(expected));
}

TEST_P(Rma, WrongKeyFailsWithoutHang) {
  Target target = spawn_target(GetParam(), MiB, 1);
  auto [region, local] = local_region(MiB, 2);
  RemoteKey wrong = target.key;
  wrong.rails[0].key += 1000;
  const auto start = std::chrono::steady_clock::now();
  const BatchStatus s = run(OpKind::Write, local, 0, wrong, 0, MiB);
  ASSERT_TRUE(s.error) << "a write with a forged key succeeded";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  std::vector<std::byte> expected(MiB);
  fill_pattern(expected, 1);
  EXPECT_EQ(target.crc(0, MiB), crc32c(expected)) << "bytes landed under a forged key";
}

TEST_P(Rma, DeregisteredKeyFailsClearly) {
  Target target = spawn_target(GetParam(), MiB, 1);
  auto [region, local] = local_region(MiB, 2);
  BatchStatus s = run(OpKind::Write, local, 0, target.key, 0, MiB);
  ASSERT_FALSE(s.error) << s.error->message;
  const std::uint32_t landed = crc32c(region.bytes());
  ASSERT_EQ(target.crc(0, MiB), landed);

  ASSERT_EQ(target.process->ask("dereg"), "ok");
  fill_pattern(region.bytes(), 3);
  s = run(OpKind::Write, local, 0, target.key, 0, MiB);
  ASSERT_TRUE(s.error) << "a write under a deregistered key succeeded";
  // tcp drops the connection (PeerUnreachable, and says the key may be why); shm never answers (TimedOut).
  EXPECT_TRUE(s.error->code == ErrorCode::RemoteAccess || s.error->code == ErrorCode::PeerUnreachable ||
              s.error->code == ErrorCode::TimedOut)
      << to_string(s.error->code) << ": " << s.error->message;
  if (s.error->code == ErrorCode::PeerUnreachable) {
    EXPECT_NE(s.error->message.find("refused the key"), std::string::npos) << s.error->message;
  }
  EXPECT_EQ(target.crc(0, MiB), landed) << "bytes landed under a deregistered key";
}

TEST_P(Rma, PeerKilledMidBatchFailsInBoundedTime) {
  Target target = spawn_target(GetParam(), 256 * MiB, 1);
  auto [region, local] = local_region(256 * MiB, 2);
  Op op{OpKind::Write, &local, 0, target.key, 0, 256 * MiB};
  auto id = transport_->submit({&op, 1}, {64 * KiB, 4});
  ASSERT_TRUE(id) << id.error().message;
  while (transport_->poll(*id).bytes_done == 0 && !transport_->poll(*id).finished) {
    std::this_thread::sleep_for(100us);
  }
  target.process->kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const BatchStatus s = wait(*transport_, *id);
  ASSERT_TRUE(s.error) << "batch succeeded although the target died";
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 15s);
  EXPECT_TRUE(s.error->code == ErrorCode::PeerUnreachable || s.error->code == ErrorCode::TimedOut)
      << to_string(s.error->code) << ": " << s.error->message;
}

// Transport::cancel on a large batch mid-flight: nothing more is posted, what was in flight is reaped,
// and the batch reports Cancelled having sent only part of its bytes. The registration (and its memory)
// can go at once, and a new batch to the same peer lands intact.
TEST_P(Rma, CancelMidFlightStopsTheBatchAndTheNextOneLandsIntact) {
  constexpr std::uint64_t kBytes = 256 * MiB;
  Target target = spawn_target(GetParam(), kBytes, /*seed=*/99);
  {
    auto [region, local] = local_region(kBytes, /*seed=*/7);
    Op op{OpKind::Write, &local, 0, target.key, 0, kBytes};
    auto id = transport_->submit({&op, 1}, {64 * KiB, 4});
    ASSERT_TRUE(id) << id.error().message;
    BatchStatus s = transport_->poll(*id);
    while (s.bytes_done == 0 && !s.finished) {
      std::this_thread::sleep_for(100us);
      s = transport_->poll(*id);
    }
    ASSERT_FALSE(s.finished) << "the batch ended before it could be cancelled";
    ASSERT_TRUE(transport_->cancel(*id));
    s = wait(*transport_, *id);
    ASSERT_TRUE(s.error) << "a cancelled batch reported success";
    EXPECT_EQ(s.error->code, ErrorCode::Cancelled) << s.error->message;
    EXPECT_LT(s.bytes_done, kBytes);
    EXPECT_EQ(s.bytes_total, kBytes);
    // Reported once, then forgotten like any finished batch.
    EXPECT_EQ(transport_->cancel(*id).error().code, ErrorCode::NotFound);
    // Nothing of the batch is in flight: its registration is released here, and its memory is scribbled
    // over and freed at the end of this scope while the target still runs.
    local.reset();
    fill_pattern(region.bytes(), /*seed=*/9);
  }
  auto [region, local] = local_region(kBytes, /*seed=*/8);
  const BatchStatus s = run(OpKind::Write, local, 0, target.key, 0, kBytes);
  ASSERT_FALSE(s.error) << s.error->message;
  EXPECT_EQ(s.bytes_done, kBytes);
  EXPECT_EQ(target.crc(0, kBytes), crc32c(region.bytes()));
}

// BatchOptions::on_finished: whoever waits on a batch is woken by its end instead of polling for it, once,
// whether it landed, failed or was cancelled, and poll() reports it finished by then.
TEST_P(Rma, TheBatchsEndWakesItsWaiterOnceHoweverItEnds) {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    bool wait_for_call() {
      std::unique_lock lock(mu);
      return cv.wait_for(lock, 20s, [&] { return calls > 0; });
    }
  };
  constexpr std::uint64_t kBytes = 64 * MiB;
  Target target = spawn_target(GetParam(), kBytes, /*seed=*/99);
  // Named, not a structured binding: a lambda may not capture one before C++20 in clang (the ASan build).
  auto regions = local_region(kBytes, /*seed=*/7);
  const MemoryRegion& region = regions.first;
  const Registration& local = regions.second;
  auto submit = [&](const RemoteKey& key, Waiter& w) {
    Op op{OpKind::Write, &local, 0, key, 0, kBytes};
    const BatchOptions options{64 * KiB, 4, [&w] {
                                 {
                                   std::lock_guard lock(w.mu);
                                   ++w.calls;
                                 }
                                 w.cv.notify_all();
                               }};
    auto id = transport_->submit({&op, 1}, options);
    EXPECT_TRUE(id) << id.error().message;
    return *id;
  };
  auto called_once = [](Waiter& w) {
    std::this_thread::sleep_for(50ms);  // room for a second call, which must not come
    std::lock_guard lock(w.mu);
    return w.calls;
  };

  Waiter landed;
  BatchId id = submit(target.key, landed);
  ASSERT_TRUE(landed.wait_for_call()) << "the batch's end was not pushed";
  BatchStatus s = transport_->poll(id);
  EXPECT_TRUE(s.finished);
  EXPECT_FALSE(s.error) << s.error->message;
  EXPECT_EQ(target.crc(0, kBytes), crc32c(region.bytes()));
  EXPECT_EQ(called_once(landed), 1);

  Waiter failed;
  RemoteKey wrong = target.key;
  wrong.rails[0].key += 1000;
  id = submit(wrong, failed);
  ASSERT_TRUE(failed.wait_for_call()) << "a failed batch's end was not pushed";
  s = transport_->poll(id);
  EXPECT_TRUE(s.finished);
  EXPECT_TRUE(s.error) << "a write with a forged key succeeded";
  EXPECT_EQ(called_once(failed), 1);

  Waiter cancelled;
  id = submit(target.key, cancelled);
  ASSERT_TRUE(transport_->cancel(id) || transport_->poll(id).finished);
  ASSERT_TRUE(cancelled.wait_for_call()) << "a cancelled batch's end was not pushed";
  EXPECT_TRUE(transport_->poll(id).finished);
  EXPECT_EQ(called_once(cancelled), 1);
}

INSTANTIATE_TEST_SUITE_P(Providers, Rma, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// libfabric 1.17's shm takes a spinlock in the peer's region to post to it; a peer killed while holding
// it never releases it, and the writer's progress thread spins inside fi_writemsg for good (seen in CI as
// a hang of PeerKilledMidBatchFailsInBoundedTime about once in 300 runs). Here the target takes that lock
// itself and is killed: the batch still fails in bounded time saying why, the wedged rail refuses the next
// batch, and the transport closes without waiting for its thread.
TEST(ShmWedge, APeerKilledHoldingShmsLockFailsTheBatchAndTheRailNotTheProcess) {
  TransportConfig config;
  config.provider = "shm";
  config.stall_timeout = 1s;
  auto transport = open_transport(config);
  ASSERT_TRUE(transport) << transport.error().message;
  EXPECT_TRUE((*transport)->health());
  Target target = spawn_target("shm", MiB, 1);
  const auto held = target.process->ask("hold-shm-lock");
  if (held != "held") GTEST_SKIP() << "cannot take shm's lock in the target: " << held.value_or("no answer");
  target.process->kill(SIGKILL);

  auto region = MemoryRegion::allocate_host(MiB);
  ASSERT_TRUE(region);
  auto local = (*transport)->register_memory(*region, Access::Local);
  ASSERT_TRUE(local) << local.error().message;
  const Op op{OpKind::Write, &*local, 0, target.key, 0, MiB};
  auto id = (*transport)->submit({&op, 1});
  ASSERT_TRUE(id) << id.error().message;
  const auto start = std::chrono::steady_clock::now();
  const BatchStatus s = wait(**transport, *id);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ASSERT_TRUE(s.error) << "a write to a dead peer succeeded";
  EXPECT_EQ(s.error->code, ErrorCode::PeerUnreachable) << s.error->message;
  EXPECT_NE(s.error->message.find("wedged"), std::string::npos) << s.error->message;

  auto again = (*transport)->submit({&op, 1});
  ASSERT_FALSE(again) << "a wedged rail took another batch";
  EXPECT_EQ(again.error().code, ErrorCode::Unavailable);
  EXPECT_NE(again.error().message.find("wedged"), std::string::npos) << again.error().message;
  const Status health = (*transport)->health();
  ASSERT_FALSE(health) << "a transport with a wedged rail says it is healthy";
  EXPECT_EQ(health.error().code, ErrorCode::Unavailable);
}

TEST(Transport, UnknownProviderIsNamed) {
  TransportConfig config;
  config.provider = "carrier-pigeon";
  auto t = open_transport(config);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::NotFound);
  EXPECT_NE(t.error().message.find("carrier-pigeon"), std::string::npos);
}

TEST(Transport, AbsentProviderSaysUnavailable) {
  TransportConfig config;
  config.provider = "efa";
  auto t = open_transport(config);
  if (t) GTEST_SKIP() << "this machine has an EFA device";
  EXPECT_EQ(t.error().code, ErrorCode::Unavailable);
  EXPECT_NE(t.error().message.find("efa"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace conduit
