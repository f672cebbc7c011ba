#include "conduit/common/condition.h"

#include "conduit/common/time.h"

namespace conduit {

using json = nlohmann::json;

namespace {
constexpr std::size_t kMaxMessageBytes = 32768;
}

const json* find_condition(const json& status, std::string_view type) {
  if (!status.is_object() || !status.contains("conditions") || !status["conditions"].is_array())
    return nullptr;
  for (const auto& c : status["conditions"]) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

void set_condition(json& status, const Condition& condition, std::chrono::system_clock::time_point now) {
  if (!status.contains("conditions") || !status["conditions"].is_array())
    status["conditions"] = json::array();
  const std::string message = condition.message.size() > kMaxMessageBytes
                                  ? condition.message.substr(0, kMaxMessageBytes)
                                  : condition.message;
  const std::string since = format_rfc3339(now);
  for (auto& c : status["conditions"]) {
    if (!c.is_object() || c.value("type", "") != condition.type) continue;
    if (c.value("status", "") != condition.status || !c.contains("lastTransitionTime")) {
      c["lastTransitionTime"] = since;
    }
    c["status"] = condition.status;
    c["reason"] = condition.reason;
    c["message"] = message;
    if (condition.observed_generation > 0) c["observedGeneration"] = condition.observed_generation;
    return;
  }
  json c{{"type", condition.type},
         {"status", condition.status},
         {"reason", condition.reason},
         {"message", message},
         {"lastTransitionTime", since}};
  if (condition.observed_generation > 0) c["observedGeneration"] = condition.observed_generation;
  status["conditions"].push_back(std::move(c));
}

}  // namespace conduit
