// The import socket's open line decided without a socket: who may open which region, and what the descriptor
// handed over allows (the same path over a real agent is tests/agent/share_http_test.cpp).
#include "import_open.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "temp_dir.h"

namespace conduit::agent {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
const std::string kPod = "3f2a1b4c-5d6e-47f8-9a0b-1c2d3e4f5a6b";

Importer in_pod(const std::string& pod) {
  return Importer{.pid = 42, .uid = 0, .pod_uid = pod, .container_id = ""};
}

int memfd() {
  const int fd = ::memfd_create("open-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0 && ::ftruncate(fd, kMiB) != 0) return -1;
  return fd;
}

std::string code(const Result<OpenedRegion>& r) { return r ? "ok" : std::string(to_string(r.error().code)); }

TEST(ImportOpen, APodsRegionOpensOnlyInThatPod) {
  testing::TempDir tmp;
  RegionStore store(tmp.path(), 16 * kMiB);
  ASSERT_TRUE(store.import_fd("kv", memfd(), 0, in_pod(kPod)).ok());
  const nlohmann::json line{{"open", "kv"}};

  EXPECT_EQ(code(open_region(store, line, in_pod(kPod))), "ok");
  const auto other = open_region(store, line, in_pod("0000-other"));
  EXPECT_EQ(code(other), "Forbidden");
  EXPECT_EQ(other.error().message,
            "region \"kv\" belongs to pod " + kPod + "; the opener runs in pod 0000-other");
  EXPECT_EQ(code(open_region(store, line, in_pod(""))), "Forbidden") << "a process of no pod";
  EXPECT_EQ(code(open_region(store, line, std::nullopt)), "Forbidden") << "a process the kernel did not name";
}

TEST(ImportOpen, AShareableRegionsDescriptorIsReadOnlyUnlessAsked) {
  testing::TempDir tmp;
  RegionStore store(tmp.path(), 16 * kMiB);
  auto made = store.create_shareable("weights", kMiB);
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_TRUE((*made)->shareable());
  EXPECT_EQ(store.used_bytes(), kMiB) << "counted against the cap";
  (*made)->memory().bytes()[7] = std::byte{0x5A};

  auto ro = open_region(store, {{"open", "weights"}}, std::nullopt);
  ASSERT_TRUE(ro.ok()) << ro.error().message;
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, ro->fd.get(), 0), MAP_FAILED);
  EXPECT_EQ(errno, EACCES);

  auto rw = open_region(store, {{"open", "weights"}, {"writable", true}}, std::nullopt);
  ASSERT_TRUE(rw.ok()) << rw.error().message;
  void* p = ::mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, rw->fd.get(), 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(static_cast<std::byte*>(p)[7], std::byte{0x5A}) << "the agent's own pages";
  static_cast<std::byte*>(p)[8] = std::byte{0xA5};
  EXPECT_EQ((*made)->memory().bytes()[8], std::byte{0xA5});
  ::munmap(p, kMiB);

  // Over the cap a shareable region is refused like any other, before any memory is made.
  EXPECT_EQ(code(Result<OpenedRegion>(store.create_shareable("big", 16 * kMiB).error())),
            "ResourceExhausted");
  EXPECT_EQ(code(open_region(store, {{"open", "big"}}, std::nullopt)), "NotFound");
}

}  // namespace
}  // namespace conduit::agent
