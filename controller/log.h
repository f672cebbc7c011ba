// One-line logfmt logs on stderr (`ts=... level=info msg="..." job=default/x`). The controller does not reuse
// agent/'s logger: controller/ depends on the agent only over REST, never on its code.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conduit::controller::log {

enum class Level { Debug, Info, Warn, Error };

using Fields = std::vector<std::pair<std::string, std::string>>;

void set_level(Level min_level);
bool parse_level(std::string_view text, Level& out);
void write(Level level, std::string_view message, const Fields& fields = {});

inline void debug(std::string_view m, const Fields& f = {}) { write(Level::Debug, m, f); }
inline void info(std::string_view m, const Fields& f = {}) { write(Level::Info, m, f); }
inline void warn(std::string_view m, const Fields& f = {}) { write(Level::Warn, m, f); }
inline void error(std::string_view m, const Fields& f = {}) { write(Level::Error, m, f); }

}  // namespace conduit::controller::log
