// metav1.Condition bookkeeping on a status object held as JSON (TransferJob and FabricNode status): one
// setter, so lastTransitionTime means the same thing on every object the controller writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace conduit {

struct Condition {
  std::string type;    // Accepted, Running, Complete, Reachable, RDMAReady, ...
  std::string status;  // "True", "False" or "Unknown"
  std::string reason;  // CamelCase
  std::string message;
  std::int64_t observed_generation = 0;  // 0: not recorded
};

// Sets `condition` in status["conditions"] (created when absent). lastTransitionTime moves only when the
// status changes, as metav1.Condition requires; reason and message always follow. Messages are cut at the
// 32,768 bytes the API allows: an agent's error text is not ours to trust for length.
void set_condition(nlohmann::json& status, const Condition& condition,
                   std::chrono::system_clock::time_point now);

// The condition of that type in status["conditions"], or null.
const nlohmann::json* find_condition(const nlohmann::json& status, std::string_view type);

}  // namespace conduit
