#include "regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>
#include <system_error>
#include <utility>

#include "conduit/api/names.h"
#include "conduit/common/random.h"
#include "conduit/common/time.h"
#include "conduit/common/unique_fd.h"
#include "conduit/crc32c.h"
#include "conduit/cuda_device.h"
#include "conduit/cuda_staging.h"
#include "files/direct_io.h"
#include "files/save_file.h"
#include "files/source_reader.h"
#include "shared_memory.h"

namespace conduit::agent {

namespace fs = std::filesystem;

namespace {

// read(2)/write(2) move at most ~2 GiB per call; 1 GiB pieces keep each call large without hitting that.
constexpr std::size_t kIoPiece = std::size_t{1} << 30;
constexpr std::uint64_t kMaxChecksumSlices = 65536;

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::uint64_t sum_bytes(const std::map<std::string, RegionPtr>& regions, std::uint64_t scratch) {
  std::uint64_t used = scratch;
  for (const auto& [name, region] : regions) used += region->bytes();
  return used;
}

// The one place that decides whether `bytes` more fit: reserve() asks it before allocating so a request over
// the cap fails without touching memory, insert() asks again under the same lock that adds the region.
Status check_room(const std::map<std::string, RegionPtr>& regions, std::uint64_t scratch,
                  const std::string& name, std::uint64_t bytes, std::uint64_t cap) {
  if (!name.empty() && regions.contains(name))
    return make_error(ErrorCode::AlreadyExists, "region " + quoted(name) + " already exists");
  const std::uint64_t used = sum_bytes(regions, scratch);
  if (bytes > cap || used > cap - bytes) {
    return make_error(ErrorCode::ResourceExhausted,
                      "region of " + std::to_string(bytes) + " bytes would exceed the memory cap: " +
                          std::to_string(used) + " of " + std::to_string(cap) + " bytes in use");
  }
  return {};
}

bool is_cuda_label(const std::string& memory) {
  constexpr std::string_view kPrefix = "cuda:";
  if (!memory.starts_with(kPrefix) || memory.size() == kPrefix.size()) return false;
  return std::all_of(memory.begin() + kPrefix.size(), memory.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Why `cuda:<device>` cannot be had here, as the 422 a client reads: a build without CUDA, no driver, no
// such device.
Status cuda_device(int device) {
  if (!cuda::availability().built) {
    return make_error(ErrorCode::Unsupported, "this agent was built without CUDA: cuda:" +
                                                  std::to_string(device) + " regions are not available");
  }
  return cuda::check_device(device);
}

bool is_safetensors(const std::string& file) { return file.ends_with(".safetensors"); }

struct SafetensorsHeader {
  api::Manifest manifest;
  std::uint64_t data_start = 0;  // 8 + the header's size
};

// The header of the .safetensors file `fd` of `file_bytes`: its size prefix bounded by the format and the
// file, then the JSON read with the manifest's checks over the data section that follows.
Result<SafetensorsHeader> read_safetensors_header(int fd, std::uint64_t file_bytes, const std::string& file) {
  const auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::InvalidArgument, "file " + quoted(file) + ": " + why);
  };
  unsigned char prefix[8] = {};
  if (file_bytes < sizeof prefix) return bad("too short for a .safetensors file (no 8-byte header size)");
  if (::pread(fd, prefix, sizeof prefix, 0) != static_cast<ssize_t>(sizeof prefix))
    return io_error("reading the header size of " + quoted(file), errno);
  auto n = api::safetensors_header_size(prefix, file_bytes);
  if (!n) return bad(n.error().message);
  std::string header(*n, '\0');
  for (std::uint64_t done = 0; done < *n;) {
    const ssize_t got =
        ::pread(fd, header.data() + done, *n - done, static_cast<off_t>(sizeof prefix + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return io_error("reading the header of " + quoted(file), got < 0 ? errno : EIO);
    done += static_cast<std::uint64_t>(got);
  }
  const std::uint64_t start = sizeof prefix + *n;
  auto manifest = api::Manifest::from_safetensors_header(header, file_bytes - start);
  if (!manifest) return bad(manifest.error().message);
  return SafetensorsHeader{std::move(*manifest), start};
}

// The file from `start` into the first `length` bytes of `out`, around the page cache where it does not hold
// the file (SourceReader): loading a checkpoint nobody read lately then costs no copy, and does not push the
// rest of the node out of the cache. `out` past `length` is room a last whole block may fill.
Status read_all(int fd, std::span<std::byte> out, std::uint64_t length, const std::string& file,
                std::uint64_t start) {
  SourceReader reader(fd, /*direct=*/true);
  for (std::size_t done = 0; done < length;) {
    const std::size_t n = std::min<std::uint64_t>(kIoPiece, length - done);
    if (auto read = reader.read(out.data() + done, out.size() - done, start + done, n); !read) {
      if (read.error().code == ErrorCode::Conflict)
        return make_error(ErrorCode::Io, "file " + quoted(file) + " shrank while it was being loaded");
      return make_error(read.error().code, "loading " + quoted(file) + ": " + read.error().message);
    }
    done += n;
  }
  return {};
}

// The first `length` bytes of device `memory`.
Status write_device(SaveFile& out, const MemoryRegion& memory, std::uint64_t length) {
  const std::uint64_t piece = std::max<std::uint64_t>(1, std::min<std::uint64_t>(length, kIoPiece / 16));
  auto pinned = cuda::allocate_pinned(piece);
  if (!pinned) return pinned.error();
  for (std::uint64_t at = 0; at < length; at += piece) {
    const auto n = std::min(piece, length - at);
    const auto buffer = pinned->bytes().first(n);
    if (auto copied = cuda::copy_to_host(memory, at, buffer); !copied) return copied.error();
    if (auto written = out.append(buffer); !written) return written.error();
  }
  return {};
}

}  // namespace

Region::Region(std::string name, MemoryRegion memory, std::string source, Tenancy tenancy,
               std::optional<Importer> importer, UniqueFd fd)
    : name_(std::move(name)),
      memory_(std::move(memory)),
      source_(std::move(source)),
      tenancy_(std::move(tenancy)),
      importer_(std::move(importer)),
      fd_(std::move(fd)),
      created_(std::chrono::system_clock::now()) {}

Result<UniqueFd> Region::open_shared(bool writable) const {
  if (!shareable()) {
    return make_error(ErrorCode::InvalidArgument, "region " + quoted(name_) +
                                                      " is not shareable: made without shareable:true (" +
                                                      memory_label() + " memory, " + source_ + ")");
  }
  return reopen_shared(fd_.get(), writable);
}

std::string Region::memory_label() const {
  if (memory_.kind() == MemoryKind::Cuda) return "cuda:" + std::to_string(memory_.device());
  return "host";
}

nlohmann::json Region::Update::to_json(const std::string& region) const {
  nlohmann::json j{{"region", region}, {"version", version}, {"updatedBy", by}};
  if (version > 0) j["updatedAt"] = format_rfc3339(at, TimePrecision::Millis);
  return j;
}

Region::Update Region::bump(std::string by, std::shared_ptr<const api::Manifest> manifest) {
  Update now;
  {
    std::lock_guard lock(update_mu_);
    if (manifest) manifest_ = std::move(manifest);
    update_.version += 1;
    update_.by = std::move(by);
    update_.at = std::chrono::system_clock::now();
    now = update_;
  }
  updated_.notify_all();
  return now;
}

Result<Region::Update> Region::bump_to(std::uint64_t version, std::string by,
                                       std::shared_ptr<const api::Manifest> manifest) {
  Update now;
  {
    std::lock_guard lock(update_mu_);
    if (version == 0 || update_.version != version - 1) {
      return make_error(ErrorCode::Conflict, "region \"" + name_ + "\" is at version " +
                                                 std::to_string(update_.version) + ": a commit to version " +
                                                 std::to_string(version) + " needs it at version " +
                                                 std::to_string(version == 0 ? 0 : version - 1));
    }
    if (manifest) manifest_ = std::move(manifest);
    update_.version = version;
    update_.by = std::move(by);
    update_.at = std::chrono::system_clock::now();
    now = update_;
  }
  updated_.notify_all();
  return now;
}

Region::Update Region::update() const {
  std::lock_guard lock(update_mu_);
  return update_;
}

Region::Update Region::wait_newer(std::uint64_t after, std::chrono::milliseconds wait,
                                  const std::function<bool()>& stop) const {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(update_mu_);
  while (update_.version <= after && !stop()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    updated_.wait_for(
        lock, std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(200)));
  }
  return update_;
}

Result<std::shared_ptr<const Registration>> Region::shared_registration(Transport& transport, bool* created) {
  std::lock_guard lock(registrations_mu_);
  if (created != nullptr) *created = false;
  if (auto it = registrations_.find(&transport); it != registrations_.end()) return it->second;
  auto reg = transport.register_memory(memory_, Access::Local);
  if (!reg) return make_error(reg.error().code, "registering region " + name_ + ": " + reg.error().message);
  auto shared = std::make_shared<const Registration>(std::move(*reg));
  registrations_.emplace(&transport, shared);
  if (created != nullptr) *created = true;
  return shared;
}

std::shared_ptr<const api::Manifest> Region::manifest() const {
  std::lock_guard lock(update_mu_);
  return manifest_;
}

Status Region::set_manifest(api::Manifest manifest) {
  if (auto ok = manifest.check(bytes()); !ok) return ok;
  auto shared = std::make_shared<const api::Manifest>(std::move(manifest));
  std::lock_guard lock(update_mu_);
  manifest_ = std::move(shared);
  return {};
}

nlohmann::json Region::to_json() const {
  nlohmann::json j{{"name", name_},
                   {"bytes", bytes()},
                   {"memory", memory_label()},
                   {"source", source_},
                   {"users", users()},
                   {"hugePages", memory_.huge_pages()},
                   {"createdAt", format_rfc3339(created_)}};
  const nlohmann::json u = update().to_json(name_);
  for (const char* key : {"version", "updatedBy", "updatedAt"}) {
    if (u.contains(key)) j[key] = u[key];
  }
  tenancy_.add_to(j);
  if (importer_) j["importedBy"] = importer_->to_json();
  if (const auto m = manifest()) j["tensors"] = m->tensors.size();
  if (shareable()) j["shareable"] = true;
  return j;
}

// A block unused this long is unmapped: an agent that stopped making regions gives its memory back.
constexpr std::chrono::seconds kPoolKeep{60};

RegionStore::RegionStore(fs::path data_dir, std::uint64_t memory_cap, std::uint64_t pool_bytes,
                         bool save_direct)
    : files_(std::move(data_dir)),  // a data directory that cannot be made only matters to load and save
      cap_(memory_cap),
      save_direct_(save_direct),
      pool_(std::min(pool_bytes, memory_cap), kPoolKeep) {}

Result<fs::path> RegionStore::data_path(const std::string& relative) const {
  auto normal = DataDir::normal(relative);
  if (!normal) return normal.error();
  // Lexical checks miss a link inside the data directory that points out of it; resolving the part that
  // exists does not.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(data_dir(), ec);
  if (ec) return io_error("resolving the data directory " + quoted(data_dir().string()), ec.value());
  const fs::path full = fs::weakly_canonical(base / *normal, ec);
  if (ec) return io_error("resolving " + quoted(relative), ec.value());
  const fs::path inside = full.lexically_relative(base);
  if (inside.empty() || inside == "." || *inside.begin() == "..") {
    return make_error(ErrorCode::InvalidArgument,
                      "path " + quoted(relative) + " is outside the data directory");
  }
  return full;
}

Status RegionStore::reserve(const std::string& name, std::uint64_t bytes) const {
  std::lock_guard lock(mu_);
  return check_room(regions_, *scratch_, name, bytes, cap_);
}

Result<MemoryRegion> RegionStore::host_memory(std::uint64_t bytes, Populate populate) {
  if (auto kept = pool_.take(bytes)) return std::move(*kept);
  // reserve() found room for `bytes` beside the regions; kept memory gives up what the fresh needs.
  const std::uint64_t used = used_bytes();
  pool_.shrink_to(used + bytes >= cap_ ? 0 : cap_ - used - bytes);
  auto fresh = MemoryRegion::allocate_host(bytes, populate);
  if (!fresh) return fresh.error();
  return pool_.keep(std::move(*fresh));
}

Result<RegionPtr> RegionStore::insert(const std::string& name, MemoryRegion memory, std::string source,
                                      Tenancy tenancy, std::optional<Importer> importer, UniqueFd fd) {
  std::lock_guard lock(mu_);
  if (auto room = check_room(regions_, *scratch_, name, memory.size(), cap_); !room) return room.error();
  auto region = std::make_shared<Region>(name, std::move(memory), std::move(source), std::move(tenancy),
                                         std::move(importer), std::move(fd));
  regions_.emplace(name, region);
  added_.notify_all();
  return region;
}

Result<RegionPtr> RegionStore::create(const std::string& name, std::uint64_t bytes, const std::string& memory,
                                      Tenancy tenancy) {
  if (auto valid = api::validate_name(name); !valid) return valid.error();
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "region size must be at least 1 byte");
  int device = -1;
  if (is_cuda_label(memory)) {
    const std::string digits = memory.substr(5);
    device = digits.size() > 3 ? 1000 : std::stoi(digits);
    if (auto usable = cuda_device(device); !usable) return usable.error();
  } else if (memory != "host") {
    return make_error(ErrorCode::InvalidArgument,
                      "memory " + quoted(memory) + " is not \"host\" or \"cuda:<device ordinal>\"");
  }
  if (auto room = reserve(name, bytes); !room) return room.error();
  // Host pages fault in behind the caller's back: a job's first bytes need not wait for a gigabyte of faults.
  auto allocated = device >= 0 ? cuda::allocate(device, bytes) : host_memory(bytes, Populate::Background);
  if (!allocated) return allocated.error();
  return insert(name, std::move(allocated).value(), "allocated", std::move(tenancy));
}

Result<RegionPtr> RegionStore::create_shareable(const std::string& name, std::uint64_t bytes,
                                                Tenancy tenancy) {
  if (auto valid = api::validate_name(name); !valid) return valid.error();
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "region size must be at least 1 byte");
  if (auto room = reserve(name, bytes); !room) return room.error();
  auto shared = create_shared_memory(name, bytes);
  if (!shared) return shared.error();
  return insert(name, std::move(shared->memory), "allocated", std::move(tenancy), std::nullopt,
                std::move(shared->fd));
}

Result<SourceFile> RegionStore::open_file(const std::string& file, const std::string& ns) const {
  auto where = files_.beneath(file, ns);
  if (!where) return where.error();
  auto fd = where->open(O_RDONLY);
  if (!fd) {
    if (fd.error().code == ErrorCode::NotFound)
      return make_error(ErrorCode::NotFound, "file " + quoted(file) + " not found in the data directory");
    return fd.error();
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return io_error("stat of " + quoted(file), errno);
  if (!S_ISREG(st.st_mode))
    return make_error(ErrorCode::InvalidArgument, "path " + quoted(file) + " is not a regular file");
  if (st.st_size == 0) return make_error(ErrorCode::InvalidArgument, "file " + quoted(file) + " is empty");
  return SourceFile{std::move(*fd), st, std::move(*where), file};
}

Status SourceFile::unchanged() const {
  struct stat now {};
  if (::fstat(fd.get(), &now) != 0) return io_error("stat of " + quoted(name), errno);
  if (now.st_size != stat.st_size) {
    return make_error(ErrorCode::Conflict, "file " + quoted(name) + " changed size while it was read (" +
                                               std::to_string(stat.st_size) + " -> " +
                                               std::to_string(now.st_size) + " bytes)");
  }
  if (now.st_mtim.tv_sec != stat.st_mtim.tv_sec || now.st_mtim.tv_nsec != stat.st_mtim.tv_nsec) {
    return make_error(ErrorCode::Conflict, "file " + quoted(name) + " was modified while it was read");
  }
  struct stat named {};
  auto again = where.open(O_PATH);
  if (!again || ::fstat(again->get(), &named) != 0 || named.st_ino != stat.st_ino ||
      named.st_dev != stat.st_dev) {
    return make_error(ErrorCode::Conflict,
                      "file " + quoted(name) + " was removed or replaced while it was read");
  }
  return {};
}

Result<RegionPtr> RegionStore::load(const std::string& name, const std::string& file, Tenancy tenancy,
                                    const std::string& ns) {
  if (auto valid = api::validate_name(name); !valid) return valid.error();
  auto opened = open_file(file, ns);
  if (!opened) return opened.error();
  const UniqueFd& fd = opened->fd;
  std::uint64_t start = 0;  // where the region's bytes begin in the file
  std::uint64_t bytes = opened->bytes();
  std::optional<api::Manifest> manifest;
  if (is_safetensors(file)) {
    auto header = read_safetensors_header(fd.get(), bytes, file);
    if (!header) return header.error();
    start = header->data_start;
    bytes -= start;
    manifest = std::move(header->manifest);
    if (bytes == 0)
      return make_error(ErrorCode::InvalidArgument,
                        "file " + quoted(file) + " holds no tensor bytes to load");
  }

  if (auto room = reserve(name, bytes); !room) return room.error();
  // A copy, not a mapping: the file may be rewritten (or saved over) while the region lives.
  // The region starts `lead` bytes into its memory, as far past a block boundary as its bytes start in the
  // file (a .safetensors data section starts 8 + its header's size in): then file and memory are aligned
  // alike, every block is read straight into place (O_DIRECT) and nothing is copied through a bounce
  // buffer, which cost a cold load of 1 GiB half as long again. The lead holds the header's last bytes.
  const std::uint64_t lead = start % direct_io::kBlock;
  auto allocated = host_memory(direct_io::round_up(lead + bytes), Populate::Now);
  if (!allocated) return allocated.error();
  if (auto read = read_all(fd.get(), allocated->bytes(), lead + bytes, file, start - lead); !read)
    return read.error();
  MemoryRegion memory = std::move(allocated).value();
  if (lead > 0 || memory.size() != bytes) {
    auto whole = std::make_shared<MemoryRegion>(std::move(memory));
    memory = MemoryRegion::borrow(
        MemoryKind::Host, static_cast<std::byte*>(whole->data()) + lead, bytes,
        /*device=*/-1, [whole]() mutable { whole.reset(); }, whole->huge_pages());
  }
  auto region = insert(name, std::move(memory), "file:" + fs::path(file).lexically_normal().generic_string(),
                       std::move(tenancy));
  if (region && manifest) {
    if (auto set = (*region)->set_manifest(std::move(*manifest)); !set) {
      (void)remove(name);
      return set.error();
    }
  }
  return region;
}

Result<RegionPtr> RegionStore::import_fd(const std::string& name, int raw_fd, std::uint64_t bytes,
                                         std::optional<Importer> importer, const nlohmann::json* manifest) {
  UniqueFd fd(raw_fd);
  if (auto valid = api::validate_name(name); !valid) return valid.error();
  if (fd.get() < 0) return make_error(ErrorCode::InvalidArgument, "no file descriptor to import");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("stat of the imported fd", errno);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (bytes == 0) bytes = size;
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, "the imported fd is empty (size 0)");
  if (bytes > size) {
    return make_error(ErrorCode::InvalidArgument, "asked to import " + std::to_string(bytes) +
                                                      " bytes but the fd holds only " + std::to_string(size));
  }
  std::optional<api::Manifest> tensors;
  if (manifest != nullptr) {
    auto read = api::Manifest::from_json(*manifest, bytes);
    if (!read) return make_error(ErrorCode::InvalidArgument, "manifest." + read.error().message);
    tensors = std::move(*read);
  }
  if (auto room = reserve(name, bytes); !room) return room.error();
  auto shared = map_shared_memory(std::move(fd), bytes);
  if (!shared) return shared.error();
  auto region =
      insert(name, std::move(shared->memory), "imported", {}, std::move(importer), std::move(shared->fd));
  // Checked against these bytes above, so it cannot be refused now.
  if (region && tensors) (void)(*region)->set_manifest(std::move(*tensors));
  return region;
}

Result<RegionPtr> RegionStore::import_cuda_ipc(const std::string& name, std::span<const std::byte> handle,
                                               std::uint64_t bytes, int device,
                                               std::optional<Importer> importer) {
  if (auto valid = api::validate_name(name); !valid) return valid.error();
  if (bytes == 0)
    return make_error(ErrorCode::InvalidArgument, "\"bytes\" must be positive for a CUDA import");
  if (auto usable = cuda_device(device); !usable) return usable.error();
  if (auto room = reserve(name, bytes); !room) return room.error();
  auto memory = cuda::import_ipc(handle, bytes, device);
  if (!memory) return memory.error();
  return insert(name, std::move(*memory), "imported", {}, std::move(importer));
}

Result<RegionPtr> RegionStore::scratch(std::uint64_t bytes, const std::string& what) {
  if (bytes == 0) return make_error(ErrorCode::InvalidArgument, what + ": at least 1 byte is needed");
  // As for named regions: over the cap fails before any memory is touched, and is checked again below.
  if (auto room = reserve("", bytes); !room) {
    return make_error(ErrorCode::ResourceExhausted, what + ": " + room.error().message);
  }
  auto allocated = host_memory(bytes, Populate::Now);
  if (!allocated) return allocated.error();
  std::lock_guard lock(mu_);
  if (auto room = check_room(regions_, *scratch_, "", bytes, cap_); !room) {
    return make_error(ErrorCode::ResourceExhausted, what + ": " + room.error().message);
  }
  *scratch_ += bytes;
  // The count lives as long as the last holder of either, so the memory leaving after the store is safe.
  auto owned = std::make_shared<MemoryRegion>(std::move(*allocated));
  auto memory = MemoryRegion::borrow(MemoryKind::Host, owned->data(), bytes, -1,
                                     [owned, count = scratch_, mu = mu_ptr_, bytes]() mutable {
                                       {
                                         std::lock_guard held(*mu);
                                         *count -= bytes;
                                       }
                                       owned.reset();
                                     });
  return std::make_shared<Region>("", std::move(memory), what);
}

Result<RegionPtr> RegionStore::get(const std::string& name) const {
  std::lock_guard lock(mu_);
  const auto it = regions_.find(name);
  if (it == regions_.end()) return make_error(ErrorCode::NotFound, "region " + quoted(name) + " not found");
  return it->second;
}

Result<RegionPtr> RegionStore::wait_for(const std::string& name, std::chrono::milliseconds wait,
                                        const std::function<bool()>& stop) const {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mu_);
  while (true) {
    if (const auto it = regions_.find(name); it != regions_.end()) return it->second;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || stop()) break;
    // Woken by insert() at once; the 200 ms bound is only for noticing `stop` (the agent shutting down).
    added_.wait_for(
        lock, std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(200)));
  }
  return make_error(ErrorCode::NotFound, "region " + quoted(name) + " not found");
}

std::vector<RegionPtr> RegionStore::list() const {
  std::lock_guard lock(mu_);
  std::vector<RegionPtr> out;
  out.reserve(regions_.size());
  for (const auto& [name, region] : regions_) out.push_back(region);
  return out;
}

Status RegionStore::remove(const std::string& name) {
  RegionPtr doomed;  // freed after the lock: unmapping gigabytes should not stall other requests
  {
    std::lock_guard lock(mu_);
    const auto it = regions_.find(name);
    if (it == regions_.end()) return make_error(ErrorCode::NotFound, "region " + quoted(name) + " not found");
    if (const int users = it->second->users(); users > 0) {
      return make_error(ErrorCode::Conflict, "region " + quoted(name) + " is in use by " +
                                                 std::to_string(users) + " transfers or grants");
    }
    doomed = std::move(it->second);
    regions_.erase(it);
  }
  return {};
}

std::uint64_t RegionStore::used_bytes() const {
  std::lock_guard lock(mu_);
  return sum_bytes(regions_, *scratch_);
}

Result<SaveFile> RegionStore::open_save(const std::string& file, const std::string& ns) const {
  auto where = files_.beneath(file, ns, /*make=*/true);
  if (!where) return where.error();
  auto dir = where->parent(/*make=*/true);
  if (!dir) return dir.error();
  return SaveFile::create(std::move(*dir), file, save_direct_);
}

Result<WrittenBytes> RegionStore::save(const std::string& name, const std::string& file,
                                       const std::string& ns) {
  auto region = get(name);
  if (!region) return region.error();
  const MemoryRegion& memory = (*region)->memory();
  const auto data = memory.bytes();
  const bool device = memory.kind() == MemoryKind::Cuda;
  if (data.empty() && !device)
    return make_error(ErrorCode::Unsupported, "region " + quoted(name) + " is not host memory");
  // A .safetensors file: the header, then the tensors' bytes (a region may hold more after them).
  std::string header;
  std::uint64_t length = memory.size();
  if (is_safetensors(file)) {
    const auto manifest = (*region)->manifest();
    if (!manifest) {
      return make_error(ErrorCode::Conflict, "region " + quoted(name) +
                                                 " has no manifest to write a .safetensors header from "
                                                 "(PUT /v1/regions/{name}/manifest)");
    }
    auto text = manifest->safetensors_header();
    if (!text) return text.error();
    const std::uint64_t size = text->size();
    header.reserve(8 + size);
    for (int b = 0; b < 8; ++b) header.push_back(static_cast<char>((size >> (8 * b)) & 0xff));
    header += *text;
    length = manifest->data_bytes();
  }
  auto out = open_save(file, ns);
  if (!out) return out.error();
  if (!header.empty()) {
    if (auto written = out->append(std::as_bytes(std::span(header))); !written) return written.error();
  }
  if (device) {
    // Device memory goes to the file through a host buffer, a piece at a time.
    if (auto written = write_device(*out, memory, length); !written) return written.error();
  } else if (auto written = out->append(data.first(length)); !written) {
    return written.error();
  }
  if (auto committed = out->commit(header.size() + length); !committed) return committed.error();
  return out->written();
}

Result<std::vector<std::uint32_t>> region_checksum(const Region& region, std::uint64_t offset,
                                                   std::uint64_t length, std::uint64_t slice) {
  if (slice == 0) return make_error(ErrorCode::InvalidArgument, "slice must be at least 1 byte");
  const auto data = region.memory().bytes();
  const bool device = region.memory().kind() == MemoryKind::Cuda;
  if (data.empty() && !device)
    return make_error(ErrorCode::Unsupported, "region " + quoted(region.name()) + " is not host memory");
  const std::uint64_t size = region.bytes();
  if (offset >= size) {
    return make_error(ErrorCode::InvalidArgument, "offset " + std::to_string(offset) +
                                                      " is not inside region " + quoted(region.name()) +
                                                      " of " + std::to_string(size) + " bytes");
  }
  if (length == 0) length = size - offset;
  if (length > size - offset) {
    return make_error(ErrorCode::InvalidArgument,
                      "range of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                          " runs past the end of region " + quoted(region.name()) + " (" +
                          std::to_string(size) + " bytes)");
  }
  const std::uint64_t count = (length - 1) / slice + 1;
  if (count > kMaxChecksumSlices) {
    return make_error(ErrorCode::InvalidArgument, std::to_string(count) + " slices asked for, at most " +
                                                      std::to_string(kMaxChecksumSlices) +
                                                      ": use a larger slice");
  }
  if (device) return cuda::region_crc32c_slices(region.memory(), offset, length, slice);
  return crc32c_slices(data.subspan(offset, length), slice);
}

}  // namespace conduit::agent
