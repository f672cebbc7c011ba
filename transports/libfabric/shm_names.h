// Names for libfabric shm endpoints. The shm provider backs each endpoint with a file in /dev/shm named, by
// default, "<pid>:<endpoint>:<domain>", and only a clean close removes it. An agent that is SIGKILLed (OOM,
// a node drain, the fault suite) leaves its files behind: they hold tmpfs memory for good, and once the pid
// comes round again the next process of that pid fails fi_enable with EBUSY ("Device or resource busy") and
// cannot open shm at all. So Conduit names its endpoints itself, with a random part that no later process
// repeats, and removes the files of its own endpoints whose process is gone before it makes a new one.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace conduit::fabric {

// "conduit_<pid namespace inode>_<pid>_<16 hex random>": the namespace part keeps the sweep from judging
// processes of another pid namespace that shares /dev/shm (hostIPC pods) by pids it cannot see.
std::string shm_endpoint_name();

// Removes `dir`/conduit_<our pid namespace>_<pid>_* files whose pid no longer runs; returns how many. Never
// touches other names, other namespaces' files or live processes' files.
int remove_stale_shm_endpoints(const std::filesystem::path& dir = "/dev/shm");

// The endpoint name in a peer's shm address as fi_getname gives it, which may end with its NUL and may put
// shm's "fi_shm://" scheme before it.
std::string_view shm_endpoint_name_of(std::string_view address);

// Whether the process behind a peer's shm endpoint name (its address, as fi_getname gives it) has exited:
// true only for a Conduit name of this pid namespace whose pid no longer runs. Anything it cannot judge
// (another namespace, another shape, a live or foreign process) is false.
bool shm_endpoint_process_gone(std::string_view name);

}  // namespace conduit::fabric
