"""GPU memory of this process as an agent region, through a CUDA IPC handle (docs/gpu.md, "Import").

The tensor (anything with ``__cuda_array_interface__``: a torch CUDA tensor, a CuPy array, a Numba device
array) stays where it is; the agent opens its allocation with ``cuIpcOpenMemHandle``. The handle comes from
the CUDA driver API through ctypes (``libcuda.so.1``, as the agent loads it), so nothing here needs a CUDA
toolkit or a Python CUDA package.

Limits: the agent imports an allocation from its start (the import request has no offset), so the tensor must
begin its CUDA allocation; PyTorch's caching allocator may place a small tensor inside a larger block, which
is refused here with a message saying so. The process must keep the tensor alive while the region exists.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffers import checked_import_socket, send_import
from .errors import InvalidArgument, Unprocessable
from .values import Region, check_name

if TYPE_CHECKING:
    from .agent import Agent

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9  # cuda.h: CUpointer_attribute
_IPC_HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


class CudaDriver:
    """The few driver calls needed, loaded at run time; Unprocessable (reason ``Unsupported``) saying why
    when there is no driver or no device."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise Unprocessable(f"no CUDA driver (libcuda.so.1 not found: {e})", "Unsupported") from e
        self.check(self.lib.cuInit(0), "cuInit")

    def error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode()
        return f"CUresult {rc}"

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise Unprocessable(f"{what}: {self.error_name(rc)}", "Unsupported")

    def device_of(self, ptr: int) -> int:
        ordinal = ctypes.c_int(-1)
        self.check(self.lib.cuPointerGetAttribute(ctypes.byref(ordinal), _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                  ctypes.c_uint64(ptr)),
                   f"cuPointerGetAttribute(DEVICE_ORDINAL) of 0x{ptr:x} (not CUDA device memory?)")
        return ordinal.value

    def ipc_handle(self, ptr: int, device: int) -> tuple[bytes, int, int]:
        """(the 64-byte IPC handle of PTR's allocation, that allocation's base, its size), asked on DEVICE's
        primary context (the one torch and CuPy use), made current for the calls."""
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        try:
            self.check(self.lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
            try:
                base, size = ctypes.c_uint64(), ctypes.c_size_t()
                self.check(self.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                            ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
                handle = _IpcMemHandle()
                self.check(self.lib.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(ptr)),
                           "cuIpcGetMemHandle")
                return bytes(handle.reserved), base.value, size.value
            finally:
                popped = ctypes.c_void_p()
                self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped))
        finally:
            self.lib.cuDevicePrimaryCtxRelease_v2(dev)


def cuda_extent(tensor: Any) -> tuple[int, int]:
    """(device pointer, bytes) of a C-contiguous object with ``__cuda_array_interface__``."""
    cai = getattr(tensor, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        raise InvalidArgument(f"{type(tensor).__name__} has no __cuda_array_interface__ (not CUDA memory)",
                              "InvalidArgument")
    ptr = int(cai["data"][0])
    shape = tuple(int(d) for d in cai["shape"])
    itemsize = np.dtype(cai["typestr"]).itemsize
    strides = cai.get("strides")
    if strides is not None:
        want, step = [], itemsize
        for d in reversed(shape):
            want.append(step)
            step *= d
        if tuple(strides) != tuple(reversed(want)):
            raise InvalidArgument("the tensor is not contiguous: a region is one range of memory",
                                  "InvalidArgument")
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    if nbytes == 0 or ptr == 0:
        raise InvalidArgument("the tensor is empty", "InvalidArgument")
    return ptr, nbytes


def share_cuda(agent: Agent, name: str, tensor: Any) -> Region:
    """Import TENSOR's GPU memory into AGENT as region NAME (see the module's docstring); the agent's region
    (the tensor must stay alive while it exists). Raises the agent's refusal as a ConduitError, Unprocessable
    (reason Unsupported) without a CUDA driver or device."""
    path = checked_import_socket(agent)
    check_name(name)
    ptr, nbytes = cuda_extent(tensor)
    driver = CudaDriver()
    device = driver.device_of(ptr)
    handle, base, size = driver.ipc_handle(ptr, device)
    if base != ptr:
        raise InvalidArgument(f"the tensor starts {ptr - base} bytes into its CUDA allocation (0x{base:x}, "
                              f"{size} bytes); the agent imports an allocation from its start: give it a tensor "
                              "that begins its own allocation (PyTorch: a large one, or "
                              "PYTORCH_NO_CUDA_MEMORY_CACHING=1)", "InvalidArgument")
    answer = send_import(path, {"name": name, "bytes": nbytes, "cudaIpcHandle": handle.hex(), "device": device})
    return Region.from_json(answer["region"])
