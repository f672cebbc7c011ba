#include "importer.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace conduit::agent {

nlohmann::json Importer::to_json() const {
  nlohmann::json j{{"pid", pid}, {"uid", uid}};
  if (!pod_uid.empty()) j["podUID"] = pod_uid;
  return j;
}

std::string pod_uid_from_cgroup(std::string_view cgroup) {
  // 8-4-4-4-12 hex digits, separated by '-' (cgroupfs) or '_' (systemd, which reserves '-').
  constexpr std::size_t kGroups[] = {8, 4, 4, 4, 12};
  for (std::size_t at = cgroup.find("pod"); at != std::string_view::npos; at = cgroup.find("pod", at + 1)) {
    std::string uid;
    std::size_t i = at + 3;
    bool ok = true;
    for (std::size_t g = 0; g < 5 && ok; ++g) {
      if (g > 0) {
        ok = i < cgroup.size() && (cgroup[i] == '-' || cgroup[i] == '_');
        if (!ok) break;
        uid += '-';
        ++i;
      }
      for (std::size_t k = 0; k < kGroups[g] && ok; ++k, ++i) {
        ok = i < cgroup.size() && std::isxdigit(static_cast<unsigned char>(cgroup[i])) != 0;
        if (ok) uid += static_cast<char>(std::tolower(static_cast<unsigned char>(cgroup[i])));
      }
    }
    // The UID ends there: what follows is a separator of the path, not more of a longer hex run.
    if (ok && (i == cgroup.size() || !std::isxdigit(static_cast<unsigned char>(cgroup[i])))) return uid;
  }
  return {};
}

std::optional<Importer> importer_of(int unix_socket) {
  ucred cred{};
  socklen_t size = sizeof cred;
  if (::getsockopt(unix_socket, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 || cred.pid <= 0) {
    return std::nullopt;
  }
  Importer out{.pid = cred.pid, .uid = cred.uid, .pod_uid = {}};
  std::ifstream in("/proc/" + std::to_string(cred.pid) + "/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  out.pod_uid = pod_uid_from_cgroup(text.str());
  return out;
}

}  // namespace conduit::agent
