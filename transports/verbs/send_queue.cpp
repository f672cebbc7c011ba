#include "send_queue.h"

#include <algorithm>

namespace conduit::verbs {

SendQueue::SendQueue(std::uint32_t depth, std::uint32_t signal_every)
    : depth_(std::max<std::uint32_t>(depth, 1)), signal_every_(std::max<std::uint32_t>(signal_every, 1)) {}

std::uint32_t SendQueue::signaled_outstanding() const {
  return static_cast<std::uint32_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.signaled; }));
}

std::uint64_t SendQueue::push(std::uint64_t tag) {
  Entry e{next_seq_++, tag, false};
  ++unsignaled_run_;
  // The WR that fills the queue must be signaled: nothing can be posted after it until a completion
  // frees a slot, and without a signal no completion would ever come.
  if (unsignaled_run_ >= signal_every_ || entries_.size() + 1 >= depth_) {
    e.signaled = true;
    unsignaled_run_ = 0;
  }
  entries_.push_back(e);
  return e.seq;
}

void SendQueue::seal() {
  if (!entries_.empty() && !entries_.back().signaled) {
    entries_.back().signaled = true;
    unsignaled_run_ = 0;
  }
}

// Sequence numbers rise but may have gaps (WRs dropped unposted), so look them up rather than index.
const SendQueue::Entry* SendQueue::find(std::uint64_t seq) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), seq,
                             [](const Entry& e, std::uint64_t s) { return e.seq < s; });
  return it != entries_.end() && it->seq == seq ? &*it : nullptr;
}

bool SendQueue::signaled(std::uint64_t seq) const {
  const Entry* e = find(seq);
  return e != nullptr && e->signaled;
}

bool SendQueue::holds(std::uint64_t seq) const { return find(seq) != nullptr; }

std::vector<std::uint64_t> SendQueue::retire_through(std::uint64_t seq) {
  std::vector<std::uint64_t> tags;
  while (!entries_.empty() && entries_.front().seq <= seq) {
    tags.push_back(entries_.front().tag);
    entries_.pop_front();
  }
  if (entries_.empty()) unsignaled_run_ = 0;
  return tags;
}

std::vector<std::uint64_t> SendQueue::drop_unposted(std::uint64_t seq) {
  std::vector<std::uint64_t> tags;
  while (!entries_.empty() && entries_.back().seq >= seq) {
    tags.push_back(entries_.back().tag);
    entries_.pop_back();
  }
  std::reverse(tags.begin(), tags.end());
  unsignaled_run_ = 0;
  for (auto it = entries_.rbegin(); it != entries_.rend() && !it->signaled; ++it) ++unsignaled_run_;
  return tags;
}

std::vector<std::uint64_t> SendQueue::drop_uncovered() {
  std::vector<std::uint64_t> tags;
  while (!entries_.empty() && !entries_.back().signaled) {
    tags.push_back(entries_.back().tag);
    entries_.pop_back();
  }
  std::reverse(tags.begin(), tags.end());
  unsignaled_run_ = 0;
  return tags;
}

}  // namespace conduit::verbs
