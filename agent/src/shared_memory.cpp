#include "shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace conduit::agent {

namespace {

Error sys_error(const std::string& what, int err) {
  return make_error(ErrorCode::Io, what + ": " + std::strerror(err));
}

SharedMemory own_mapping(void* p, std::uint64_t bytes, UniqueFd fd) {
  auto memory = MemoryRegion::borrow(MemoryKind::Host, p, bytes, -1, [p, bytes] { ::munmap(p, bytes); });
  return SharedMemory{std::move(memory), std::move(fd)};
}

}  // namespace

Result<SharedMemory> create_shared_memory(const std::string& name, std::uint64_t bytes) {
  // The name shows in /proc/<pid>/maps of every process that maps it.
  UniqueFd fd(::memfd_create(("conduit:" + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return sys_error("creating a memfd for region \"" + name + "\"", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (err == EFBIG || err == EINVAL)
      return make_error(ErrorCode::ResourceExhausted, "a memfd of " + std::to_string(bytes) +
                                                          " bytes cannot be made: " + std::strerror(err));
    return sys_error("sizing the memfd of region \"" + name + "\"", err);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return sys_error("sealing the memfd of region \"" + name + "\"", errno);
  // Faulted in now, as a loaded region's pages are: shmem pages cannot be populated behind the caller
  // the way anonymous ones are (MADV_POPULATE_WRITE on a shared mapping allocates the same pages anyway).
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err == ENOMEM)
      return make_error(ErrorCode::ResourceExhausted, "mapping " + std::to_string(bytes) +
                                                          " bytes of shared memory: " + std::strerror(err));
    return sys_error("mapping the memfd of region \"" + name + "\"", err);
  }
  return own_mapping(p, bytes, std::move(fd));
}

Result<SharedMemory> map_shared_memory(UniqueFd fd, std::uint64_t bytes) {
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err == EACCES || err == EPERM || err == ENODEV || err == EINVAL) {
      return make_error(
          ErrorCode::InvalidArgument,
          std::string("the imported fd cannot be mapped shared read/write: ") + std::strerror(err));
    }
    return sys_error("mapping the imported fd", err);
  }
  return own_mapping(p, bytes, std::move(fd));
}

Result<UniqueFd> reopen_shared(int fd, bool writable) {
  if (writable) {
    UniqueFd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!copy) return sys_error("duplicating a region's descriptor", errno);
    return copy;
  }
  // A dup would share the read/write open file description; a new open of the same memory with O_RDONLY
  // gives one that the kernel refuses to map shared and writable.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  UniqueFd copy(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!copy) return sys_error("reopening a region's descriptor read-only (" + path + ")", errno);
  return copy;
}

}  // namespace conduit::agent
