// Wall-clock time as the reconciler sees it: injectable, so tests drive deadlines, backoff and TTLs without
// sleeping, and RFC 3339 text, the form Kubernetes stores timestamps in.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace conduit::controller {

using TimePoint = std::chrono::system_clock::time_point;
using Clock = std::function<TimePoint()>;

inline Clock system_clock() {
  return [] { return std::chrono::system_clock::now(); };
}

// "2026-11-30T11:02:03Z": whole seconds, as metav1.Time serializes; with `millis`, "...:03.250Z" for the
// controller's own timestamps (a backoff of 1 s must not round down to nothing).
std::string to_rfc3339(TimePoint t, bool millis = false);
// Accepts fractional seconds and a Z or +hh:mm offset; nullopt when the text is not a timestamp.
std::optional<TimePoint> parse_rfc3339(std::string_view text);

}  // namespace conduit::controller
