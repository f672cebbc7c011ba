// Structured one-line logs on stderr: logfmt (`ts=... level=info msg="..." transfer=t-3`) or JSON. Shared by
// the agent and the controller (and anything else that runs as a daemon), so both log alike.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conduit::log {

enum class Level { Debug, Info, Warn, Error };

using Fields = std::vector<std::pair<std::string, std::string>>;

void configure(Level min_level, bool json);
bool parse_level(std::string_view text, Level& out);

void write(Level level, std::string_view message, const Fields& fields = {});
// One line without the newline, as write() prints it; exposed so tests can check the format.
std::string format_line(Level level, std::string_view message, const Fields& fields, bool json,
                        std::chrono::system_clock::time_point ts = std::chrono::system_clock::now());

inline void debug(std::string_view m, const Fields& f = {}) { write(Level::Debug, m, f); }
inline void info(std::string_view m, const Fields& f = {}) { write(Level::Info, m, f); }
inline void warn(std::string_view m, const Fields& f = {}) { write(Level::Warn, m, f); }
inline void error(std::string_view m, const Fields& f = {}) { write(Level::Error, m, f); }

}  // namespace conduit::log
