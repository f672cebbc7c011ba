#include "regions.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "conduit/api/names.h"
#include "conduit/crc32c.h"
#include "conduit/cuda_device.h"
#include "conduit/pattern.h"
#include "file_bytes.h"
#include "import_socket.h"
#include "importer.h"
#include "page_cache.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = 1 << 20;

std::string code(const Error& e) { return std::string(to_string(e.code)); }

using testing::TempDir;

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  fill_pattern(out, seed);
  return out;
}

using testing::read_file;
using testing::write_file;

std::vector<std::byte> bytes_of(const RegionPtr& r) {
  const auto s = r->memory().bytes();
  return {s.begin(), s.end()};
}

// YYYY-MM-DDTHH:MM:SSZ, the shape Kubernetes timestamps have.
bool is_rfc3339_utc(const std::string& s) {
  const std::string shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != shape.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != shape[i]) return false;
  }
  return true;
}

class RegionStoreTest : public ::testing::Test {
 protected:
  TempDir tmp;
  fs::path data = tmp.path() / "data";
  RegionStore store{data, 64 * kMiB};
};

TEST(Name, AcceptsDns1123Labels) {
  for (const std::string& name :
       std::vector<std::string>{"a", "0", "model-1", "9lives", "a-b-c", std::string(63, 'x')}) {
    EXPECT_TRUE(api::validate_name(name).ok()) << name;
  }
}

TEST(Name, RejectsEverythingElse) {
  for (const std::string& name :
       std::vector<std::string>{"", "Model", "a_b", "-a", "a-", "a.b", "a b", "é", std::string(64, 'x')}) {
    const auto st = api::validate_name(name);
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_EQ(code(st.error()), "InvalidArgument") << name;
  }
}

TEST_F(RegionStoreTest, CreateGetListRemove) {
  EXPECT_TRUE(fs::is_directory(data));
  auto a = store.create("alpha", 4096, "host");
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(store.create("beta", 100, "host").ok());
  EXPECT_EQ((*a)->bytes(), 4096u);
  EXPECT_EQ((*a)->memory_label(), "host");
  EXPECT_EQ((*a)->source(), "allocated");

  auto got = store.get("alpha");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->get(), a->get());
  const auto all = store.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->name(), "alpha");
  EXPECT_EQ(all[1]->name(), "beta");

  const auto j = (*a)->to_json();
  EXPECT_EQ(j["name"], "alpha");
  EXPECT_EQ(j["bytes"], 4096);
  EXPECT_EQ(j["memory"], "host");
  EXPECT_EQ(j["source"], "allocated");
  EXPECT_EQ(j["users"], 0);
  EXPECT_TRUE(j["hugePages"].is_boolean());
  EXPECT_TRUE(is_rfc3339_utc(j["createdAt"].get<std::string>())) << j["createdAt"];

  ASSERT_TRUE(store.remove("alpha").ok());
  EXPECT_EQ(code(store.get("alpha").error()), "NotFound");
  EXPECT_EQ(code(store.remove("alpha").error()), "NotFound");
  EXPECT_EQ(store.list().size(), 1u);
}

TEST_F(RegionStoreTest, RejectsBadCreates) {
  EXPECT_EQ(code(store.create("Bad_Name", 10, "host").error()), "InvalidArgument");
  EXPECT_EQ(code(store.create("zero", 0, "host").error()), "InvalidArgument");
  for (const char* memory : {"", "HOST", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0"}) {
    EXPECT_EQ(code(store.create("m", 10, memory).error()), "InvalidArgument") << memory;
  }
  ASSERT_TRUE(store.create("dup", 10, "host").ok());
  const auto dup = store.create("dup", 10, "host");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(code(dup.error()), "AlreadyExists");
  EXPECT_EQ(store.list().size(), 1u);
}

TEST_F(RegionStoreTest, CudaIsUnsupportedWithoutCuda) {
  const auto& gpu = cuda::availability();
  if (gpu.usable()) GTEST_SKIP() << "CUDA is usable here (tests/agent/cuda_agent_test.cpp covers it)";
  const auto r = store.create("gpu", 4096, "cuda:0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(code(r.error()), "Unsupported");
  EXPECT_EQ(r.error().message, gpu.built
                                   ? "no CUDA device 0: " + gpu.reason
                                   : "this agent was built without CUDA: cuda:0 regions are not available");
  EXPECT_EQ(code(store.create("gpu", 4096, "cuda:12").error()), "Unsupported");
}

TEST(RegionCap, EnforcedAndFreedByRemove) {
  TempDir tmp;
  RegionStore store(tmp.path(), kMiB);
  ASSERT_TRUE(store.create("a", 600 * 1024, "host").ok());
  EXPECT_EQ(store.used_bytes(), 600u * 1024);
  const auto over = store.create("b", 600 * 1024, "host");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(code(over.error()), "ResourceExhausted");
  EXPECT_EQ(over.error().message,
            "region of 614400 bytes would exceed the memory cap: 614400 of 1048576 bytes in use");
  EXPECT_EQ(code(store.create("huge", UINT64_MAX, "host").error()), "ResourceExhausted");
  ASSERT_TRUE(store.create("fits", kMiB - 600 * 1024, "host").ok());
  EXPECT_EQ(store.used_bytes(), kMiB);

  ASSERT_TRUE(store.remove("a").ok());
  EXPECT_EQ(store.used_bytes(), kMiB - 600 * 1024);
  EXPECT_TRUE(store.create("b", 600 * 1024, "host").ok());
}

TEST_F(RegionStoreTest, RemoveWhileInUseIsConflict) {
  ASSERT_TRUE(store.create("busy", 4096, "host").ok());
  RegionUse use(*store.get("busy"));
  {
    RegionUse second(*store.get("busy"));
    const auto st = store.remove("busy");
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(code(st.error()), "Conflict");
    EXPECT_EQ(st.error().message, "region \"busy\" is in use by 2 transfers or grants");
  }
  EXPECT_EQ((*store.get("busy"))->to_json()["users"], 1);
  EXPECT_EQ(code(store.remove("busy").error()), "Conflict");
  use.reset();
  EXPECT_TRUE(store.remove("busy").ok());
}

TEST_F(RegionStoreTest, LoadCopiesTheFile) {
  const auto content = pattern(3 * kMiB + 123, 7);
  write_file(data / "ckpt" / "model.bin", content);
  auto r = store.load("model", "ckpt/model.bin");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->bytes(), content.size());
  EXPECT_EQ((*r)->source(), "file:ckpt/model.bin");
  EXPECT_EQ(crc32c((*r)->memory().bytes()), crc32c(content));
  EXPECT_EQ(store.used_bytes(), content.size());

  // A copy: rewriting the file later leaves the region as it was.
  write_file(data / "ckpt" / "model.bin", pattern(3 * kMiB + 123, 8));
  EXPECT_EQ(crc32c((*r)->memory().bytes()), crc32c(content));

  // A file the page cache does not hold (read around it, the last partial block through it) loads the same.
  testing::drop_from_page_cache(data / "ckpt" / "model.bin");
  auto cold = store.load("cold", "ckpt/model.bin");
  ASSERT_TRUE(cold.ok()) << cold.error().message;
  EXPECT_EQ(crc32c((*cold)->memory().bytes()), crc32c(pattern(3 * kMiB + 123, 8)));
}

// A .safetensors data section starts 8 + its header's size in, rarely on a block: loaded cold, its blocks are
// still read straight into the region (around the page cache, no bounce buffer), because the region starts
// as far past a block in its memory as its bytes do in the file.
TEST_F(RegionStoreTest, AColdSafetensorsFileLoadsItsDataSectionDirectly) {
  const std::uint64_t n = 3 * kMiB + 77;
  std::string header = R"({"t":{"dtype":"U8","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
                       std::to_string(n) + "]}}";
  header.resize(3184 - 8, ' ');  // the format pads with spaces: the data at 3,184, as torch's files put it
  const auto content = pattern(n, 9);
  std::vector<std::byte> file(8);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
  for (char c : header) file.push_back(static_cast<std::byte>(c));
  file.insert(file.end(), content.begin(), content.end());
  write_file(data / "model.safetensors", file);
  if (const auto why = testing::make_cold(data / "model.safetensors"); !why.empty()) GTEST_SKIP() << why;

  {
    auto r = store.load("model", "model.safetensors");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)->bytes(), n);
    EXPECT_EQ(crc32c((*r)->memory().bytes()), crc32c(content));
    ASSERT_TRUE((*r)->manifest());
    EXPECT_EQ((*r)->manifest()->tensors.at(0).name, "t");
    EXPECT_EQ(store.used_bytes(), n);
    // Read around the page cache: only the header's block and the last partial one went through it. And
    // with no bounce buffer between: the region lies as far into a block as its bytes do in the file.
    EXPECT_LT(testing::cached_share(data / "model.safetensors"), 0.01);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>((*r)->memory().data()) % 4096, 3184U);
  }
  // Its memory goes back with the region: deleting it and loading again gives the same bytes.
  ASSERT_TRUE(store.remove("model"));
  auto again = store.load("model", "model.safetensors");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(crc32c((*again)->memory().bytes()), crc32c(content));
}

TEST_F(RegionStoreTest, LoadErrors) {
  const auto missing = store.load("x", "nope/missing.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(code(missing.error()), "NotFound");
  EXPECT_NE(missing.error().message.find("nope/missing.bin"), std::string::npos) << missing.error().message;

  write_file(data / "empty.bin", {});
  EXPECT_EQ(code(store.load("x", "empty.bin").error()), "InvalidArgument");
  fs::create_directories(data / "dir");
  EXPECT_EQ(code(store.load("x", "dir").error()), "InvalidArgument");

  write_file(data / "ok.bin", pattern(100, 1));
  ASSERT_TRUE(store.load("x", "ok.bin").ok());
  EXPECT_EQ(code(store.load("x", "ok.bin").error()), "AlreadyExists");
  RegionStore tiny(data, 50);
  EXPECT_EQ(code(tiny.load("y", "ok.bin").error()), "ResourceExhausted");
  EXPECT_TRUE(store.list().size() == 1 && tiny.list().empty());
}

// Found by schemathesis: a 300-byte file name was a 500 (ENAMETOOLONG from the file system).
TEST_F(RegionStoreTest, OverlongOrUnresolvablePathsAreTheRequestsFault) {
  ASSERT_TRUE(store.create("r", 10, "host").ok());
  const std::string longest(238, 'n');  // with the save's ".tmp-<12 hex>" suffix: 255 bytes
  ASSERT_TRUE(store.save("r", longest).ok());
  EXPECT_TRUE(fs::exists(data / longest));
  const auto too_long = store.save("r", longest + "n");
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(code(too_long.error()), "InvalidArgument");
  EXPECT_NE(too_long.error().message.find("at most 238 are allowed"), std::string::npos)
      << too_long.error().message;
  EXPECT_EQ(code(store.load("x", std::string(300, 'z') + "/f").error()), "InvalidArgument");
  std::string deep;
  for (int i = 0; i < 600; ++i) deep += "d/";  // 1,202 bytes
  EXPECT_EQ(code(store.data_path(deep + "f").error()), "InvalidArgument");
  write_file(data / "plain", pattern(10, 1));
  EXPECT_EQ(code(store.save("r", "plain/f").error()), "InvalidArgument");  // a file used as a directory
  fs::create_symlink("loop", data / "loop");
  EXPECT_EQ(code(store.load("y", "loop/f").error()), "InvalidArgument");
  EXPECT_EQ(store.list().size(), 1u);
}

TEST_F(RegionStoreTest, DataPathStaysInside) {
  fs::create_directories(data / "sub");
  fs::create_symlink(fs::temp_directory_path(), data / "escape");
  fs::create_symlink(data / "sub", data / "inner");
  for (const char* bad : {"../x", "/etc/passwd", "a/../../x", "..", "escape/x", "escape", "sub/../../x"}) {
    const auto p = store.data_path(bad);
    ASSERT_FALSE(p.ok()) << bad << " -> " << p->string();
    EXPECT_EQ(code(p.error()), "InvalidArgument") << bad;
    EXPECT_EQ(p.error().message, "path \"" + std::string(bad) + "\" is outside the data directory");
  }
  EXPECT_EQ(code(store.data_path("").error()), "InvalidArgument");
  EXPECT_EQ(code(store.data_path(std::string("a\0b", 3)).error()), "InvalidArgument");

  const fs::path base = fs::canonical(data);
  EXPECT_EQ(*store.data_path("a/b.bin"), base / "a" / "b.bin");
  EXPECT_EQ(*store.data_path("a/../b.bin"), base / "b.bin");
  EXPECT_EQ(*store.data_path("inner/f"), base / "sub" / "f");

  // The same through load and save, with a link to a directory of this test's own to write into.
  write_file(tmp.path() / "outside" / "x", pattern(10, 1));
  fs::create_symlink(tmp.path() / "outside", data / "out");
  EXPECT_EQ(code(store.load("leak", "out/x").error()), "InvalidArgument");
  EXPECT_EQ(code(store.load("leak", "../outside/x").error()), "InvalidArgument");
  ASSERT_TRUE(store.create("r", 10, "host").ok());
  EXPECT_EQ(code(store.save("r", "out/written").error()), "InvalidArgument");
  EXPECT_EQ(code(store.save("r", "../outside/written").error()), "InvalidArgument");
  EXPECT_FALSE(fs::exists(tmp.path() / "outside" / "written"));
  EXPECT_EQ(store.list().size(), 1u);
}

TEST_F(RegionStoreTest, SaveRoundTripIsByteIdentical) {
  const auto content = pattern(5 * kMiB + 17, 42);
  write_file(data / "in.bin", content);
  ASSERT_TRUE(store.load("src", "in.bin").ok());
  const auto saved = store.save("src", "out/nested/copy.bin");
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(read_file(data / "out/nested/copy.bin"), content);

  auto back = store.load("back", "out/nested/copy.bin");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(bytes_of(*back), content);

  // Saving over an existing file replaces it whole.
  ASSERT_TRUE(store.create("small", 10, "host").ok());
  ASSERT_TRUE(store.save("small", "out/nested/copy.bin").ok());
  EXPECT_EQ(fs::file_size(data / "out/nested/copy.bin"), 10u);
  EXPECT_EQ(code(store.save("missing", "x.bin").error()), "NotFound");
}

TEST_F(RegionStoreTest, FailedSaveLeavesNothingBehind) {
  ASSERT_TRUE(store.create("r", kMiB, "host").ok());
  fs::create_directories(data / "out" / "target");
  const auto st = store.save("r", "out/target");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(code(st.error()), "InvalidArgument");
  EXPECT_TRUE(fs::is_directory(data / "out" / "target"));
  for (const auto& e : fs::recursive_directory_iterator(data)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    EXPECT_FALSE(e.is_regular_file()) << e.path();
  }
}

TEST_F(RegionStoreTest, RegionChecksumMatchesSlices) {
  const auto content = pattern(kMiB + 100, 3);
  write_file(data / "c.bin", content);
  auto r = store.load("c", "c.bin");
  ASSERT_TRUE(r.ok());
  constexpr std::uint64_t kSlice = 64 * 1024;

  auto whole = region_checksum(**r, 0, 0, kSlice);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(*whole, crc32c_slices(content, kSlice));
  EXPECT_EQ(whole->size(), 17u);
  auto part = region_checksum(**r, 4096, 100000, kSlice);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, crc32c_slices(std::span(content).subspan(4096, 100000), kSlice));

  (*r)->memory().bytes()[200000] ^= std::byte{0x01};
  auto flipped = region_checksum(**r, 0, 0, kSlice);
  ASSERT_TRUE(flipped.ok());
  ASSERT_EQ(flipped->size(), whole->size());
  for (std::size_t i = 0; i < whole->size(); ++i) {
    EXPECT_EQ((*flipped)[i] != (*whole)[i], i == 200000 / kSlice) << "slice " << i;
  }

  const auto bad = [&](std::uint64_t off, std::uint64_t len, std::uint64_t slice) {
    const auto res = region_checksum(**r, off, len, slice);
    return !res.ok() && res.error().code == ErrorCode::InvalidArgument;
  };
  EXPECT_TRUE(bad(0, 0, 0));
  EXPECT_TRUE(bad(content.size(), 0, kSlice));
  EXPECT_TRUE(bad(0, content.size() + 1, kSlice));
  EXPECT_TRUE(bad(1, UINT64_MAX, kSlice));
  EXPECT_TRUE(bad(UINT64_MAX, 2, kSlice));
  EXPECT_TRUE(bad(0, 0, 1));  // over a million slices
  EXPECT_TRUE(region_checksum(**r, 0, 65536, 1).ok());
}

// A local process's view: a memfd holding a seeded pattern.
int make_memfd(std::size_t bytes, std::uint64_t seed) {
  const int fd = ::memfd_create("conduit-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  const auto content = pattern(bytes, seed);
  if (::pwrite(fd, content.data(), bytes, 0) != static_cast<ssize_t>(bytes)) return -1;
  return fd;
}

std::vector<std::byte> memfd_bytes(int fd, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  if (::pread(fd, out.data(), bytes, 0) != static_cast<ssize_t>(bytes)) out.clear();
  return out;
}

std::size_t open_fds() {
  return static_cast<std::size_t>(
      std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}

// The server closes its end of a connection just after replying, so the count may lag the reply briefly.
std::size_t open_fds_settling_at(std::size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::size_t n = open_fds();
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    ::usleep(1000);
    n = open_fds();
  }
  return n;
}

TEST_F(RegionStoreTest, ImportSocketSharesMemfdWithoutCopying) {
  const std::string sock = (tmp.path() / "import.sock").string();
  std::size_t before = 0;
  {
    ImportSocket server(store, sock);
    ASSERT_TRUE(server.start().ok());
    EXPECT_EQ(
        fs::status(sock).permissions() & fs::perms::all,
        fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write);

    constexpr std::size_t kBytes = 2 * kMiB + 4096;
    const int fd = make_memfd(kBytes, 11);
    ASSERT_GE(fd, 0);
    before = open_fds();
    const auto st = import_region(sock, "shared", fd, 0);
    ASSERT_TRUE(st.ok()) << st.error().message;

    auto r = store.get("shared");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)->bytes(), kBytes);
    EXPECT_EQ((*r)->source(), "imported");
    // Who shared it, as the kernel says: this process (the socket's peer credentials).
    ASSERT_TRUE((*r)->importer());
    EXPECT_EQ((*r)->importer()->pid, ::getpid());
    EXPECT_EQ((*r)->importer()->uid, ::getuid());
    EXPECT_EQ((*r)->to_json()["importedBy"]["pid"], ::getpid());
    EXPECT_EQ(bytes_of(*r), memfd_bytes(fd, kBytes));
    (*r)->memory().bytes()[12345] = std::byte{0xAB};
    EXPECT_EQ(memfd_bytes(fd, kBytes)[12345], std::byte{0xAB});

    // The server's errors travel back as codes; no region appears for them.
    EXPECT_EQ(code(import_region(sock, "shared", fd, 0).error()), "AlreadyExists");
    EXPECT_EQ(code(import_region(sock, "Bad", fd, 0).error()), "InvalidArgument");
    EXPECT_EQ(code(import_region(sock, "big", fd, kBytes + 1).error()), "InvalidArgument");
    EXPECT_EQ(store.list().size(), 1u);
    EXPECT_EQ(open_fds_settling_at(before + 1), before + 1) << "the agent holds exactly the one imported fd";

    ASSERT_TRUE(store.remove("shared").ok());
    EXPECT_EQ(open_fds(), before + 1) << "still referenced here";
    r = make_error(ErrorCode::NotFound, "dropped");
    EXPECT_EQ(open_fds(), before) << "the last reference unmaps and closes";
    ::close(fd);
  }
  EXPECT_FALSE(fs::exists(sock));
}

TEST(Importer, PodUidComesFromEitherCgroupDriverAndNothingElse) {
  // cgroup v2 with the systemd driver (underscores), v1 with cgroupfs (dashes), and not in a pod.
  EXPECT_EQ(
      pod_uid_from_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
                          "pod3f2a1b4c_5d6e_47f8_9a0b_1c2d3e4f5a6b.slice/cri-containerd-0123abcd.scope\n"),
      "3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b");
  EXPECT_EQ(pod_uid_from_cgroup("12:memory:/kubepods/besteffort/pod3F2A1B4C-5D6E-47F8-9A0B-1C2D3E4F5A6B/"
                                "0123456789abcdef\n11:cpu:/kubepods/besteffort/pod3f2a1b4c-5d6e-47f8-9a0b-"
                                "1c2d3e4f5a6b/0123456789abcdef\n"),
            "3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b");
  EXPECT_EQ(pod_uid_from_cgroup("0::/user.slice/user-0.slice/session-1.scope\n"), "");
  EXPECT_EQ(pod_uid_from_cgroup("0::/podman-1234.scope\n"), "") << "a pod word without a UID";
  EXPECT_EQ(pod_uid_from_cgroup("0::/pod3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b0/x"), "") << "a longer hex run";
}

TEST(Importer, ContainerIdIsTheSegmentUnderThePodsCgroup) {
  EXPECT_EQ(container_id_from_cgroup(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
                "pod3f2a1b4c_5d6e_47f8_9a0b_1c2d3e4f5a6b.slice/cri-containerd-0123ABCD.scope\n"),
            "0123abcd");
  EXPECT_EQ(container_id_from_cgroup("8:pids:/kubepods/besteffort/pod3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b/"
                                     "0123456789abcdef\n"),
            "0123456789abcdef");
  EXPECT_EQ(container_id_from_cgroup("8:pids:/kubepods/besteffort/pod3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b\n"),
            "")
      << "the pod's own cgroup: no container";
  EXPECT_EQ(container_id_from_cgroup("8:pids:/kubepods/besteffort/pod3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b\n"
                                     "7:cpu:/other/0123\n"),
            "")
      << "a segment on another line is not the pod's";
  EXPECT_EQ(container_id_from_cgroup("0::/kubepods/pod3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b/not-hex\n"), "");
  EXPECT_EQ(container_id_from_cgroup("0::/user.slice/0123456789abcdef\n"), "") << "in no pod";
}

TEST_F(RegionStoreTest, ImportSocketLifecycle) {
  const std::string sock = (tmp.path() / "import.sock").string();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);

  // A socket file left by a crashed agent is replaced; a file that is not a socket is left alone.
  const int stale = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(::bind(stale, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(stale);
  {
    ImportSocket server(store, sock);
    ASSERT_TRUE(server.start().ok());
  }
  write_file(sock, pattern(3, 1));
  {
    ImportSocket server(store, sock);
    EXPECT_FALSE(server.start().ok());
  }
  EXPECT_TRUE(fs::is_regular_file(sock));
  fs::remove(sock);

  // A client that connects and stays silent does not hold up shutdown.
  auto server = std::make_unique<ImportSocket>(store, sock);
  ASSERT_TRUE(server->start().ok());
  const int silent = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::usleep(50 * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  ::close(silent);
  EXPECT_FALSE(fs::exists(sock));
}

// Sends `line` as-is with `fd` attached, as a misbehaving client would, and returns the reply line.
std::string raw_request(const std::string& sock, const std::string& line, int fd) {
  const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "connect failed";
  std::string reply;
  if (send_with_fd(c, line, fd).ok()) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(c, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(c);
  return reply;
}

TEST_F(RegionStoreTest, ImportWithBadRequestGetsErrorAndNoRegion) {
  const std::string sock = (tmp.path() / "import.sock").string();
  ImportSocket server(store, sock);
  ASSERT_TRUE(server.start().ok());
  const int fd = make_memfd(4096, 5);
  ASSERT_GE(fd, 0);
  const std::size_t before = open_fds();

  for (const std::string line :
       {"this is not json", "[1,2]", R"({"name":"x","bytes":-1})", R"({"name":"x","extra":1})",
        R"({"bytes":10})", R"({"name":"x","bytes":"1"})"}) {
    const std::string reply = raw_request(sock, line + "\n", fd);
    const auto j = nlohmann::json::parse(reply, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line << " -> " << reply;
    EXPECT_FALSE(j.contains("ok")) << reply;
    EXPECT_EQ(j["error"]["code"], "InvalidArgument") << reply;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(store.list().empty());
    EXPECT_EQ(open_fds(), before) << "the received fd is closed on error";
  }

  const auto ok = nlohmann::json::parse(raw_request(sock, "{\"name\":\"good\",\"bytes\":4096}\n", fd));
  EXPECT_EQ(ok["ok"], true);
  EXPECT_EQ(ok["region"]["name"], "good");
  EXPECT_EQ(ok["region"]["bytes"], 4096);
  ::close(fd);
}

// A region a pod's process shared is that pod's: a TransferJob reaches it only by addressing the pod
// (podSelector), and addressing a pod reaches nothing else; an operator's own request is no job's.
TEST(Tenancy, WithNamespaceFilesAJobsFilesAreUnderItsNamespaceAlone) {
  EXPECT_EQ(file_refusal("team-a/ckpt/w.bin", "team-a", true), std::nullopt);
  EXPECT_EQ(file_refusal("./team-a/w.bin", "team-a", true), std::nullopt);
  EXPECT_EQ(file_refusal("w.bin", "", true), std::nullopt) << "an operator's own request";
  EXPECT_EQ(file_refusal("team-b/w.bin", "team-a", false), std::nullopt) << "without the flag";
  for (const char* outside : {"team-b/w.bin", "w.bin", "team-a", "team-a/../team-b/w.bin", "team-ab/w.bin"}) {
    const auto why = file_refusal(outside, "team-a", true);
    ASSERT_TRUE(why) << outside;
    EXPECT_NE(why->find("is not in namespace team-a's directory \"team-a/\""), std::string::npos) << *why;
  }
}

TEST(Tenancy, APodsRegionIsReachedOnlyThroughThatPod) {
  TempDir tmp;
  RegionStore store(tmp.path(), 16 * kMiB);
  const std::string pod = "3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b";
  auto shared = store.import_fd("kv", make_memfd(kMiB, 1), 0,
                                Importer{.pid = 42, .uid = 0, .pod_uid = pod, .container_id = ""});
  ASSERT_TRUE(shared.ok()) << shared.error().message;
  auto plain = store.create("weights", kMiB, "host");
  ASSERT_TRUE(plain.ok());

  EXPECT_EQ(refusal(**shared, "team-a", pod), std::nullopt);
  EXPECT_EQ(refusal(**shared, "", ""), std::nullopt) << "an operator's own request";
  EXPECT_EQ(refusal(**shared, "team-a", ""),
            "region kv was shared by pod " + pod +
                ": a TransferJob reaches it only through a podSelector that picks that pod (docs/pods.md)");
  EXPECT_EQ(refusal(**shared, "team-a", "0000-other"),
            "region kv was not shared by pod 0000-other but by pod " + pod + " (docs/pods.md)");
  EXPECT_EQ(refusal(**plain, "team-a", pod),
            "region weights was not shared by pod " + pod + " (docs/pods.md)");
  EXPECT_EQ(refusal(**plain, "team-a", ""), std::nullopt);
}

}  // namespace
}  // namespace conduit::agent
