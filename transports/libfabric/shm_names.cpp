#include "shm_names.h"

#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <random>
#include <system_error>

namespace conduit::fabric {
namespace {

// The inode of /proc/self/ns/pid names this pid namespace; 0 where /proc cannot say (all files then share
// the "0" namespace, as every process of such a system would).
std::string pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return "0";
  return std::to_string(st.st_ino);
}

std::string prefix() { return "conduit_" + pid_namespace() + "_"; }

std::uint64_t random64() {
  std::uint64_t x = 0;
  if (::getrandom(&x, sizeof x, 0) != static_cast<ssize_t>(sizeof x)) {
    std::random_device rd;
    x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  return x;
}

}  // namespace

std::string shm_endpoint_name() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string random(16, '0');
  const std::uint64_t x = random64();
  for (std::size_t i = 0; i < random.size(); ++i) random[i] = kHex[(x >> (4 * i)) & 0xf];
  return prefix() + std::to_string(::getpid()) + "_" + random;
}

int remove_stale_shm_endpoints(const std::filesystem::path& dir) {
  const std::string ours = prefix();
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(ours)) continue;
    const std::string_view rest = std::string_view(name).substr(ours.size());
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (err != std::errc() || pid <= 0 || end == rest.data() + rest.size() || *end != '_') continue;
    // EPERM means it runs under another user: alive, not ours to judge.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code gone;
    if (std::filesystem::remove(entry.path(), gone)) ++removed;
  }
  return removed;
}

}  // namespace conduit::fabric
