// RAII owners for libfabric handles. Every fid is closed by exactly one owner; members are declared in
// dependency order (fabric, domain, av/cq, ep, mr) so that destruction closes endpoints before their queues
// and MRs before their domain without any explicit close on error paths.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <memory>

namespace conduit::fabric {

struct FidCloser {
  template <typename T>
  void operator()(T* handle) const {
    if (handle != nullptr) fi_close(&handle->fid);
  }
};

template <typename T>
using Fid = std::unique_ptr<T, FidCloser>;

struct InfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

}  // namespace conduit::fabric
