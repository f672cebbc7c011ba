#include "conduit/common/time.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>

namespace conduit {

std::string format_rfc3339(std::chrono::system_clock::time_point t, TimePrecision precision) {
  // Floor, not truncate: a time before the epoch still names the second it falls in.
  const auto us = std::chrono::floor<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::int64_t seconds = us >= 0 ? us / 1000000 : (us - 999999) / 1000000;
  const std::int64_t fraction_us = us - seconds * 1000000;
  const std::time_t secs = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[48];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  switch (precision) {
    case TimePrecision::Seconds:
      std::snprintf(buf + n, sizeof buf - n, "Z");
      break;
    case TimePrecision::Millis:
      std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(fraction_us / 1000));
      break;
    case TimePrecision::Micros:
      std::snprintf(buf + n, sizeof buf - n, ".%06dZ", static_cast<int>(fraction_us));
      break;
  }
  return buf;
}

namespace {

bool take_int(std::string_view& text, std::size_t digits, int& out) {
  if (text.size() < digits) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, out);
  if (ec != std::errc() || end != text.data() + digits) return false;
  text.remove_prefix(digits);
  return true;
}

bool take_char(std::string_view& text, char c) {
  if (text.empty() || (text.front() != c && !(c == 'T' && text.front() == 't'))) return false;
  text.remove_prefix(1);
  return true;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text) {
  std::tm tm{};
  if (!take_int(text, 4, tm.tm_year) || !take_char(text, '-') || !take_int(text, 2, tm.tm_mon) ||
      !take_char(text, '-') || !take_int(text, 2, tm.tm_mday) || !take_char(text, 'T') ||
      !take_int(text, 2, tm.tm_hour) || !take_char(text, ':') || !take_int(text, 2, tm.tm_min) ||
      !take_char(text, ':') || !take_int(text, 2, tm.tm_sec)) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::chrono::nanoseconds fraction{0};
  if (!text.empty() && text.front() == '.') {
    text.remove_prefix(1);
    std::int64_t scale = 100000000;
    std::size_t n = 0;
    while (n < text.size() && text[n] >= '0' && text[n] <= '9') {
      fraction += std::chrono::nanoseconds((text[n] - '0') * scale);
      scale /= 10;
      ++n;
    }
    if (n == 0) return std::nullopt;
    text.remove_prefix(n);
  }
  int offset_seconds = 0;
  if (text == "Z" || text == "z") {
    text = {};
  } else if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    const int sign = text.front() == '+' ? 1 : -1;
    text.remove_prefix(1);
    int hours = 0;
    int minutes = 0;
    if (!take_int(text, 2, hours) || !take_char(text, ':') || !take_int(text, 2, minutes))
      return std::nullopt;
    offset_seconds = sign * (hours * 3600 + minutes * 60);
  } else {
    return std::nullopt;
  }
  if (!text.empty()) return std::nullopt;
  const std::time_t seconds = timegm(&tm);
  if (seconds == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(seconds - offset_seconds) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(fraction);
}

}  // namespace conduit
