#include "shm_names.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <span>
#include <system_error>

#include "conduit/common/random.h"
#include "conduit/remote_key.h"

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

// The pid in "<prefix><pid>_<random>", or 0 when `name` is not of that shape.
pid_t pid_of(std::string_view name, std::string_view ours) {
  if (!name.starts_with(ours)) return 0;
  const std::string_view rest = name.substr(ours.size());
  pid_t pid = 0;
  const auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (err != std::errc() || pid <= 0 || end == rest.data() + rest.size() || *end != '_') return 0;
  return pid;
}

// EPERM means it runs under another user: alive, not ours to judge.
bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::string shm_endpoint_name() {
  const std::uint64_t random = conduit::secure_random64();
  return prefix() + std::to_string(::getpid()) + "_" + to_hex(std::as_bytes(std::span(&random, 1)));
}

int remove_stale_shm_endpoints(const std::filesystem::path& dir) {
  const std::string ours = prefix();
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const pid_t pid = pid_of(entry.path().filename().string(), ours);
    if (pid == 0 || !gone(pid)) continue;
    std::error_code failed;
    if (std::filesystem::remove(entry.path(), failed)) ++removed;
  }
  return removed;
}

std::string_view shm_endpoint_name_of(std::string_view address) {
  if (const auto nul = address.find('\0'); nul != std::string_view::npos) address = address.substr(0, nul);
  if (address.starts_with("fi_shm://")) address.remove_prefix(9);
  return address;
}

bool shm_endpoint_process_gone(std::string_view name) {
  const pid_t pid = pid_of(shm_endpoint_name_of(name), prefix());
  return pid != 0 && gone(pid);
}

}  // namespace conduit::fabric
