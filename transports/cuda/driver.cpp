#include "driver.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "conduit/common/text.h"
#include "conduit/cuda_device.h"
#include "driver_library.h"

namespace conduit::cuda {
namespace backend {

namespace {

struct Loaded {
  Driver driver;
  bool ok = false;
  std::string reason;
};

std::string rc_text(const Driver& d, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.get_error_name != nullptr) d.get_error_name(rc, &name);
  if (d.get_error_string != nullptr) d.get_error_string(rc, &text);
  std::string out = name != nullptr ? name : "CUDA error " + std::to_string(static_cast<int>(rc));
  if (text != nullptr) out += std::string(": ") + text;
  return out;
}

Loaded load() {
  Loaded l;
  // libcuda.so.1 unless the process named another (set_driver_library: the agent's --cuda-driver).
  const std::string library = take_driver_library();
  // Never closed: the driver stays loaded for the life of the process, as every CUDA program's does.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    l.reason =
        "no CUDA driver (" + library + " not found" + (why != nullptr ? std::string(": ") + why : "") + ")";
    return l;
  }
#define CONDUIT_CUDA_RESOLVE(member, symbol, declared)                                  \
  l.driver.member = reinterpret_cast<decltype(l.driver.member)>(dlsym(handle, symbol)); \
  if (l.driver.member == nullptr) {                                                     \
    l.reason = "CUDA driver too old: " + library + " has no " symbol;                   \
    return l;                                                                           \
  }
  CONDUIT_CUDA_FUNCTIONS(CONDUIT_CUDA_RESOLVE)
#undef CONDUIT_CUDA_RESOLVE
  l.driver.mem_get_handle_for_address_range =
      reinterpret_cast<decltype(l.driver.mem_get_handle_for_address_range)>(
          dlsym(handle, "cuMemGetHandleForAddressRange"));
  if (const CUresult rc = l.driver.init(0); rc != CUDA_SUCCESS) {
    l.reason = (rc == CUDA_ERROR_NO_DEVICE ? "no CUDA device (cuInit: " : "CUDA driver unusable (cuInit: ") +
               rc_text(l.driver, rc) + ")";
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

Availability probe() {
  Availability a;
  a.built = true;
  const Loaded& l = loaded();
  if (!l.ok) {
    a.reason = l.reason;
    return a;
  }
  const Driver& d = l.driver;
  a.driver = true;
  d.driver_get_version(&a.driver_version);
  int count = 0;
  if (const CUresult rc = d.device_get_count(&count); rc != CUDA_SUCCESS) {
    a.reason = "no CUDA device (cuDeviceGetCount: " + rc_text(d, rc) + ")";
    return a;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (d.device_get(&dev, i) != CUDA_SUCCESS) continue;
    DeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    if (d.device_get_name(name, sizeof name - 1, dev) == CUDA_SUCCESS) info.name = name;
    char bus[32] = {};
    if (d.device_get_pci_bus_id(bus, sizeof bus - 1, dev) == CUDA_SUCCESS) {
      info.pci_bus_id = to_lower(bus);
    }
    size_t total = 0;
    if (d.device_total_mem(&total, dev) == CUDA_SUCCESS) info.memory_bytes = total;
    int dmabuf = 0;
    if (d.device_get_attribute(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS) {
      info.dmabuf = dmabuf != 0;
    }
    a.devices.push_back(std::move(info));
  }
  if (a.devices.empty()) a.reason = "no CUDA device (the driver reports none)";
  return a;
}

}  // namespace

Result<const Driver*> driver() {
  const Loaded& l = loaded();
  if (!l.ok) return make_error(ErrorCode::Unsupported, l.reason);
  return &l.driver;
}

std::string error_text(const Driver& d, const char* call, CUresult rc) {
  return std::string(call) + ": " + rc_text(d, rc);
}

Error error(const Driver& d, const char* call, CUresult rc) {
  ErrorCode code = ErrorCode::Provider;
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) code = ErrorCode::ResourceExhausted;
  if (rc == CUDA_ERROR_INVALID_DEVICE || rc == CUDA_ERROR_NO_DEVICE || rc == CUDA_ERROR_NOT_SUPPORTED) {
    code = ErrorCode::Unsupported;
  }
  return make_error(code, error_text(d, call, rc));
}

Status use_device(const Driver& d, int device) {
  static std::mutex mu;
  static std::map<int, CUcontext> contexts;  // retained for the life of the process
  CUcontext ctx = nullptr;
  {
    std::lock_guard lock(mu);
    auto it = contexts.find(device);
    if (it == contexts.end()) {
      CUdevice dev = 0;
      if (const CUresult rc = d.device_get(&dev, device); rc != CUDA_SUCCESS)
        return error(d, "cuDeviceGet", rc);
      if (const CUresult rc = d.primary_ctx_retain(&ctx, dev); rc != CUDA_SUCCESS) {
        return error(d, "cuDevicePrimaryCtxRetain", rc);
      }
      contexts.emplace(device, ctx);
    } else {
      ctx = it->second;
    }
  }
  if (const CUresult rc = d.ctx_set_current(ctx); rc != CUDA_SUCCESS) return error(d, "cuCtxSetCurrent", rc);
  return {};
}

}  // namespace backend

const Availability& availability() {
  static const Availability a = backend::probe();
  return a;
}

Status check_device(int device) {
  const Availability& a = availability();
  if (!a.driver || a.devices.empty()) {
    return make_error(ErrorCode::Unsupported, "no CUDA device " + std::to_string(device) + ": " + a.reason);
  }
  const auto count = static_cast<int>(a.devices.size());
  if (device < 0 || device >= count) {
    return make_error(ErrorCode::Unsupported, "no CUDA device " + std::to_string(device) +
                                                  ": this node has " + std::to_string(count) + " (cuda:0.." +
                                                  std::to_string(count - 1) + ")");
  }
  return {};
}

}  // namespace conduit::cuda
