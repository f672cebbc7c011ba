#include "conduit/common/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "conduit/common/time.h"

namespace conduit::log {

namespace {

std::atomic<Level> g_min_level{Level::Info};
std::atomic<bool> g_json{false};
std::mutex g_write_mu;

std::string_view level_name(Level level) {
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

bool needs_quotes(std::string_view value) {
  if (value.empty()) return true;
  for (const char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

void append_quoted(std::string& out, std::string_view value) {
  out += '"';
  for (const char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  out += '"';
}

void append_value(std::string& out, std::string_view value) {
  if (needs_quotes(value)) {
    append_quoted(out, value);
  } else {
    out += value;
  }
}

}  // namespace

void configure(Level min_level, bool json) {
  g_min_level.store(min_level);
  g_json.store(json);
}

bool parse_level(std::string_view text, Level& out) {
  for (const Level level : {Level::Debug, Level::Info, Level::Warn, Level::Error}) {
    if (text == level_name(level)) {
      out = level;
      return true;
    }
  }
  return false;
}

std::string format_line(Level level, std::string_view message, const Fields& fields, bool json,
                        std::chrono::system_clock::time_point ts) {
  if (json) {
    nlohmann::ordered_json line;
    line["ts"] = format_rfc3339(ts, TimePrecision::Millis);
    line["level"] = level_name(level);
    line["msg"] = message;
    for (const auto& [key, value] : fields) line[key] = value;
    // Bytes from a peer or a file name may not be UTF-8; a log line must never throw.
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string out = "ts=" + format_rfc3339(ts, TimePrecision::Millis) + " level=";
  out += level_name(level);
  // msg is always quoted so a one-word message reads the same as a sentence.
  out += " msg=";
  append_quoted(out, message);
  for (const auto& [key, value] : fields) {
    out += ' ';
    out += key;
    out += '=';
    append_value(out, value);
  }
  return out;
}

void write(Level level, std::string_view message, const Fields& fields) {
  if (level < g_min_level.load(std::memory_order_relaxed)) return;
  std::string line = format_line(level, message, fields, g_json.load(std::memory_order_relaxed));
  line += '\n';
  // One write(2) per line under one lock, so lines from different threads never interleave.
  std::lock_guard lock(g_write_mu);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace conduit::log
