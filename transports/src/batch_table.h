// A transport's batches by id, from submit() until poll() has reported them finished once: the ids,
// the NotFound answer for an unknown or already reported batch, and forgetting a batch after it
// finished, alike in every backend.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "batch_progress.h"
#include "conduit/transport.h"

namespace conduit {

class BatchTable {
 public:
  // Gives the batch its id (BatchProgress::id) and keeps it.
  BatchId add(std::shared_ptr<BatchProgress> batch);
  // submit()'s last step, once a SlicedBatch is filled: opens it, keeps it, and hands it to each of
  // `rails` (the transport's, indexed like the batch's parts) it has work on. Returns its id.
  template <class Batch, class Rails>
  BatchId start(const std::shared_ptr<Batch>& batch, const Rails& rails) {
    batch->open();
    const BatchId id = add(batch);
    for (std::size_t r = 0; r < batch->parts.size(); ++r) {
      if (!batch->parts[r].ops.empty()) rails[r]->enqueue(batch);
    }
    return id;
  }
  // Fails every unfinished batch for which `affected` says yes with `error` (a rail that can never move
  // again fails the batches with work on it).
  void fail_if(const std::function<bool(const BatchProgress&)>& affected, const Error& error);
  // The batch's status; a finished batch is forgotten once reported.
  BatchStatus poll(BatchId id);
  // Transport::cancel's bookkeeping: marks the batch cancelled (its rails close their parts as they
  // next look at it). NotFound for an unknown or already reported batch.
  Status cancel(BatchId id);

 private:
  std::mutex mu_;
  BatchId next_ = 1;
  std::unordered_map<BatchId, std::shared_ptr<BatchProgress>> batches_;
};

}  // namespace conduit
