#include "batch_progress.h"

#include <string>

namespace conduit {

void BatchProgress::fail(Error error) {
  {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::move(error);
    stopped_.store(true, std::memory_order_relaxed);
    failed_.store(true, std::memory_order_release);
  }
  notify_if_finished();
}

void BatchProgress::notify_if_finished() {
  if (!finished() || notified_.exchange(true)) return;
  if (on_finished) on_finished();
}

void BatchProgress::cancel() {
  std::lock_guard lock(mu_);
  if (!error_) error_ = make_error(ErrorCode::Cancelled, "batch " + std::to_string(id) + " was cancelled");
  stopped_.store(true, std::memory_order_release);
}

std::optional<Error> BatchProgress::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

BatchStatus BatchProgress::status() const {
  BatchStatus status;
  status.bytes_total = bytes_total;
  status.finished = finished();
  status.bytes_done = bytes_done.load();
  status.error = error();
  return status;
}

}  // namespace conduit
