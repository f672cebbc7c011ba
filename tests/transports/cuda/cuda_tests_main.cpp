// conduit_cuda_tests' main: the CUDA driver library from CONDUIT_CUDA_DRIVER, as conduit-agent's
// --cuda-driver option takes it, so bench/gpu-check.sh can point these tests at the machine's driver where
// the bundle's loader does not find it. A test reads the variable; the library never does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "conduit/cuda_device.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* driver = std::getenv("CONDUIT_CUDA_DRIVER"); driver != nullptr && *driver != '\0') {
    if (auto set = conduit::cuda::set_driver_library(driver); !set) {
      std::cerr << "CONDUIT_CUDA_DRIVER: " << set.error().message << "\n";
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
