// The CUDA driver API as this process found it: libcuda.so.1 opened with dlopen and the entry points
// Conduit uses resolved by name, so nothing links against CUDA and a machine without a driver gets a reason,
// not a loader error. Built only with CUDA headers (cuda.h for the types); the stub replaces it otherwise.
#pragma once

#include <cuda.h>

#include <string>

#include "conduit/common/result.h"

namespace conduit::cuda::backend {

// X(member, symbol, declared name): the driver exports versioned symbols (cuMemAlloc_v2) that cuda.h
// renames its declarations to, so the type comes from the declared name and the symbol is looked up as is.
#define CONDUIT_CUDA_FUNCTIONS(X)                                                   \
  X(init, "cuInit", cuInit)                                                         \
  X(driver_get_version, "cuDriverGetVersion", cuDriverGetVersion)                   \
  X(get_error_name, "cuGetErrorName", cuGetErrorName)                               \
  X(get_error_string, "cuGetErrorString", cuGetErrorString)                         \
  X(device_get_count, "cuDeviceGetCount", cuDeviceGetCount)                         \
  X(device_get, "cuDeviceGet", cuDeviceGet)                                         \
  X(device_get_name, "cuDeviceGetName", cuDeviceGetName)                            \
  X(device_total_mem, "cuDeviceTotalMem_v2", cuDeviceTotalMem)                      \
  X(device_get_attribute, "cuDeviceGetAttribute", cuDeviceGetAttribute)             \
  X(device_get_pci_bus_id, "cuDeviceGetPCIBusId", cuDeviceGetPCIBusId)              \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)       \
  X(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease) \
  X(ctx_set_current, "cuCtxSetCurrent", cuCtxSetCurrent)                            \
  X(mem_alloc, "cuMemAlloc_v2", cuMemAlloc)                                         \
  X(mem_free, "cuMemFree_v2", cuMemFree)                                            \
  X(mem_host_alloc, "cuMemHostAlloc", cuMemHostAlloc)                               \
  X(mem_free_host, "cuMemFreeHost", cuMemFreeHost)                                  \
  X(memset_d8, "cuMemsetD8_v2", cuMemsetD8)                                         \
  X(memcpy_htod, "cuMemcpyHtoD_v2", cuMemcpyHtoD)                                   \
  X(memcpy_dtoh, "cuMemcpyDtoH_v2", cuMemcpyDtoH)                                   \
  X(memcpy_dtod, "cuMemcpyDtoD_v2", cuMemcpyDtoD)                                   \
  X(memcpy_htod_async, "cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync)                   \
  X(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync)                   \
  X(stream_create, "cuStreamCreate", cuStreamCreate)                                \
  X(stream_destroy, "cuStreamDestroy_v2", cuStreamDestroy)                          \
  X(stream_synchronize, "cuStreamSynchronize", cuStreamSynchronize)                 \
  X(event_create, "cuEventCreate", cuEventCreate)                                   \
  X(event_record, "cuEventRecord", cuEventRecord)                                   \
  X(event_synchronize, "cuEventSynchronize", cuEventSynchronize)                    \
  X(event_destroy, "cuEventDestroy_v2", cuEventDestroy)                             \
  X(ipc_get_mem_handle, "cuIpcGetMemHandle", cuIpcGetMemHandle)                     \
  X(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2", cuIpcOpenMemHandle)               \
  X(ipc_close_mem_handle, "cuIpcCloseMemHandle", cuIpcCloseMemHandle)

struct Driver {
#define CONDUIT_CUDA_MEMBER(member, symbol, declared) decltype(&::declared) member = nullptr;
  CONDUIT_CUDA_FUNCTIONS(CONDUIT_CUDA_MEMBER)
#undef CONDUIT_CUDA_MEMBER
  // Optional (drivers before 515 / CUDA 11.7 lack it): without it regions have no DMA-BUF.
  decltype(&::cuMemGetHandleForAddressRange) mem_get_handle_for_address_range = nullptr;
};

// The loaded driver, or Unsupported with why not ("no CUDA driver (libcuda.so.1 not found)", "no CUDA
// device (cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected)"). Loaded once per process.
Result<const Driver*> driver();

// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
std::string error_text(const Driver& d, const char* call, CUresult rc);
// Unsupported for "no such device" kinds of failure, ResourceExhausted for out of memory, else Provider.
Error error(const Driver& d, const char* call, CUresult rc);

// Makes `device`'s primary context current on this thread (retained once per device for the process).
Status use_device(const Driver& d, int device);

}  // namespace conduit::cuda::backend
