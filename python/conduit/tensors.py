"""Named tensors over one buffer: a model's state_dict laid out in one arena, described by a manifest
(conduit/manifest.py), copied in once, seen as zero-copy numpy or torch views, and applied to a model in place.

    manifest, nbytes = layout(model)                 # by dtype, then name: back to back from 0, each aligned
    pack(model, buf, manifest)                       # the one copy in
    apply(views(buf, manifest, "torch"), model2)     # in place: every parameter keeps its storage

A layout is a .safetensors file's data section: the tensors back to back from offset 0 in the order
safetensors' serializer writes them (dtype, widest first, then name), which also puts each tensor at a
multiple of its element size, so every view is aligned wherever the buffer is. The header that makes the
buffer a file is ``manifest.safetensors_header()``.

numpy has no bfloat16 or float8: numpy views of BF16 and F8_* tensors hold their raw bits, as uint16 and
uint8 of the same shape, and a numpy array packed as one is taken as its raw bits; torch views have the real
dtypes. torch is imported only when a torch view is asked for (a torch tensor given means it is imported
already): everything else works with numpy alone.
"""

from __future__ import annotations

import fnmatch
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

from .manifest import DTYPES, Dtype, Manifest, TensorSpec, byte_length

__all__ = ["DTYPES", "Dtype", "Manifest", "TensorSpec", "apply", "layout", "pack", "views"]

#: Where each dtype comes in safetensors' order: its serializer writes the highest first.
_RANK = {name: i for i, name in enumerate(DTYPES)}
_FROM_NUMPY = {np.dtype(d.numpy): d for d in DTYPES.values() if d.numpy}


# --- What a state_dict holds ----------------------------------------------------------------------------------

def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("torch views and tensors need PyTorch (pip install torch); numpy ones work without "
                          "it") from e
    return torch


def _is_torch(x: object) -> bool:
    # A tensor exists only once torch was imported: asking never imports it.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _named(state: Any, what: str) -> dict[str, Any]:
    """A state_dict's tensors by name: a mapping as it is, a torch module's parameters and buffers themselves
    (``state_dict(keep_vars=True)``, so what is written to them is written to the module)."""
    if isinstance(state, Mapping):
        return dict(state)
    nn = getattr(sys.modules.get("torch"), "nn", None)
    if nn is not None and isinstance(state, nn.Module):
        return dict(state.state_dict(keep_vars=True))
    raise TypeError(f"{what} must be a mapping of names to arrays or tensors, or a torch.nn.Module, not "
                    f"{type(state).__name__}")


def _dtype_of(x: Any) -> Dtype | None:
    """The safetensors dtype of an array or tensor; None when it has none (float128, complex128, ...)."""
    if _is_torch(x):
        torch = sys.modules["torch"]
        return next((d for d in DTYPES.values() if d.torch and getattr(torch, d.torch, None) == x.dtype), None)
    dt = getattr(x, "dtype", None)
    return _FROM_NUMPY.get(dt) if isinstance(dt, np.dtype) else None


def _describe(x: Any) -> str:
    """A value's dtype as its framework and safetensors name it: "torch.bfloat16 (BF16)", "uint16 (U16)"."""
    d = _dtype_of(x)
    return f"{x.dtype} ({d.name if d else 'no safetensors dtype'})"


def _check_array(name: str, x: Any, what: str) -> None:
    if not _is_torch(x) and not isinstance(x, np.ndarray):
        raise ValueError(f"{what} {name!r} is a {type(x).__name__}, not a numpy array or torch tensor")


# --- Layout, copy in, views -----------------------------------------------------------------------------------

def layout(state_dict: Any, *, align: int | None = None,
           metadata: Mapping[str, str] | None = None) -> tuple[Manifest, int]:
    """Lay out STATE_DICT's tensors (a mapping of names to numpy arrays or torch tensors, or a torch module)
    in one arena: the manifest and the bytes it needs.

    By dtype, widest first, then by name, as safetensors' serializer orders them: back to back from offset 0,
    and each at a multiple of its element size, so the arena is a .safetensors data section and every view
    of it is aligned. ALIGN (a power of two) puts every tensor at a multiple of it too, for readers that
    want wider alignment, at the cost of gaps: such an arena is no longer a .safetensors data section.

        manifest, nbytes = layout(model.state_dict())
    """
    if align is not None and (not isinstance(align, int) or align < 1 or align & (align - 1)):
        raise ValueError(f"align must be a power of two, not {align!r}")
    entries: list[tuple[str, Dtype, tuple[int, ...]]] = []
    for name, x in _named(state_dict, "state_dict").items():
        if not isinstance(name, str):
            raise ValueError(f"tensor names are strings, not {name!r}")
        _check_array(name, x, "tensor")
        d = _dtype_of(x)
        if d is None:
            order = " (big-endian: safetensors holds little-endian data)" if getattr(x.dtype, "byteorder", "") == ">" \
                else ""
            raise ValueError(f"tensor {name!r}: dtype {x.dtype} has no safetensors dtype (F64 F32 F16 BF16 F8_* "
                             f"I64 I32 I16 I8 U64 U32 U16 U8 BOOL C64){order}")
        entries.append((name, d, tuple(int(n) for n in x.shape)))
    entries.sort(key=lambda e: (-_RANK[e[1].name], e[0]))
    specs: list[TensorSpec] = []
    offset = 0
    for name, d, shape in entries:
        step = max(d.alignment, align or 1)
        offset += -offset % step
        length = byte_length(d.name, shape, f"tensor {name!r}")
        specs.append(TensorSpec(name, d.name, shape, offset, length))
        offset += length
    m = Manifest(tuple(specs), dict(metadata or {}))
    m.check()
    return m, m.data_bytes


def _nbytes(buffer: Any) -> int:
    if _is_torch(buffer):
        return int(buffer.numel() * buffer.element_size())
    if isinstance(buffer, np.ndarray):
        return int(buffer.nbytes)
    mv = getattr(buffer, "memoryview", None)
    if callable(mv):
        return int(mv().nbytes)
    return memoryview(buffer).nbytes


def _numpy_bytes(buffer: Any) -> npt.NDArray[np.uint8]:
    """BUFFER's bytes as a 1-D uint8 array over the same memory: a SharedBuffer, a numpy array (C-contiguous),
    a CPU torch tensor, or anything with the buffer protocol (bytearray, memoryview, mmap)."""
    if _is_torch(buffer):
        t = buffer.detach()
        if t.device.type != "cpu":
            raise ValueError(f"a numpy view needs host memory; the buffer is on {t.device}: use framework='torch'")
        return _numpy_bytes(_torch_bytes(t).numpy())
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise ValueError("the buffer must be contiguous")
        return buffer.reshape(-1).view(np.uint8)
    mv = getattr(buffer, "memoryview", None)
    view = mv() if callable(mv) else memoryview(buffer)
    if not view.c_contiguous:
        raise ValueError("the buffer must be contiguous")
    return np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view, dtype=np.uint8)


def _torch_bytes(buffer: Any) -> Any:
    """BUFFER's bytes as a 1-D torch.uint8 tensor over the same memory, on the buffer's device."""
    torch = _torch()
    if isinstance(buffer, torch.Tensor):
        if not buffer.is_contiguous():
            raise ValueError("the buffer must be contiguous")
        return buffer.detach().reshape(-1).view(torch.uint8)
    raw = _numpy_bytes(buffer)
    if raw.flags.writeable:
        return torch.from_numpy(raw)
    # A read-only buffer (Agent.open_shared's): torch warns that writing such a tensor is undefined; the views
    # are read from (apply's source), and the reader's buffer says it is read-only (SharedBuffer.writable).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        return torch.from_numpy(raw)


def _view(raw: Any, spec: TensorSpec, framework: str) -> Any:
    d = DTYPES[spec.dtype]
    chunk = raw[spec.offset:spec.offset + spec.length]
    if framework == "numpy":
        if d.numpy_view is None:
            raise ValueError(f"tensor {spec.name!r}: {spec.dtype} packs elements into bytes, which have no "
                             f"numpy view; its bytes are [{spec.offset}, +{spec.length}) of the buffer")
        return chunk.view(np.dtype(d.numpy_view)).reshape(spec.shape)
    torch = _torch()
    dt = getattr(torch, d.torch, None) if d.torch else None
    if dt is None:
        raise ValueError(f"tensor {spec.name!r}: {spec.dtype} has no torch dtype"
                         + (f" in torch {torch.__version__} (torch.{d.torch})" if d.torch else ""))
    try:
        return chunk.view(dt).view(spec.shape)
    except RuntimeError as e:
        raise ValueError(f"tensor {spec.name!r}: torch cannot view {spec.dtype} at offset {spec.offset} in "
                         f"place ({e})") from e


@overload
def views(buffer: Any, manifest: Manifest, framework: Literal["numpy"] = "numpy") -> dict[str, npt.NDArray[Any]]:
    ...


@overload
def views(buffer: Any, manifest: Manifest, framework: Literal["torch"]) -> dict[str, Any]:
    ...


def views(buffer: Any, manifest: Manifest, framework: str = "numpy") -> dict[str, Any]:
    """``{name: view}`` of MANIFEST's tensors over BUFFER, in its order, none a copy: writing one writes the
    buffer. BUFFER is a :class:`~conduit.SharedBuffer`, a numpy array, a torch tensor (any device; torch views
    only, for one not on the CPU) or any writable bytes (bytearray, memoryview, mmap).

    FRAMEWORK ``"numpy"``: numpy arrays, BF16 and F8_* as their raw bits (uint16, uint8); ``"torch"``: torch
    tensors of the real dtypes. A manifest that does not fit the buffer is refused, naming the tensor.

        w = views(buf, manifest, "torch")["model.embed.weight"]
    """
    if framework not in ("numpy", "torch"):
        raise ValueError(f"framework must be 'numpy' or 'torch', not {framework!r}")
    manifest.check(_nbytes(buffer))
    raw = _numpy_bytes(buffer) if framework == "numpy" else _torch_bytes(buffer)
    return {t.name: _view(raw, t, framework) for t in manifest.tensors}


def _copy(dst: Any, src: Any) -> None:
    """SRC's elements into DST, in place, whichever of numpy and torch each is (checked alike already)."""
    if _is_torch(dst):
        torch = sys.modules["torch"]
        if not _is_torch(src):
            src = torch.as_tensor(np.asarray(src))
            if src.dtype != dst.dtype:  # numpy's raw bits of a dtype it lacks (uint16 for bfloat16)
                src = src.view(dst.dtype)
        with torch.no_grad():
            dst.copy_(src)
    else:
        np.copyto(dst, src.detach().cpu().numpy() if _is_torch(src) else src, casting="no")


def pack(state_dict: Any, buffer: Any, manifest: Manifest) -> None:
    """Copy STATE_DICT's tensors into BUFFER where MANIFEST says (the one copy in; what :func:`layout` made
    for the same state_dict). Every name, dtype and shape is checked first: a state_dict that is not the
    manifest's (a tensor missing or extra, another dtype or shape) writes nothing and raises ValueError
    naming the tensors. A numpy array for a BF16 or F8_* tensor is taken as its raw bits (uint16, uint8)."""
    named = _named(state_dict, "state_dict")
    manifest.check(_nbytes(buffer))
    problems: dict[str, list[str]] = {}
    for n in sorted(set(named) - {t.name for t in manifest.tensors}):
        problems[n] = ["in the state_dict, not in the manifest"]
    for t in manifest.tensors:
        if t.name not in named:
            problems[t.name] = ["in the manifest, not in the state_dict"]
            continue
        x = named[t.name]
        _check_array(t.name, x, "tensor")
        d = DTYPES[t.dtype]
        ok = (_dtype_of(x) == d if _is_torch(x) or d.numpy_view is None
              else x.dtype == np.dtype(d.numpy_view))
        if not ok:
            problems.setdefault(t.name, []).append(f"dtype {_describe(x)}, the manifest's {t.dtype}")
        if tuple(x.shape) != t.shape:
            problems.setdefault(t.name, []).append(f"shape {list(x.shape)}, the manifest's {list(t.shape)}")
    if problems:
        raise ValueError(_nothing("written", problems))
    torch_side = _is_torch(buffer) or any(_is_torch(x) for x in named.values())
    dst = views(buffer, manifest, "torch") if torch_side else views(buffer, manifest, "numpy")
    for t in manifest.tensors:
        _copy(dst[t.name], named[t.name])


def _nothing(done: str, problems: dict[str, list[str]], hint: str = "") -> str:
    """One message for every tensor that does not match (the first 10 of them), saying what differs."""
    shown = [f"{n!r}: {', '.join(what)}" for n, what in list(problems.items())[:10]]
    more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
    count = "1 tensor does" if len(problems) == 1 else f"{len(problems)} tensors do"
    return f"nothing {done}: {count} not match: {'; '.join(shown)}{more}{hint}"


def _address(x: Any) -> int:
    """Where X's first element is in this process's memory (0 for a tensor off the CPU)."""
    if _is_torch(x):
        return int(x.data_ptr()) if x.device.type == "cpu" else 0
    return int(x.__array_interface__["data"][0])


def _same_memory(a: Any, b: Any) -> bool:
    """True when A and B are views of the same bytes (an adopted tensor and the update's view of it)."""
    nbytes = (lambda x: x.numel() * x.element_size() if _is_torch(x) else x.nbytes)
    return _address(a) != 0 and _address(a) == _address(b) and nbytes(a) == nbytes(b)


def _checked(update: Any, state_dict: Any, tensors: str | Iterable[str] | None, done: str, *,
             writable: bool) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The names of UPDATE selected by TENSORS, each checked against STATE_DICT's tensor of that name (present,
    same dtype and shape, writable if WRITABLE): ValueError naming every one that is not, "nothing DONE"."""
    source = _named(update, "update")
    target = _named(state_dict, "state_dict")
    if tensors is None:
        names = list(source)
    else:
        patterns = [tensors] if isinstance(tensors, str) else list(tensors)
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in source)]
        if unmatched:
            raise ValueError(f"nothing {done}: {', '.join(map(repr, unmatched))} select no tensor of the update")
        names = [n for n in source if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    problems: dict[str, list[str]] = {}
    raw_bits = False
    for n in names:
        if n not in target:
            problems[n] = ["not in the state_dict"]
            continue
        src, dst = source[n], target[n]
        _check_array(n, src, "update tensor")
        _check_array(n, dst, "state_dict tensor")
        d_src = _dtype_of(src)
        if d_src is None or d_src != _dtype_of(dst):
            raw_bits = raw_bits or (not _is_torch(src) and _is_torch(dst))
            problems.setdefault(n, []).append(f"dtype {_describe(src)} in the update, {_describe(dst)} in the "
                                              "state_dict")
        if tuple(src.shape) != tuple(dst.shape):
            problems.setdefault(n, []).append(f"shape {list(src.shape)} in the update, {list(dst.shape)} in the "
                                              "state_dict")
        if writable and isinstance(dst, np.ndarray) and not dst.flags.writeable and not _same_memory(dst, src):
            problems.setdefault(n, []).append("the state_dict's array is read-only")
    if problems:
        hint = f" (numpy views of BF16 and F8_* hold raw bits: {done} views(..., 'torch') to torch tensors)"
        raise ValueError(_nothing(done, problems, hint if raw_bits else ""))
    return names, source, target


def apply(update: Any, state_dict: Any, tensors: str | Iterable[str] | None = None) -> list[str]:
    """Copy UPDATE's tensors (``{name: view}`` from :func:`views`, or any state_dict) into STATE_DICT's tensors
    of the same names, in place: a torch module's parameters and buffers keep their storage (``data_ptr()``),
    a numpy array its memory. TENSORS selects names or globs (``"model.layers.*.mlp.*"``) of UPDATE; each must
    select something. A tensor that already is the update's memory (:func:`adopt`) is checked, not copied.

    Every selected name, dtype and shape is checked before anything is written: a name STATE_DICT lacks, a
    dtype or shape that differs, a read-only array writes nothing and raises ValueError naming each tensor
    and what differs. numpy views of BF16/F8_* hold raw bits (uint16/uint8), which are not a torch model's
    bfloat16: apply torch views to a torch model. Returns the names applied, in UPDATE's order.

        apply(views(buf, manifest, "torch"), model, tensors=["lm_head.*"])
    """
    names, source, target = _checked(update, state_dict, tensors, "applied", writable=True)
    for n in names:
        if not _same_memory(target[n], source[n]):
            _copy(target[n], source[n])
    return names


def adopt(update: Any, module: Any, tensors: str | Iterable[str] | None = None) -> list[str]:
    """Make MODULE's parameters and buffers (a torch module) of UPDATE's names views of UPDATE's torch tensors
    (``Parameter.data`` rebound: the same Parameter objects, their storage now UPDATE's): nothing is copied,
    and what later lands in UPDATE's memory is what the module holds. Checked as :func:`apply` checks, nothing
    rebound on a mismatch. Returns the names adopted."""
    nn = getattr(sys.modules.get("torch"), "nn", None)
    if nn is None or not isinstance(module, nn.Module):
        raise TypeError(f"adopt takes a torch.nn.Module, not {type(module).__name__}: numpy arrays cannot be "
                        "rebound; apply() copies into them")
    names, source, target = _checked(update, module, tensors, "adopted", writable=False)
    not_torch = [n for n in names if not _is_torch(source[n])]
    if not_torch:
        raise TypeError(f"nothing adopted: the update's {not_torch[0]!r} is not a torch tensor (take "
                        "views(..., 'torch'))")
    for n in names:
        target[n].data = source[n]
    return names
