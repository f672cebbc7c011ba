// What CUDA support says about itself: in a build without CUDA, with CUDA but no driver (these build
// machines), and on a GPU machine (where the allocation tests run instead of skipping).
#include "conduit/cuda_device.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "conduit/remote_key.h"
#include "conduit/transport.h"

namespace conduit::cuda {
namespace {

TEST(CudaAvailability, SaysWhyCudaIsNotUsableHere) {
  const Availability& a = availability();
  if (a.usable()) GTEST_SKIP() << "CUDA is usable here: " << a.devices.size() << " device(s)";
  ASSERT_FALSE(a.reason.empty());
#ifdef CONDUIT_HAVE_CUDA
  EXPECT_TRUE(a.built);
  // No driver on a build machine, or a driver that sees no device.
  EXPECT_TRUE(a.reason.starts_with("no CUDA driver (libcuda.so.1 not found") ||
              a.reason.starts_with("no CUDA device") || a.reason.starts_with("CUDA driver"))
      << a.reason;
#else
  EXPECT_FALSE(a.built);
  EXPECT_EQ(a.reason, "built without CUDA");
#endif
}

// The driver loads once per process: naming another library after that is refused, saying why, rather than
// silently ignored (the agent names it before its first CUDA call: --cuda-driver).
TEST(CudaDriverLibrary, IsNamedBeforeTheFirstCudaCall) {
  EXPECT_EQ(set_driver_library("").error().code, ErrorCode::InvalidArgument);
  [[maybe_unused]] const Availability& a = availability();
#ifdef CONDUIT_HAVE_CUDA
  const Status late = set_driver_library("/elsewhere/libcuda.so.1");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::Conflict);
  EXPECT_NE(late.error().message.find("already chose the CUDA driver"), std::string::npos)
      << late.error().message;
#endif
}

TEST(CudaAvailability, EveryEntryPointAnswersUnsupportedWithTheReason) {
  const Availability& a = availability();
  if (a.usable()) GTEST_SKIP() << "CUDA is usable here";
  const Status device = check_device(0);
  ASSERT_FALSE(device);
  EXPECT_EQ(device.error().code, ErrorCode::Unsupported);
  EXPECT_EQ(device.error().message, "no CUDA device 0: " + a.reason);
  auto region = allocate(0, 4096);
  ASSERT_FALSE(region);
  EXPECT_EQ(region.error().code, ErrorCode::Unsupported);
  EXPECT_NE(region.error().message.find(a.reason), std::string::npos) << region.error().message;
  EXPECT_FALSE(allocate_pinned(4096));
  EXPECT_FALSE(import_ipc(std::vector<std::byte>(kIpcHandleBytes), 4096, 0));
}

TEST(CudaDevice, AllocatesZeroedDeviceMemoryAndRefusesAMissingDevice) {
  const Availability& a = availability();
  if (!a.usable()) GTEST_SKIP() << "no CUDA device: " << a.reason;
  auto region = allocate(0, 1 << 20);
  ASSERT_TRUE(region) << region.error().message;
  EXPECT_EQ(region->kind(), MemoryKind::Cuda);
  EXPECT_EQ(region->device(), 0);
  EXPECT_TRUE(region->bytes().empty());  // device memory is never read through a host span
  std::vector<std::byte> back(1 << 20, std::byte{1});
  ASSERT_TRUE(copy_to_host(*region, 0, back));
  EXPECT_EQ(back, std::vector<std::byte>(1 << 20));

  const int missing = static_cast<int>(a.devices.size());
  const Status s = check_device(missing);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "no CUDA device " + std::to_string(missing) + ": this node has " +
                                   std::to_string(a.devices.size()) + " (cuda:0.." +
                                   std::to_string(a.devices.size() - 1) + ")");
  EXPECT_FALSE(copy_to_host(*region, 1, back));  // past the end
}

TEST(CudaDevice, IpcHandlesOfTheWrongSizeAreRefused) {
  auto r = import_ipc(std::vector<std::byte>(10), 4096, 0);
  ASSERT_FALSE(r);
  if (availability().usable() && availability().devices[0].name.find("host double") == std::string::npos) {
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
  }
}

TEST(GpuPathNames, AreTheWordsNodeCapabilitiesUse) {
  EXPECT_EQ(to_string(GpuPath::None), "none");
  EXPECT_EQ(to_string(GpuPath::Dmabuf), "dmabuf");
  EXPECT_EQ(to_string(GpuPath::Peermem), "peermem");
  EXPECT_EQ(to_string(GpuPath::Staged), "staged");
}

TEST(RemoteKeyStaged, TravelsOnlyWhenSetAndMustBeABoolean) {
  RemoteKey key;
  key.provider = "tcp;ofi_rxm";
  key.length = 4096;
  key.rails.push_back(RailKey{{std::byte{1}, std::byte{2}}, 7});
  EXPECT_FALSE(key.to_json().contains("staged"));  // host keys read as they always did
  key.staged = true;
  const auto j = key.to_json();
  EXPECT_EQ(j["staged"], true);
  auto back = RemoteKey::from_json(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->staged);
  EXPECT_EQ(*back, key);
  auto bad = j;
  bad["staged"] = "yes";
  EXPECT_FALSE(RemoteKey::from_json(bad));
}

TEST(LibfabricGpuPath, TcpSaysHowItReachesCudaMemoryAndRefusesToRegisterItDirectly) {
  auto t = open_transport(TransportConfig{"tcp", 1, "127.0.0.1", std::chrono::milliseconds(30000)});
  ASSERT_TRUE(t) << t.error().message;
  const Capabilities& caps = (*t)->capabilities();
  EXPECT_FALSE(caps.device_memory);  // Debian's libfabric tcp has no FI_HMEM
  if (availability().usable()) {
    EXPECT_EQ(caps.gpu_path, GpuPath::Staged);
    EXPECT_NE(caps.gpu_path_detail.find("FI_HMEM"), std::string::npos) << caps.gpu_path_detail;
  } else {
    EXPECT_EQ(caps.gpu_path, GpuPath::None);
    EXPECT_EQ(caps.gpu_path_detail, availability().reason);
  }
  // A Cuda-kind region (host memory standing in: registration must refuse before touching it).
  std::vector<std::byte> fake(4096);
  auto region = MemoryRegion::borrow(MemoryKind::Cuda, fake.data(), fake.size(), 0);
  auto reg = (*t)->register_memory(region, Access::RemoteWrite);
  ASSERT_FALSE(reg);
  EXPECT_EQ(reg.error().code, ErrorCode::Unsupported);
  EXPECT_NE(reg.error().message.find("cannot register CUDA memory directly (gpuDirect: " +
                                     std::string(to_string(caps.gpu_path))),
            std::string::npos)
      << reg.error().message;
}

}  // namespace
}  // namespace conduit::cuda
