#include "batch_table.h"

#include <string>

namespace conduit {

BatchId BatchTable::add(std::shared_ptr<BatchProgress> batch) {
  std::lock_guard lock(mu_);
  const BatchId id = next_++;
  batch->id = id;
  batches_.emplace(id, std::move(batch));
  return id;
}

Status BatchTable::cancel(BatchId id) {
  std::shared_ptr<BatchProgress> batch;
  {
    std::lock_guard lock(mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return make_error(ErrorCode::NotFound, "unknown batch " + std::to_string(id));
    batch = it->second;
  }
  if (!batch->finished()) batch->cancel();
  return {};
}

void BatchTable::fail_if(const std::function<bool(const BatchProgress&)>& affected, const Error& error) {
  std::lock_guard lock(mu_);
  for (auto& [_, batch] : batches_) {
    if (!batch->finished() && affected(*batch)) batch->fail(error);
  }
}

BatchStatus BatchTable::poll(BatchId id) {
  std::shared_ptr<BatchProgress> batch;
  {
    std::lock_guard lock(mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) {
      return BatchStatus{0, 0, true, make_error(ErrorCode::NotFound, "unknown batch " + std::to_string(id))};
    }
    batch = it->second;
  }
  BatchStatus status = batch->status();
  if (status.finished) {
    std::lock_guard lock(mu_);
    batches_.erase(id);
  }
  return status;
}

}  // namespace conduit
