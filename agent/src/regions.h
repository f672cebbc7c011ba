// Named memory on this node: allocated by the agent, loaded from a file under the data directory, or
// imported from a local process (a memfd). Names are DNS-1123 labels; bytes count against a memory cap;
// a region used by a transfer or a grant cannot be deleted.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "conduit/api/manifest.h"
#include "conduit/common/result.h"
#include "conduit/common/unique_fd.h"
#include "conduit/memory_region.h"
#include "conduit/transport.h"
#include "files/data_dir.h"
#include "files/save_file.h"
#include "importer.h"
#include "memory_pool.h"
#include "region_acks.h"
#include "tenancy.h"

namespace conduit::agent {

class Region {
 public:
  // `fd`: the memfd behind `memory` when a local process may map it too (shared_memory.h); none otherwise.
  Region(std::string name, MemoryRegion memory, std::string source, Tenancy tenancy = {},
         std::optional<Importer> importer = std::nullopt, UniqueFd fd = {});

  const std::string& name() const { return name_; }
  const MemoryRegion& memory() const { return memory_; }
  std::uint64_t bytes() const { return memory_.size(); }
  std::string memory_label() const;                      // "host", "cuda:0"
  const std::string& source() const { return source_; }  // "allocated", "file:<path>", "imported"
  const Tenancy& tenancy() const { return tenancy_; }    // fixed when made
  // The process that shared it over the import socket (importer.h); nullopt for any other region.
  const std::optional<Importer>& importer() const { return importer_; }
  // Backed by a memfd (made with "shareable": true, or imported): another local process may map it.
  bool shareable() const { return fd_.valid(); }
  // A descriptor of its memory for another process (read-only unless `writable`, shared_memory.h);
  // InvalidArgument when it is not shareable.
  Result<UniqueFd> open_shared(bool writable) const;

  // Users: transfers and grants that reference the region. Held through RegionUse.
  int users() const { return users_.load(); }
  void acquire() { users_.fetch_add(1); }
  void release() { users_.fetch_sub(1); }

  // The region's version: 0 when made, one more each time a writer committed every byte it wrote into it
  // (POST /v1/grants/{id}/commit): what a process waiting for new weights waits on.
  struct Update {
    std::uint64_t version = 0;
    std::string by;  // the grant's writer ("namespace/job" for a TransferJob), "" when it named none
    std::chrono::system_clock::time_point at{};
    nlohmann::json to_json(const std::string& region) const;  // {region, version, updatedBy, updatedAt}
  };
  // One more version, written by `by`; a `manifest` given (checked by the caller against bytes()) becomes
  // the region's in the same step, so whoever wakes on the version reads the manifest that came with it.
  Update bump(std::string by, std::shared_ptr<const api::Manifest> manifest = nullptr);
  // bump() only where it makes version `version` (the region is at version - 1): Conflict naming the version
  // it is at otherwise, and nothing changed. How an orchestrator moves a group of regions to one step.
  Result<Update> bump_to(std::uint64_t version, std::string by,
                         std::shared_ptr<const api::Manifest> manifest = nullptr);
  Update update() const;
  // Waits at most `wait` for a version past `after`, or until `stop()` says so (checked every 200 ms).
  Update wait_newer(std::uint64_t after, std::chrono::milliseconds wait,
                    const std::function<bool()>& stop) const;

  // The whole region registered with `transport` for local use, once: kept while the region lives, so the
  // scatter-gather transfers that reuse a region register nothing after the first. `created` says whether
  // this call registered it (to count and time it).
  Result<std::shared_ptr<const Registration>> shared_registration(Transport& transport, bool* created);

  // The named tensors it holds (conduit/api/manifest.h), or null: given when it was made or loaded from a
  // .safetensors file, or since by PUT /v1/regions/{name}/manifest. Replaced whole: a reader keeps the one
  // it got.
  std::shared_ptr<const api::Manifest> manifest() const;
  // Checked against the region's bytes first: InvalidArgument naming the tensor, and nothing changed.
  Status set_manifest(api::Manifest manifest);

  // {name, bytes, memory, source, users, hugePages, createdAt, version, updatedBy, updatedAt, tensors,
  // shareable}
  nlohmann::json to_json() const;

  // Which version each reader applied (region_acks.h); goes with the region.
  RegionAcks& acks() const { return acks_; }

 private:
  std::string name_;
  MemoryRegion memory_;
  std::string source_;
  Tenancy tenancy_;
  std::optional<Importer> importer_;
  UniqueFd fd_;  // the memfd behind memory_ when shareable; none otherwise
  std::atomic<int> users_{0};
  std::chrono::system_clock::time_point created_;
  mutable std::mutex update_mu_;
  mutable std::condition_variable updated_;
  Update update_;
  std::shared_ptr<const api::Manifest> manifest_;  // under update_mu_
  mutable RegionAcks acks_;
  // After memory_: deregistered before the memory goes.
  std::mutex registrations_mu_;
  std::map<const Transport*, std::shared_ptr<const Registration>> registrations_;
};

using RegionPtr = std::shared_ptr<Region>;

// Marks a region in use for its lifetime (a transfer, a grant): DELETE answers 409 meanwhile. end() stops
// the marking before the lifetime does: a revoked grant is no use of its region even while a request that
// looked it up a moment before (a listing, a checksum) still holds it, and so still reads the memory.
class RegionUse {
 public:
  RegionUse() = default;
  explicit RegionUse(RegionPtr region) : region_(std::move(region)), counted_(region_ != nullptr) {
    if (region_) region_->acquire();
  }
  RegionUse(RegionUse&& o) noexcept : region_(std::move(o.region_)), counted_(o.counted_.exchange(false)) {}
  RegionUse& operator=(RegionUse&& o) noexcept {
    if (this != &o) {
      reset();
      region_ = std::move(o.region_);
      counted_ = o.counted_.exchange(false);
    }
    return *this;
  }
  ~RegionUse() { reset(); }
  void end() {
    if (counted_.exchange(false)) region_->release();
  }
  void reset() {
    end();
    region_.reset();
  }
  const RegionPtr& get() const { return region_; }
  Region* operator->() const { return region_.get(); }

 private:
  RegionPtr region_;
  std::atomic<bool> counted_{false};
};

// A file opened for reading under the data directory, with what it looked like when opened.
struct SourceFile {
  UniqueFd fd;
  struct stat stat {};
  Beneath where;     // its name, to look it up again where it was opened
  std::string name;  // as the caller gave it
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(stat.st_size); }
  // Conflict, saying which, when the file changed size or modification time, or its name no longer leads to
  // it (removed, replaced), since it was opened.
  Status unchanged() const;
};

class RegionStore {
 public:
  // `pool_bytes`: the most memory of deleted host regions kept, zeroed, for new ones (memory_pool.h); 0 keeps
  // none. Kept memory yields to regions under the cap.
  // `save_direct`: saved files are written around the page cache where the file system allows it
  // (SaveFile::create).
  RegionStore(std::filesystem::path data_dir, std::uint64_t memory_cap, std::uint64_t pool_bytes = 0,
              bool save_direct = true);

  // memory: "host" or "cuda:N" (Unsupported, saying why, where CUDA or device N is absent: the API answers
  // 422).
  Result<RegionPtr> create(const std::string& name, std::uint64_t bytes, const std::string& memory,
                           Tenancy tenancy = {});
  // Host memory in a memfd the agent makes (shared_memory.h), which local processes may then open over the
  // import socket. Counted against the memory cap like any region; never from the pool.
  Result<RegionPtr> create_shareable(const std::string& name, std::uint64_t bytes, Tenancy tenancy = {});
  // Loads `file` (relative to the data directory, never escaping it) into a new host region. `ns`: the
  // namespace whose directory the file must resolve in, "" for any in the data directory (DataDir). A file
  // named *.safetensors is read as one: the region holds its data section, and its header is the region's
  // manifest (a malformed header is InvalidArgument saying what is wrong, and no region is made).
  Result<RegionPtr> load(const std::string& name, const std::string& file, Tenancy tenancy = {},
                         const std::string& ns = "");
  // Maps a memfd (or any mappable fd) shared by a local process; takes ownership of fd. bytes 0 = its size.
  // `manifest` (JSON, as PUT /v1/regions/{name}/manifest takes it) is checked against those bytes first: a
  // bad one is InvalidArgument ("manifest.<what>") and nothing is imported.
  Result<RegionPtr> import_fd(const std::string& name, int fd, std::uint64_t bytes,
                              std::optional<Importer> importer = std::nullopt,
                              const nlohmann::json* manifest = nullptr);
  // Opens a CUDA IPC handle (64 bytes) of a local process's allocation on `device`; the exporter keeps it
  // allocated while the region lives.
  Result<RegionPtr> import_cuda_ipc(const std::string& name, std::span<const std::byte> handle,
                                    std::uint64_t bytes, int device,
                                    std::optional<Importer> importer = std::nullopt);

  // `file` (relative to the data directory) opened for reading beneath it, or beneath namespace `ns`'s
  // directory: NotFound, InvalidArgument (not a regular file, empty, outside the directory), Forbidden
  // (outside the namespace's directory: a 403).
  Result<SourceFile> open_file(const std::string& file, const std::string& ns = "") const;
  // Host memory of no name for the agent's own use (a grant's landing ring), counted against the memory cap
  // while it lives: ResourceExhausted past it. `what` names it in errors and in its source().
  Result<RegionPtr> scratch(std::uint64_t bytes, const std::string& what);

  Result<RegionPtr> get(const std::string& name) const;
  // Region `name` once it exists (made, loaded or imported): at once when it does, else when it is added,
  // NotFound after `wait` or when `stop()` says so (checked every 200 ms).
  Result<RegionPtr> wait_for(const std::string& name, std::chrono::milliseconds wait,
                             const std::function<bool()>& stop) const;
  std::vector<RegionPtr> list() const;
  Status remove(const std::string& name);  // Conflict while in use, NotFound
  // Writes the region to `file` under the data directory (beneath namespace `ns`'s directory when set):
  // temp file, fsync, rename, fsync of the directory. Returns how the bytes were written (around the page
  // cache or through it). To a file named *.safetensors, a region with a manifest is written as one: the
  // header, then its tensors' bytes (Conflict when it has no manifest, or gaps between its tensors).
  Result<WrittenBytes> save(const std::string& name, const std::string& file, const std::string& ns = "");
  // A save of `file` begun: its directory opened beneath the data directory (or namespace `ns`'s), made
  // where missing, and the temporary file created in it.
  Result<SaveFile> open_save(const std::string& file, const std::string& ns = "") const;

  std::uint64_t used_bytes() const;
  std::uint64_t cap() const { return cap_; }
  const MemoryPool& pool() const { return pool_; }
  const std::filesystem::path& data_dir() const { return files_.path(); }
  bool save_direct() const { return save_direct_; }

  // Where `relative` resolves under the data directory now; InvalidArgument when absolute or escaping it
  // (.., links). For messages and tests: files are opened through DataDir, which no race can lead out.
  Result<std::filesystem::path> data_path(const std::string& relative) const;

 private:
  Result<RegionPtr> insert(const std::string& name, MemoryRegion memory, std::string source,
                           Tenancy tenancy = {}, std::optional<Importer> importer = std::nullopt,
                           UniqueFd fd = {});
  Status reserve(const std::string& name, std::uint64_t bytes) const;  // name free and under the cap
  // Host memory for a new region: a kept block of its size when the pool has one (zeroed, faulted in),
  // else fresh, kept memory unmapped first where the fresh would not fit beside it under the cap.
  Result<MemoryRegion> host_memory(std::uint64_t bytes, Populate populate);

  DataDir files_;
  std::uint64_t cap_;
  bool save_direct_;
  MemoryPool pool_;  // before the regions: they give their memory back to it as they go
  // Shared with the scratch regions, which may outlive the store.
  std::shared_ptr<std::mutex> mu_ptr_ = std::make_shared<std::mutex>();
  std::mutex& mu_ = *mu_ptr_;
  std::map<std::string, RegionPtr> regions_;
  mutable std::condition_variable added_;  // with mu_: a region was added (wait_for)
  std::shared_ptr<std::uint64_t> scratch_ = std::make_shared<std::uint64_t>(0);  // bytes, under mu_
};

// CRC32C per `slice` bytes of [offset, offset + length) of the region; InvalidArgument when out of range.
Result<std::vector<std::uint32_t>> region_checksum(const Region& region, std::uint64_t offset,
                                                   std::uint64_t length, std::uint64_t slice);

}  // namespace conduit::agent
