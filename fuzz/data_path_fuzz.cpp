// File names of POST /v1/regions {"file"} and POST /v1/regions/{name}/save {"file"}: RegionStore::data_path
// must refuse anything that would leave the data directory, by "..", an absolute path or a symbolic link.
// The data directory here holds links that point out of it (to / and to a sibling directory) and one that
// stays inside; whatever data_path accepts must resolve under the directory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "regions.h"

namespace fs = std::filesystem;

namespace {

fs::path g_root;  // holds data/ and outside/
std::unique_ptr<conduit::agent::RegionStore> g_store;
std::string g_base;  // canonical data directory with a trailing '/'

void remove_root() {
  std::error_code ec;
  if (!g_root.empty()) fs::remove_all(g_root, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (fs::temp_directory_path() / "conduit-fuzz-data-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  g_root = tmpl;
  std::atexit(remove_root);
  const fs::path data = g_root / "data";
  fs::create_directories(data / "sub");
  fs::create_directories(g_root / "outside");
  fs::create_symlink("/", data / "root");
  fs::create_symlink("../outside", data / "out");
  fs::create_symlink(g_root / "outside", data / "abs");
  fs::create_symlink("sub", data / "in");
  fs::create_symlink("loop", data / "loop");
  g_store = std::make_unique<conduit::agent::RegionStore>(data, 1 << 20);
  g_base = fs::canonical(data).string() + "/";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file(reinterpret_cast<const char*>(data), size);
  auto path = g_store->data_path(file);
  if (path && !path->string().starts_with(g_base)) std::abort();
  return 0;
}
