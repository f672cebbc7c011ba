// File names of every file route (load, save, stat, file sources, grant saves): whatever
// DataDir::beneath(...).open() opens must lie under the data directory, and with a namespace under that
// namespace's directory, whatever the name and whatever links the directory holds. The data directory here
// holds links that point out of it (to /, to a sibling directory, by an absolute path), out of a namespace
// (team-a/b -> ../team-b), one that stays inside, and a loop. data_path, the spelling check, must agree.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "files/data_dir.h"
#include "regions.h"

namespace fs = std::filesystem;

namespace {

fs::path g_root;  // holds data/ and outside/
std::unique_ptr<conduit::agent::DataDir> g_dir;
std::unique_ptr<conduit::agent::RegionStore> g_store;
std::string g_base;  // canonical data directory with a trailing '/'

void remove_root() {
  std::error_code ec;
  if (!g_root.empty()) fs::remove_all(g_root, ec);
}

// Where an open fd lies, as the kernel names it.
std::string where(int fd) {
  std::error_code ec;
  return fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec).string();
}

void check_open(const std::string& file, const std::string& ns, const std::string& under) {
  auto beneath = g_dir->beneath(file, ns);
  if (!beneath) return;
  auto fd = beneath->open(O_RDONLY | O_CLOEXEC);
  if (fd && !(where(fd->get()) + "/").starts_with(under)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (fs::temp_directory_path() / "conduit-fuzz-data-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  g_root = tmpl;
  std::atexit(remove_root);
  const fs::path data = g_root / "data";
  fs::create_directories(data / "sub");
  fs::create_directories(data / "team-a");
  fs::create_directories(data / "team-b");
  fs::create_directories(g_root / "outside");
  std::ofstream(g_root / "outside" / "secret") << "outside";
  std::ofstream(data / "team-b" / "secret") << "team-b";
  std::ofstream(data / "sub" / "f") << "inside";
  fs::create_symlink("/", data / "root");
  fs::create_symlink("../outside", data / "out");
  fs::create_symlink(g_root / "outside", data / "abs");
  fs::create_symlink("sub", data / "in");
  fs::create_symlink("loop", data / "loop");
  fs::create_symlink("../team-b", data / "team-a" / "b");
  fs::create_symlink("../team-b/secret", data / "team-a" / "s");
  g_dir = std::make_unique<conduit::agent::DataDir>(data);
  g_store = std::make_unique<conduit::agent::RegionStore>(data, 1 << 20);
  g_base = fs::canonical(data).string() + "/";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  auto path = g_store->data_path(file);
  if (path && !path->string().starts_with(g_base)) std::abort();
  check_open(file, "", g_base);
  check_open(file, "team-a", g_base + "team-a/");
  return 0;
}
