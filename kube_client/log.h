// Where controller/kube reports what it swallows (a dropped watch, a lost lease, an Event it could not
// write): a hook, so the controller routes it into its own structured log and tests can capture it. The
// default writes one line to stderr.
#pragma once

#include <functional>
#include <string_view>

namespace conduit::kube_client {

enum class LogLevel { Debug, Info, Warn, Error };

using LogSink = std::function<void(LogLevel, std::string_view message)>;

// Replaces the sink for the whole process; an empty sink silences the library.
void set_log_sink(LogSink sink);
void log(LogLevel level, std::string_view message);

}  // namespace conduit::kube_client
