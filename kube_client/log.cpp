#include "log.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace conduit::kube_client {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink() {
  static LogSink s = [](LogLevel level, std::string_view message) {
    static constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
    if (level == LogLevel::Debug) return;
    std::fprintf(stderr, "level=%s component=kube msg=\"%.*s\"\n", kNames[static_cast<int>(level)],
                 static_cast<int>(message.size()), message.data());
  };
  return s;
}

}  // namespace

void set_log_sink(LogSink s) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(s);
}

void log(LogLevel level, std::string_view message) {
  // Copied out so a slow sink never runs under the lock (and may itself call set_log_sink).
  LogSink s;
  {
    std::lock_guard lock(sink_mutex());
    s = sink();
  }
  if (s) s(level, message);
}

}  // namespace conduit::kube_client
