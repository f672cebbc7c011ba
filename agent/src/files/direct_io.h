// O_DIRECT as the agent's file reads (source_reader.h) and saves (save_file.h) use it: the block both align
// to, and the open file reopened with the flag.
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <string>

#include "conduit/common/unique_fd.h"

namespace conduit::agent::direct_io {

// O_DIRECT wants the file offset, the length and the memory aligned to the device's logical block; 4 KiB is
// that or a multiple of it on every disk we meet, and slots, rings and regions are page-aligned.
inline constexpr std::uint64_t kBlock = 4096;

constexpr std::uint64_t round_down(std::uint64_t n) { return n / kBlock * kBlock; }
constexpr std::uint64_t round_up(std::uint64_t n) { return round_down(n + kBlock - 1); }

// Whether an O_DIRECT transfer may start at file `offset` with `memory`.
inline bool aligned(std::uint64_t offset, const void* memory) {
  return offset % kBlock == 0 && reinterpret_cast<std::uintptr_t>(memory) % kBlock == 0;
}

// The open file behind `fd` (not whatever its name holds now) opened again with O_DIRECT and `access`
// (O_RDONLY or O_WRONLY): O_DIRECT is a property of an open file, and setting it on `fd` would change it for
// every other user of that file description. Invalid where the file system refuses O_DIRECT.
inline UniqueFd reopen(int fd, int access) {
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  return UniqueFd(::open(self.c_str(), access | O_DIRECT | O_CLOEXEC));
}

}  // namespace conduit::agent::direct_io
