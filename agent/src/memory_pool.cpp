#include "memory_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace conduit::agent {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kHugePage = MemoryRegion::kHugePage;  // how allocate_host rounds a size

std::uint64_t huge_pages(std::uint64_t bytes) { return (bytes + kHugePage - 1) / kHugePage; }

// Zeroes `memory` a huge page at a time, stopping early when `stop` says so: false then.
template <typename Stop>
bool zero(MemoryRegion& memory, Stop stop) {
  const auto bytes = memory.bytes();
  for (std::size_t at = 0; at < bytes.size(); at += kHugePage) {
    if (stop()) return false;
    std::memset(bytes.data() + at, 0, std::min<std::size_t>(kHugePage, bytes.size() - at));
  }
  return true;
}

struct Block {
  std::shared_ptr<MemoryRegion> memory;  // as allocate_host made it: unmapped when the last holder goes
  Clock::time_point since{};             // zeroed at
  std::uint64_t bytes() const { return memory->size(); }
};

}  // namespace

struct MemoryPool::State : std::enable_shared_from_this<State> {
  State(std::uint64_t max, std::chrono::milliseconds keep_for) : max_bytes(max), keep(keep_for) {}

  const std::uint64_t max_bytes;
  const std::chrono::milliseconds keep;

  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<Block> dirty;  // given back, oldest first
  std::deque<Block> clean;  // zeroed, oldest first
  std::uint64_t held = 0;   // bytes of dirty, clean and the block being zeroed
  std::uint64_t reused = 0;
  std::optional<Block> zeroing;
  // Read by the zeroing thread between huge pages, without the lock.
  std::atomic<bool> stop{false};
  std::atomic<bool> drop_zeroing{false};
  std::thread thread;

  // A region over `bytes` of `block` whose release gives the block back (or unmaps it, the pool gone).
  MemoryRegion lend(std::shared_ptr<MemoryRegion> block, std::uint64_t bytes) {
    void* data = block->data();
    const bool huge = block->huge_pages();
    return MemoryRegion::borrow(
        MemoryKind::Host, data, bytes, -1,
        [pool = weak_from_this(), block = std::move(block)]() mutable {
          if (auto state = pool.lock()) state->give(std::move(block));
        },
        huge);
  }

  void give(std::shared_ptr<MemoryRegion> memory) {
    std::vector<Block> gone;  // unmapped after the lock: a gigabyte's munmap takes a while
    {
      std::lock_guard lock(mu);
      if (stop.load() || memory->size() > max_bytes) {
        gone.push_back({std::move(memory)});
      } else {
        held += memory->size();
        dirty.push_back({std::move(memory)});
        // Over the bound: the oldest blocks go, zeroed ones first (the newest given back is the likeliest
        // asked for again).
        while (held > max_bytes && !clean.empty()) pop(clean, gone);
        while (held > max_bytes && dirty.size() > 1) pop(dirty, gone);
      }
    }
    wake.notify_all();
  }

  void pop(std::deque<Block>& from, std::vector<Block>& gone) {
    held -= from.front().bytes();
    gone.push_back(std::move(from.front()));
    from.pop_front();
  }

  void run() {
    std::unique_lock lock(mu);
    while (!stop.load()) {
      std::vector<Block> gone;
      const auto now = Clock::now();
      while (!clean.empty() && clean.front().since + keep <= now) pop(clean, gone);
      if (!gone.empty()) {
        lock.unlock();
        gone.clear();
        lock.lock();
        continue;
      }
      if (!dirty.empty()) {
        zeroing = std::move(dirty.front());
        dirty.pop_front();
        drop_zeroing.store(false);
        const auto memory = zeroing->memory;
        lock.unlock();
        // A huge page at a time, so that a stop or a shrink is heard within one.
        const bool zeroed = zero(*memory, [this] {
          return stop.load(std::memory_order_relaxed) || drop_zeroing.load(std::memory_order_relaxed);
        });
        lock.lock();
        Block block = std::move(*zeroing);
        zeroing.reset();
        // A take() may be waiting for this block, whether it is kept or dropped.
        wake.notify_all();
        if (zeroed && !drop_zeroing.load()) {
          block.since = Clock::now();
          clean.push_back(std::move(block));
        } else {
          if (!drop_zeroing.load()) held -= block.bytes();  // a shrink already took it off
          gone.push_back(std::move(block));
          lock.unlock();
          gone.clear();
          lock.lock();
        }
        continue;
      }
      const auto more = [this] { return stop.load() || !dirty.empty(); };
      if (clean.empty()) {
        wake.wait(lock, more);
      } else {
        wake.wait_until(lock, clean.front().since + keep, more);
      }
    }
  }
};

MemoryPool::MemoryPool(std::uint64_t max_bytes, std::chrono::milliseconds keep)
    : state_(std::make_shared<State>(max_bytes, keep)) {
  if (max_bytes > 0) state_->thread = std::thread([state = state_.get()] { state->run(); });
}

MemoryPool::~MemoryPool() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop.store(true);
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

std::optional<MemoryRegion> MemoryPool::take(std::uint64_t bytes) {
  if (bytes < kMinBytes) return std::nullopt;
  const auto fits = [&](const Block& b) { return huge_pages(b.bytes()) == huge_pages(bytes); };
  std::shared_ptr<MemoryRegion> block;
  bool dirty = false;
  {
    std::unique_lock lock(state_->mu);
    // One being zeroed is waited for: the rest of a huge page's worth of memset at most per page left.
    state_->wake.wait(
        lock, [&] { return !state_->zeroing || state_->drop_zeroing.load() || !fits(*state_->zeroing); });
    // The newest first: the likeliest to be in the caches, the last to expire.
    if (auto it = std::find_if(state_->clean.rbegin(), state_->clean.rend(), fits);
        it != state_->clean.rend()) {
      block = std::move(it->memory);
      state_->clean.erase(std::next(it).base());
    } else if (auto d = std::find_if(state_->dirty.rbegin(), state_->dirty.rend(), fits);
               d != state_->dirty.rend()) {
      block = std::move(d->memory);
      state_->dirty.erase(std::next(d).base());
      dirty = true;
    } else {
      return std::nullopt;
    }
    state_->held -= block->size();
    ++state_->reused;
  }
  // Not zeroed yet: zeroed here, before anyone can see it. Cheap next to fresh memory: 14-48 ms a GiB of
  // memory already faulted in, against 0.2-1.1 s to fault in a new GiB (memory_pool.h).
  if (dirty) zero(*block, [] { return false; });
  return state_->lend(std::move(block), bytes);
}

MemoryRegion MemoryPool::keep(MemoryRegion memory) {
  if (state_->max_bytes == 0 || memory.kind() != MemoryKind::Host || memory.size() < kMinBytes ||
      memory.size() > state_->max_bytes) {
    return memory;
  }
  auto block = std::make_shared<MemoryRegion>(std::move(memory));
  const auto bytes = block->size();
  return state_->lend(std::move(block), bytes);
}

void MemoryPool::shrink_to(std::uint64_t bytes) {
  std::vector<Block> gone;
  {
    std::lock_guard lock(state_->mu);
    while (state_->held > bytes && !state_->dirty.empty()) state_->pop(state_->dirty, gone);
    if (state_->held > bytes && state_->zeroing && !state_->drop_zeroing.load()) {
      state_->drop_zeroing.store(true);  // the zeroing thread unmaps it within one huge page
      state_->held -= state_->zeroing->bytes();
    }
    while (state_->held > bytes && !state_->clean.empty()) state_->pop(state_->clean, gone);
  }
}

std::uint64_t MemoryPool::held_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->held;
}

std::uint64_t MemoryPool::reused_count() const {
  std::lock_guard lock(state_->mu);
  return state_->reused;
}

}  // namespace conduit::agent
