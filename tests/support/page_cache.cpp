#include "page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace conduit::testing {

bool takes_direct_reads(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) return false;
  const std::unique_ptr<void, decltype(&std::free)> block(std::aligned_alloc(4096, 4096), &std::free);
  const bool ok = ::pread(fd, block.get(), 4096, 0) >= 0;
  ::close(fd);
  return ok;
}

double cached_share(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const auto bytes = static_cast<std::size_t>(std::filesystem::file_size(path));
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return -1;
  std::vector<unsigned char> pages((bytes + 4095) / 4096);
  const int rc = ::mincore(map, bytes, pages.data());
  ::munmap(map, bytes);
  if (rc != 0) return -1;
  const auto cached = std::count_if(pages.begin(), pages.end(), [](unsigned char c) { return (c & 1) != 0; });
  return static_cast<double>(cached) / static_cast<double>(pages.size());
}

void drop_from_page_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::string make_cold(const std::filesystem::path& path) {
  if (!takes_direct_reads(path)) return "the file system of " + path.string() + " takes no O_DIRECT reads";
  drop_from_page_cache(path);
  const double share = cached_share(path);
  if (share != 0)
    return "the file system of " + path.string() + " keeps " + std::to_string(share) +
           " of the file in memory";
  return "";
}

}  // namespace conduit::testing
