#include "driver_library.h"

#include <mutex>

#include "conduit/cuda_device.h"

namespace conduit::cuda {

namespace {

struct Choice {
  std::mutex mu;
  std::string library = kDefaultDriverLibrary;
  bool taken = false;  // the driver was loaded (or its loading began) with `library`
};

Choice& choice() {
  static Choice c;
  return c;
}

}  // namespace

Status set_driver_library(const std::string& path) {
  if (path.empty())
    return make_error(ErrorCode::InvalidArgument, "the CUDA driver library must not be empty");
  Choice& c = choice();
  std::lock_guard lock(c.mu);
  if (c.taken && path != c.library) {
    return make_error(ErrorCode::Conflict, "this process already chose the CUDA driver " + c.library +
                                               " (it loads once, at the first CUDA call): name " + path +
                                               " before that");
  }
  c.library = path;
  return {};
}

namespace backend {

std::string take_driver_library() {
  Choice& c = choice();
  std::lock_guard lock(c.mu);
  c.taken = true;
  return c.library;
}

}  // namespace backend
}  // namespace conduit::cuda
