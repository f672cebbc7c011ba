#include "importer.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "conduit/common/text.h"

namespace conduit::agent {

nlohmann::json Importer::to_json() const {
  nlohmann::json j{{"pid", pid}, {"uid", uid}};
  if (!pod_uid.empty()) j["podUID"] = pod_uid;
  if (!container_id.empty()) j["containerID"] = container_id;
  return j;
}

namespace {

// The pod UID in `cgroup` and where it ends there; npos when there is none.
std::pair<std::string, std::size_t> find_pod_uid(std::string_view cgroup) {
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
    if (ok && (i == cgroup.size() || !std::isxdigit(static_cast<unsigned char>(cgroup[i])))) return {uid, i};
  }
  return {"", std::string_view::npos};
}

}  // namespace

std::string pod_uid_from_cgroup(std::string_view cgroup) { return find_pod_uid(cgroup).first; }

std::string container_id_from_cgroup(std::string_view cgroup) {
  const auto [uid, end] = find_pod_uid(cgroup);
  if (uid.empty()) return {};
  // The path segment after the pod's own, on the same line.
  const std::size_t line_end = std::min(cgroup.find('\n', end), cgroup.size());
  const std::size_t slash = cgroup.find('/', end);
  if (slash == std::string_view::npos || slash >= line_end) return {};
  std::string_view segment = cgroup.substr(slash + 1, line_end - slash - 1);
  segment = segment.substr(0, segment.find('/'));
  for (std::string_view prefix : {"cri-containerd-", "crio-", "docker-"}) {
    if (segment.starts_with(prefix)) {
      segment.remove_prefix(prefix.size());
      break;
    }
  }
  if (segment.ends_with(".scope")) segment.remove_suffix(6);
  const bool hex = !segment.empty() && segment.size() <= 64 &&
                   std::all_of(segment.begin(), segment.end(),
                               [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
  if (!hex) return {};
  return to_lower(std::string(segment));
}

std::optional<Importer> importer_of(int unix_socket) {
  ucred cred{};
  socklen_t size = sizeof cred;
  if (::getsockopt(unix_socket, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 || cred.pid <= 0) {
    return std::nullopt;
  }
  Importer out{.pid = cred.pid, .uid = cred.uid, .pod_uid = {}, .container_id = {}};
  std::ifstream in("/proc/" + std::to_string(cred.pid) + "/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  out.pod_uid = pod_uid_from_cgroup(text.str());
  out.container_id = container_id_from_cgroup(text.str());
  return out;
}

}  // namespace conduit::agent
