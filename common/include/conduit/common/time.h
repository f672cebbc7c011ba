// RFC 3339 timestamps in UTC, the form Kubernetes stores times in and the agent API returns. One formatter
// and one parser for the agent, the controller and the logs.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace conduit {

enum class TimePrecision {
  Seconds,  // "2026-11-30T11:02:03Z": metav1.Time, region and grant times
  Millis,   // "2026-11-30T11:02:03.250Z": logs, transfer times, the controller's own backoff stamps
  Micros,   // "2026-11-30T11:02:03.250000Z": metav1.MicroTime (Lease renewals)
};

std::string format_rfc3339(std::chrono::system_clock::time_point t,
                           TimePrecision precision = TimePrecision::Seconds);

// Accepts fractional seconds and a Z or +hh:mm offset; nullopt when the text is not a timestamp.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text);

}  // namespace conduit
