// Which CUDA driver library this process loads (conduit/cuda_device.h, set_driver_library): kept apart
// from driver.cpp so that every build (with CUDA, the stub, the test doubles) accepts the setting alike.
#pragma once

#include <string>

namespace conduit::cuda::backend {

// The library to dlopen, once per process: from this call on set_driver_library() can no longer change it.
std::string take_driver_library();

}  // namespace conduit::cuda::backend
