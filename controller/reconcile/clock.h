// Wall-clock time as the reconciler sees it: injectable, so tests drive deadlines, backoff and TTLs without
// sleeping. Timestamps are written and read with conduit/common/time.h.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "conduit/common/time.h"

namespace conduit::controller {

using TimePoint = std::chrono::system_clock::time_point;
using Clock = std::function<TimePoint()>;

inline Clock system_clock() {
  return [] { return std::chrono::system_clock::now(); };
}

}  // namespace conduit::controller
