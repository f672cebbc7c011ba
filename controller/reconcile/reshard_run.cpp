#include "reshard_run.h"

#include <algorithm>

#include "step.h"
#include "transfer_job.h"

namespace conduit::controller {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::string_view to_string(ReshardBatch::State state) {
  switch (state) {
    case ReshardBatch::State::Pending:
      return "Pending";
    case ReshardBatch::State::Running:
      return "Running";
    case ReshardBatch::State::Succeeded:
      return "Succeeded";
    case ReshardBatch::State::Failed:
      return "Failed";
  }
  return "Pending";
}

namespace {

std::optional<ReshardBatch::State> state_from(const std::string& text) {
  for (const auto s : {ReshardBatch::State::Pending, ReshardBatch::State::Running,
                       ReshardBatch::State::Succeeded, ReshardBatch::State::Failed}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

template <typename T>
T number(const json& j, const char* key, T fallback = 0) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<T>() : fallback;
}

}  // namespace

bool ReshardRun::all_landed() const {
  return std::all_of(batches.begin(), batches.end(),
                     [](const ReshardBatch& b) { return b.state == ReshardBatch::State::Succeeded; });
}

bool ReshardRun::all_committed() const {
  return !committed.empty() && std::all_of(committed.begin(), committed.end(), [](bool c) { return c; });
}

// Compact: a job of 64 x 64 pods has 4,096 batches, and the whole annotation must stay well under the
// apiserver's 256 KiB for all of them. A batch is [source, target, bytes, ops, state, transfer, attempts,
// done, notBefore?]; its last error is status's to show, not the record's.
json ReshardRun::to_json() const {
  json j{{"fingerprint", fingerprint},
         {"fromVersion", from_version},
         {"bytes", figures.bytes},
         {"busiest", {figures.busiest_target ? "target" : "source", figures.busiest, figures.busiest_bytes}}};
  if (figures.lower_bound_seconds) j["lowerBoundSeconds"] = *figures.lower_bound_seconds;
  j["batches"] = json::array();
  for (const auto& b : batches) {
    json row = json::array({b.source, b.target, b.bytes, b.ops, std::string(to_string(b.state)), b.transfer,
                            b.attempts, b.done});
    if (b.not_before) row.push_back(format_rfc3339(*b.not_before, TimePrecision::Millis));
    j["batches"].push_back(std::move(row));
  }
  j["committed"] = committed;
  return j;
}

std::optional<ReshardRun> ReshardRun::from_json(const json& j) {
  if (!j.is_object() || !j.contains("fingerprint") || !j["fingerprint"].is_string()) return std::nullopt;
  ReshardRun run;
  run.fingerprint = j["fingerprint"].get<std::string>();
  run.from_version = number<std::uint64_t>(j, "fromVersion");
  run.figures.bytes = number<std::uint64_t>(j, "bytes");
  if (const json busiest = j.value("busiest", json()); busiest.is_array() && busiest.size() == 3 &&
                                                       busiest[1].is_number_unsigned() &&
                                                       busiest[2].is_number_unsigned()) {
    run.figures.busiest_target = busiest[0] == "target";
    run.figures.busiest = busiest[1].get<std::uint32_t>();
    run.figures.busiest_bytes = busiest[2].get<std::uint64_t>();
  }
  if (j.contains("lowerBoundSeconds") && j["lowerBoundSeconds"].is_number())
    run.figures.lower_bound_seconds = j["lowerBoundSeconds"].get<double>();
  for (const auto& row : j.value("batches", json::array())) {
    if (!row.is_array() || row.size() < 8) return std::nullopt;
    for (const std::size_t i : {0, 1, 2, 3, 6, 7}) {
      if (!row[i].is_number_unsigned()) return std::nullopt;
    }
    const auto state = row[4].is_string() ? state_from(row[4].get<std::string>()) : std::nullopt;
    if (!state || !row[5].is_string()) return std::nullopt;
    ReshardBatch b;
    b.source = row[0].get<std::uint32_t>();
    b.target = row[1].get<std::uint32_t>();
    b.bytes = row[2].get<std::uint64_t>();
    b.ops = row[3].get<std::uint32_t>();
    b.state = *state;
    b.transfer = row[5].get<std::string>();
    b.attempts = row[6].get<std::uint32_t>();
    b.done = row[7].get<std::uint64_t>();
    if (row.size() > 8 && row[8].is_string()) b.not_before = parse_rfc3339(row[8].get<std::string>());
    run.batches.push_back(std::move(b));
  }
  for (const auto& c : j.value("committed", json::array()))
    run.committed.push_back(c.is_boolean() && c.get<bool>());
  return run;
}

namespace {

// What the batch's transfer said, folded into the batch.
void fold(ReshardBatch& b, const BatchSeen& seen, const ReshardOptions& options) {
  if (b.state != ReshardBatch::State::Running) return;
  switch (seen.kind) {
    case BatchSeen::Kind::None:
      return;
    case BatchSeen::Kind::Answered: {
      const auto& t = seen.transfer;
      b.done = t.bytes_done;
      if (t.state == "Succeeded") {
        b.state = ReshardBatch::State::Succeeded;
        b.done = b.bytes;
        b.reason.clear();
        b.message.clear();
      } else if (t.state == "Failed" || t.state == "Cancelled") {
        b.state = ReshardBatch::State::Failed;
        b.reason = t.reason.empty() ? reason::kAgentError : t.reason;
        b.message = t.message.empty() ? "transfer " + t.state : t.message;
      }
      return;
    }
    case BatchSeen::Kind::Lost:
      b.state = ReshardBatch::State::Failed;
      b.reason = reason::kTransferLost;
      b.message = seen.error;
      return;
    case BatchSeen::Kind::Unreachable:
      if (seen.unreachable_for < options.unreachable_grace) return;
      b.state = ReshardBatch::State::Failed;
      b.reason = reason::kPeerUnreachable;
      b.message = seen.error;
      return;
  }
}

}  // namespace

ReshardStep step_reshard(ReshardRun& run, const std::vector<BatchSeen>& seen, const TransferJobSpec& spec,
                         TimePoint now, const std::function<std::string(const ReshardBatch&)>& names,
                         const ReshardOptions& options) {
  for (std::size_t i = 0; i < run.batches.size() && i < seen.size(); ++i)
    fold(run.batches[i], seen[i], options);

  ReshardStep step;
  std::optional<milliseconds> wait;
  auto sooner = [&](milliseconds d) { wait = wait ? std::min(*wait, d) : d; };
  for (std::size_t i = 0; i < run.batches.size(); ++i) {
    auto& b = run.batches[i];
    if (b.state == ReshardBatch::State::Failed) {
      // backoffLimit retries of this batch: attempts = 1 + retries.
      const std::uint32_t retries = b.attempts == 0 ? 0 : b.attempts - 1;
      if (is_permanent(b.reason)) {
        return {ReshardStep::Kind::Fail, {}, b.reason, "batch " + names(b) + ": " + b.message, std::nullopt};
      }
      if (retries >= spec.backoff_limit) {
        return {ReshardStep::Kind::Fail,
                {},
                reason::kBackoffLimitExceeded,
                "batch " + names(b) + " failed " + std::to_string(b.attempts) + " time" +
                    (b.attempts == 1 ? "" : "s") + " (backoffLimit " + std::to_string(spec.backoff_limit) +
                    " retries per batch); last error: " + b.reason + ": " + b.message,
                std::nullopt};
      }
      b.state = ReshardBatch::State::Pending;
      b.not_before = std::chrono::floor<milliseconds>(now + backoff_delay(retries));
    }
    if (b.state == ReshardBatch::State::Pending) {
      if (!b.not_before || *b.not_before <= now) {
        step.start.push_back(i);
      } else {
        sooner(std::chrono::ceil<milliseconds>(*b.not_before - now));
      }
    }
    if (b.state == ReshardBatch::State::Running) sooner(options.poll_interval);
  }
  if (!step.start.empty()) {
    step.kind = ReshardStep::Kind::Start;
    step.wait = std::min(options.poll_interval, milliseconds(100));
    return step;
  }
  if (run.all_landed()) {
    step.kind = run.all_committed() ? ReshardStep::Kind::Complete : ReshardStep::Kind::Commit;
    return step;
  }
  step.wait = wait.value_or(options.poll_interval);
  return step;
}

}  // namespace conduit::controller
