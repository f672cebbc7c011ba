// Runs scatter-gather transfers (scatter.h) with no thread of their own: one thread submits each as one
// batch on its transport and watches every batch in flight, so thousands of small transfers cost no thread,
// no registration (the source region's is shared, the target's grant long-lived) and no polling by the
// caller (the end wakes whoever waits on the transfer).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "transfer/batch_wakeup.h"
#include "transfer/run.h"

namespace conduit::agent {

class ScatterExecutor {
 public:
  // Called on the executor's thread once a transfer ended, with why it failed (nullopt: Succeeded).
  using Done = std::function<void(const std::shared_ptr<TransferRun>&, std::optional<run::Failure>)>;
  explicit ScatterExecutor(Done done);
  ~ScatterExecutor();  // stop()

  // Submits a transfer whose source registration (scatter_local) and transport (transports[0]) are set, as
  // one batch, on the caller's thread, and hands it to the executor's thread to watch. A transfer that ends
  // at once (stopped, or refused by the transport) has `done` called before this returns.
  void submit(std::shared_ptr<TransferRun> transfer);
  // Ends the thread once every transfer it holds ended (their stop flags are the caller's to set).
  void stop();
  // Any thread: looks at the transfer's batch (a stop cancels it; progress goes to its status) and, once it
  // ended, has `done` called here unless another thread already did. False once the transfer has ended.
  bool settle(const std::shared_ptr<TransferRun>& transfer);

 private:
  void loop();
  bool launch(const std::shared_ptr<TransferRun>& transfer) const;  // false: it ended at once (done called)

  Done done_;
  // Woken by submit(), stop() and the end of every batch nobody waits on (a waiter settles its own); the
  // loop looks at the batches in flight then, and every kLook otherwise (progress in status, stops).
  std::shared_ptr<BatchWakeup> wakeup_ = std::make_shared<BatchWakeup>();
  std::mutex mu_;
  std::deque<std::shared_ptr<TransferRun>> queue_;  // launched, not yet watched
  int launching_ = 0;  // submit() calls between their launch and their flight's queueing
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace conduit::agent
