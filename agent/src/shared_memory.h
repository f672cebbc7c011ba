// Host memory in a file descriptor (a memfd), which local processes may map too: the backing of a region made
// with "shareable": true, and of one imported over the import socket. The agent keeps the descriptor while
// the region lives, and hands a reopened copy of it to each process that opens the region (import_open.h).
#pragma once

#include <cstdint>
#include <string>

#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"
#include "conduit/memory_region.h"

namespace conduit::agent {

struct SharedMemory {
  MemoryRegion memory;  // mapped MAP_SHARED read/write; unmapped when released
  UniqueFd fd;          // the memfd behind it
};

// A new memfd of `bytes` named for region `name`, sealed against shrinking (a process that truncated it
// would SIGBUS every other one on its next access) and against further seals (no opener can seal writes
// away from the agent), mapped here with every page faulted in. Not from the memory pool: its blocks are
// anonymous memory, which no other process can map.
Result<SharedMemory> create_shared_memory(const std::string& name, std::uint64_t bytes);

// Maps the first `bytes` of `fd` (a memfd, or any mappable fd, that a local process sent) shared read/write:
// InvalidArgument saying why when it cannot be. Seals it against shrinking where the sender allowed seals;
// without MFD_ALLOW_SEALING that fails and the region still works, trusting the sender as any
// shared-memory peer must.
Result<SharedMemory> map_shared_memory(UniqueFd fd, std::uint64_t bytes);

// A new descriptor of the same memory for another process: read-only (opened anew through /proc/self/fd,
// so a shared writable mapping of it fails with EACCES) or, when `writable`, read/write.
Result<UniqueFd> reopen_shared(int fd, bool writable);

}  // namespace conduit::agent
