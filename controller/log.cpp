#include "log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace conduit::controller::log {
namespace {

std::atomic<Level> g_min_level{Level::Info};
std::mutex g_mu;  // one line per write(), never interleaved between threads

const char* level_name(Level level) {
  switch (level) {
    case Level::Debug:
      return "debug";
    case Level::Info:
      return "info";
    case Level::Warn:
      return "warn";
    case Level::Error:
      return "error";
  }
  return "info";
}

void append_value(std::string& out, std::string_view value) {
  bool quote = value.empty();
  for (const char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) quote = true;
  }
  if (!quote) {
    out += value;
    return;
  }
  out += '"';
  for (const char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

void set_level(Level min_level) { g_min_level = min_level; }

bool parse_level(std::string_view text, Level& out) {
  if (text == "debug") {
    out = Level::Debug;
  } else if (text == "info") {
    out = Level::Info;
  } else if (text == "warn") {
    out = Level::Warn;
  } else if (text == "error") {
    out = Level::Error;
  } else {
    return false;
  }
  return true;
}

void write(Level level, std::string_view message, const Fields& fields) {
  if (level < g_min_level.load()) return;
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char ts[40];
  const std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(ts + n, sizeof ts - n, ".%03dZ", static_cast<int>(ms % 1000));

  std::string line = "ts=";
  line += ts;
  line += " level=";
  line += level_name(level);
  line += " msg=";
  append_value(line, message);
  for (const auto& [key, value] : fields) {
    line += ' ';
    line += key;
    line += '=';
    append_value(line, value);
  }
  line += '\n';
  std::lock_guard lock(g_mu);
  // One write(2) per line: a crash mid-run leaves whole lines behind.
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace conduit::controller::log
