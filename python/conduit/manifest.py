"""A region's manifest: the named tensors in it, in safetensors' vocabulary (dtype names, shapes, byte ranges
from the region's start), plus string metadata. It is the agent's type (api/include/conduit/api/manifest.h)
as this side holds it: the same REST form, the same checks, so a manifest the SDK accepts is one the agent
accepts, and a refusal names the tensor as the agent's does (``tensors[3] (model.embed.weight): ...``).

    m = Manifest.from_json(body, region_bytes=region.bytes)
    m.find("model.embed.weight")         # TensorSpec(name, dtype, shape, offset, length)

Pure data: no numpy, no torch. conduit.tensors lays out, fills and views buffers with it.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DTYPES", "MAX_SCATTER_OPS", "PLACEMENT_KEY", "Dtype", "Manifest", "Placement", "TensorSpec", "byte_length",
           "dtype_bits", "plan_subset"]


@dataclass(frozen=True)
class Dtype:
    """One of safetensors' dtypes: its name, bits per element, and how numpy and torch hold it.

    ``numpy``: the numpy dtype of its elements, None where numpy has none. ``numpy_view``: what a numpy view
    holds: that dtype, or the raw bits as unsigned integers of the same width (BF16 -> uint16, F8_* ->
    uint8), None for the sub-byte dtypes, which have no per-element view. ``torch``: the attribute of the
    ``torch`` module, None where torch has no dtype of the same shape semantics."""

    name: str
    bits: int
    numpy: str | None
    numpy_view: str | None
    torch: str | None

    @property
    def alignment(self) -> int:
        """Bytes an element is aligned to: its size (1 for the sub-byte dtypes)."""
        return max(1, self.bits // 8)


def _dt(name: str, bits: int, numpy: str | None, torch: str | None, raw: str | None = None) -> Dtype:
    return Dtype(name, bits, numpy, numpy or raw, torch)


#: safetensors' dtypes in the order of its ``Dtype`` enum (safetensors/src/tensor.rs; the C++ table in
#: api/src/manifest.cpp is the same): its serializer writes tensors by this order, last first, then by name.
#: torch's float4_e2m1fn_x2 packs two F4 values per element (its shape is half of safetensors'), so F4 has no
#: torch dtype here.
DTYPES: dict[str, Dtype] = {d.name: d for d in [
    _dt("BOOL", 8, "bool", "bool"),
    _dt("F4", 4, None, None),
    _dt("F6_E2M3", 6, None, None),
    _dt("F6_E3M2", 6, None, None),
    _dt("U8", 8, "uint8", "uint8"),
    _dt("I8", 8, "int8", "int8"),
    _dt("F8_E5M2", 8, None, "float8_e5m2", raw="uint8"),
    _dt("F8_E4M3", 8, None, "float8_e4m3fn", raw="uint8"),
    _dt("F8_E8M0", 8, None, "float8_e8m0fnu", raw="uint8"),
    _dt("F8_E4M3FNUZ", 8, None, "float8_e4m3fnuz", raw="uint8"),
    _dt("F8_E5M2FNUZ", 8, None, "float8_e5m2fnuz", raw="uint8"),
    _dt("I16", 16, "int16", "int16"),
    _dt("U16", 16, "uint16", "uint16"),
    _dt("F16", 16, "float16", "float16"),
    _dt("BF16", 16, None, "bfloat16", raw="uint16"),
    _dt("I32", 32, "int32", "int32"),
    _dt("U32", 32, "uint32", "uint32"),
    _dt("F32", 32, "float32", "float32"),
    _dt("C64", 64, "complex64", "complex64"),
    _dt("F64", 64, "float64", "float64"),
    _dt("I64", 64, "int64", "int64"),
    _dt("U64", 64, "uint64", "uint64"),
]}

_METADATA_KEY = "__metadata__"
_U64_MAX = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1

#: The __metadata__ key a .safetensors header carries the placements under (Manifest::kPlacementKey): a JSON
#: string {tensor name: {globalShape, start}}, written only when a tensor has one; reserved in a manifest's
#: own metadata.
PLACEMENT_KEY = "conduit.placement"


def dtype_bits(dtype: str) -> int | None:
    """Bits per element of a safetensors dtype name ("BF16" -> 16); None for a name safetensors does not
    define (the names are upper case: "f32" is not one)."""
    d = DTYPES.get(dtype)
    return d.bits if d else None


@dataclass(frozen=True)
class Placement:
    """Where a rank's tensor sits in the whole (docs/reshard.md): the row-major sub-box [START, START + shape)
    of a tensor of GLOBAL_SHAPE, the TensorSpec's own shape being the slice's extent.

        Placement(global_shape=(4096, 4096), start=(1024, 0))   # rows 1024.. of a TP4 row split, rank 1
    """

    global_shape: tuple[int, ...]
    start: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_shape", tuple(self.global_shape))
        object.__setattr__(self, "start", tuple(self.start))

    def to_json(self) -> dict[str, Any]:
        return {"globalShape": list(self.global_shape), "start": list(self.start)}

    @classmethod
    def from_json(cls, j: Any, path: str) -> Placement:
        """{globalShape, start} read strictly, errors naming PATH as the agent's do."""
        if not isinstance(j, Mapping):
            raise ValueError(f"{path}: must be an object")
        _only(j, path, ("globalShape", "start"))
        for key in ("globalShape", "start"):
            if key not in j:
                raise ValueError(f"{path}.{key}: is required")
            if not isinstance(j[key], list):
                raise ValueError(f"{path}.{key}: must be an array")
        return cls(_dimensions(j["globalShape"], f"{path}.globalShape"), _dimensions(j["start"], f"{path}.start"))


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a manifest: NAME (a free string), DTYPE (safetensors' name), SHAPE (() is 0-d, a 0
    anywhere an empty tensor), its bytes [OFFSET, OFFSET + LENGTH) from the region's start, and for a rank's
    slice of a larger tensor its PLACEMENT (None: the whole tensor)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int
    placement: Placement | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))  # torch.Size or a list compares as the tuple

    @property
    def global_shape(self) -> tuple[int, ...]:
        """The whole tensor's shape: the placement's, or the shape."""
        return self.placement.global_shape if self.placement else self.shape

    @property
    def start(self) -> tuple[int, ...]:
        """Where this slice starts in the whole tensor: the placement's, or zeros."""
        return self.placement.start if self.placement else (0,) * len(self.shape)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                               "offset": self.offset, "length": self.length}
        if self.placement is not None:
            out["placement"] = self.placement.to_json()
        return out


@dataclass(frozen=True)
class Manifest:
    """The named tensors of a region, by offset, and string metadata: the agent's manifest (its REST form is
    :meth:`to_json`). The checks are the agent's (``Manifest::check``), so a manifest this side accepts is
    one the agent accepts, and a refusal names the tensor (``tensors[3] (model.embed.weight): ...``)."""

    tensors: tuple[TensorSpec, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)

    # The agent's bounds (Manifest::kMax...).
    MAX_TENSORS = 1 << 20
    MAX_NAME_BYTES = 1024
    MAX_RANK = 16
    MAX_METADATA_ENTRIES = 1024
    MAX_METADATA_BYTES = 1 << 20

    def __post_init__(self) -> None:
        # A list is what callers have at hand; the manifest keeps a tuple, so it stays as checked.
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def data_bytes(self) -> int:
        """Where the last tensor ends (0 without tensors): the bytes a region needs for them."""
        return max((t.offset + t.length for t in self.tensors), default=0)

    def find(self, name: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.name == name), None)

    def check(self, region_bytes: int | None = None) -> None:
        """ValueError naming the first tensor that cannot be right: a name empty, over 1024 bytes, reserved
        or given twice; a dtype safetensors does not define; a length that is not what dtype and shape take;
        ranges not sorted by offset, overlapping, or (with REGION_BYTES) past the region's end."""
        if len(self.tensors) > self.MAX_TENSORS:
            raise ValueError(f"tensors: at most {self.MAX_TENSORS}")
        names: set[str] = set()
        for i, t in enumerate(self.tensors):
            at = _label(i, t.name)
            if not isinstance(t.name, str) or not 1 <= len(t.name.encode()) <= self.MAX_NAME_BYTES:
                raise ValueError(f"{at}: the name must be 1 to {self.MAX_NAME_BYTES} bytes")
            if t.name == _METADATA_KEY:
                raise ValueError(f"{at}: the name is reserved for a .safetensors file's metadata")
            if t.name in names:
                raise ValueError(f"{at}: the name is given twice")
            names.add(t.name)
            if not isinstance(t.dtype, str) or t.dtype not in DTYPES:
                raise ValueError(f"{at}: dtype {json.dumps(t.dtype)} is not one of safetensors' (F32, BF16, I8, "
                                 "...)")
            if len(t.shape) > self.MAX_RANK:
                raise ValueError(f"{at}: more than {self.MAX_RANK} dimensions")
            if not all(_natural(n) for n in (*t.shape, t.offset, t.length)):
                raise ValueError(f"{at}: shape, offset and length must be integers from 0 to 2^64-1")
            length = byte_length(t.dtype, t.shape, at)
            if length != t.length:
                raise ValueError(f"{at}: length {t.length} is not what {t.dtype} {_shape_text(t.shape)} takes "
                                 f"({length} bytes)")
            _check_placement(t, at)
            if region_bytes is not None and (t.offset > region_bytes or t.length > region_bytes - t.offset):
                raise ValueError(f"{at}: bytes [{t.offset}, +{t.length}) are outside the {region_bytes}-byte "
                                 "region")
            if i > 0:
                before = self.tensors[i - 1]
                if t.offset < before.offset + before.length:
                    raise ValueError(f"{at}: starts at {t.offset}, inside or before {_label(i - 1, before.name)}, "
                                     f"which ends at {before.offset + before.length} (tensors are listed by "
                                     "offset and do not overlap)")
        if PLACEMENT_KEY in self.metadata:
            raise ValueError(f"metadata.{PLACEMENT_KEY}: the key is reserved for the placements a .safetensors file "
                             "carries")
        if len(self.metadata) > self.MAX_METADATA_ENTRIES:
            raise ValueError(f"metadata: at most {self.MAX_METADATA_ENTRIES} entries")
        for k, v in self.metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"metadata.{k}: keys and values must be strings")
        if sum(len(k.encode()) + len(v.encode()) for k, v in self.metadata.items()) > self.MAX_METADATA_BYTES:
            raise ValueError(f"metadata: more than {self.MAX_METADATA_BYTES} bytes")

    def to_json(self) -> dict[str, Any]:
        """``{"tensors": [{name, dtype, shape, offset, length, placement?}], "metadata": {str: str}}``, as REST
        bodies carry it."""
        return {"tensors": [t.to_json() for t in self.tensors], "metadata": dict(sorted(self.metadata.items()))}

    @classmethod
    def from_json(cls, body: Any, region_bytes: int | None = None) -> Manifest:
        """The REST form read strictly (unknown fields, a float for an integer, a non-string metadata value are
        refused, each error naming its field) and checked as :meth:`check` does."""
        if not isinstance(body, Mapping):
            raise ValueError("the manifest must be a JSON object")
        _only(body, "", ("tensors", "metadata"))
        items = body.get("tensors")
        if items is None:
            raise ValueError("tensors: is required")
        if not isinstance(items, list):
            raise ValueError("tensors: must be an array")
        if len(items) > cls.MAX_TENSORS:
            raise ValueError(f"tensors: at most {cls.MAX_TENSORS}")
        meta = body.get("metadata", {})
        if not isinstance(meta, Mapping):
            raise ValueError("metadata: must be an object")
        for k, v in meta.items():
            if not isinstance(v, str):
                raise ValueError(f"metadata.{k}: must be a string")
        m = cls(tuple(_tensor_from_json(t, f"tensors[{i}]") for i, t in enumerate(items)), dict(meta))
        m.check(region_bytes)
        return m

    def safetensors_header(self) -> bytes:
        """The .safetensors header (the JSON after the 8-byte size) of a file whose data section is the
        region's first :attr:`data_bytes`, padded with spaces to a multiple of 8 bytes as the agent pads it,
        the placements under ``__metadata__``'s :data:`PLACEMENT_KEY`. ValueError when the tensors are not back
        to back from 0 (a region may leave gaps, a file may not)."""
        doc: dict[str, Any] = {}
        metadata = dict(self.metadata)
        placements = {t.name: t.placement.to_json() for t in self.tensors if t.placement is not None}
        if placements:
            metadata[PLACEMENT_KEY] = json.dumps(placements, separators=(",", ":"), ensure_ascii=False)
        if metadata:
            doc[_METADATA_KEY] = dict(sorted(metadata.items()))
        expected = 0
        for t in self.tensors:
            if t.offset != expected:
                raise ValueError(f"tensor {json.dumps(t.name)} starts at {t.offset}, after a gap from {expected}: a "
                                 ".safetensors file holds its tensors back to back from offset 0")
            expected = t.offset + t.length
            doc[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.offset, expected]}
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        return text + b" " * (-len(text) % 8)


def _label(i: int, name: object) -> str:
    shown = name if isinstance(name, str) else repr(name)
    return f"tensors[{i}] ({shown if len(shown) <= 128 else shown[:128] + '...'})"


def _natural(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= _U64_MAX


def _shape_text(shape: Sequence[int]) -> str:
    return json.dumps(list(shape), separators=(",", ":"))


def byte_length(dtype: str, shape: Sequence[int], at: str = "tensor") -> int:
    """The bytes a tensor of DTYPE (a safetensors name) and SHAPE takes: elements x bits / 8. ValueError,
    starting with AT, for an unknown dtype, a count past 64 bits, or sub-byte elements that end mid-byte."""
    bits = dtype_bits(dtype)
    if bits is None:
        raise ValueError(f"{at}: dtype {json.dumps(dtype)} is not one of safetensors' (F32, BF16, I8, ...)")
    elements = 1
    for n in shape:
        elements *= n
        if elements > _U64_MAX:
            raise ValueError(f"{at}: shape overflows 64 bits")
    if elements * bits > _U64_MAX:
        raise ValueError(f"{at}: shape overflows 64 bits")
    if elements * bits % 8:
        raise ValueError(f"{at}: {dtype} elements end mid-byte: {elements} of them")
    return elements * bits // 8


def _check_placement(t: TensorSpec, at: str) -> None:
    """Manifest::check's placement rules, with its messages."""
    p = t.placement
    if p is None:
        return
    if not isinstance(p, Placement):
        raise ValueError(f"{at}: placement must be a Placement or None")
    if not all(_natural(n) for n in (*p.global_shape, *p.start)):
        raise ValueError(f"{at}: placement: globalShape and start must be integers from 0 to 2^64-1")
    if len(p.global_shape) != len(t.shape) or len(p.start) != len(t.shape):
        raise ValueError(f"{at}: placement: globalShape {_shape_text(p.global_shape)} and start "
                         f"{_shape_text(p.start)} must have as many dimensions as shape {_shape_text(t.shape)}")
    for d, (n, s, g) in enumerate(zip(t.shape, p.start, p.global_shape)):
        if n > g or s > g - n:
            raise ValueError(f"{at}: placement: start {_shape_text(p.start)} + shape {_shape_text(t.shape)} passes "
                             f"globalShape {_shape_text(p.global_shape)} in dimension {d}")
    if DTYPES[t.dtype].bits % 8 and (p.global_shape != t.shape or any(p.start)):
        raise ValueError(f"{at}: placement: a {t.dtype} tensor is placed only whole (its elements share bytes): "
                         "globalShape must be its shape and start all 0")
    byte_length(t.dtype, p.global_shape, f"{at}: placement: globalShape")


def _dimensions(dims: list[Any], path: str) -> tuple[int, ...]:
    """A shape's dimensions as the agent reads them: integers in [0, 2^63)."""
    if not all(_natural(d) and d <= _I64_MAX for d in dims):
        raise ValueError(f"{path}: each dimension must be an integer in [0, 2^63)")
    return tuple(dims)


def _only(obj: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
    for k in obj:
        if k not in known:
            raise ValueError(f"{path + '.' if path else ''}{str(k)[:61]}: unknown field")


def _tensor_from_json(j: Any, path: str) -> TensorSpec:
    if not isinstance(j, Mapping):
        raise ValueError(f"{path}: must be an object")
    _only(j, path, ("name", "dtype", "shape", "offset", "length", "placement"))
    for key in ("name", "dtype", "shape", "offset", "length"):
        if key not in j:
            raise ValueError(f"{path}.{key}: is required")
    for key, most in (("name", Manifest.MAX_NAME_BYTES), ("dtype", 16)):
        v = j[key]
        if not isinstance(v, str):
            raise ValueError(f"{path}.{key}: must be a string, got {json.dumps(v)[:64]}")
        if not v:
            raise ValueError(f"{path}.{key}: must not be empty")
        if len(v.encode()) > most:
            raise ValueError(f"{path}.{key}: is longer than {most} characters")
    if not isinstance(j["shape"], list):
        raise ValueError(f"{path}.shape: must be an array")
    if not all(_natural(d) for d in j["shape"]):
        raise ValueError(f"{path}.shape: each dimension must be a non-negative integer")
    for key in ("offset", "length"):
        if not _natural(j[key]):
            raise ValueError(f"{path}.{key}: must be a non-negative integer")
    placement = None
    if "placement" in j:
        placement = Placement.from_json(j["placement"], f"{path}.placement")
    return TensorSpec(j["name"], j["dtype"], tuple(j["shape"]), j["offset"], j["length"], placement)




#: The most ops one scatter batch takes (kMaxScatterOps in api/include/conduit/api/transfer.h).
MAX_SCATTER_OPS = 65536


def _quoted(name: str) -> str:
    return json.dumps(name if len(name) <= 128 else name[:128] + "...")


def _described(t: TensorSpec) -> str:
    return f"{t.dtype} {_shape_text(t.shape)}"


def plan_subset(source: Manifest, target: Manifest, patterns: Sequence[str]) -> list[tuple[int, int, int]]:
    """The scatter ops ``(source_offset, target_offset, length)`` that move SOURCE's tensors selected by
    PATTERNS (names or fnmatch globs, which cross dots: ``"model.layers.0.*"``) into the same tensors of
    TARGET: one per tensor in source order, runs back to back on both sides merged. The planner of
    api/tensor_subset.h, with its errors (ValueError naming the pattern or the tensor): no patterns, a
    pattern matching no source tensor, a tensor missing in the target or of another dtype or shape there,
    nothing to move (only empty tensors), more than MAX_SCATTER_OPS ops.

        plan_subset(a.manifest("model"), b.manifest("model"), ["lm_head.weight"])   # [(4096, 4096, 1024)]
    """
    patterns = list(patterns)
    if not patterns:
        raise ValueError("tensors: name at least one tensor (a name or a glob)")
    by_name = {t.name: t for t in target.tensors}
    used = [False] * len(patterns)
    ops: list[tuple[int, int, int]] = []
    for t in source.tensors:
        selected = False
        for i, pattern in enumerate(patterns):
            if fnmatch.fnmatchcase(t.name, pattern):
                selected = used[i] = True
        if not selected:
            continue
        there = by_name.get(t.name)
        if there is None:
            raise ValueError(f"tensor {_quoted(t.name)} is not in the target region's manifest")
        if there.dtype != t.dtype or list(there.shape) != list(t.shape):
            raise ValueError(f"tensor {_quoted(t.name)} is {_described(t)} in the source but "
                             f"{_described(there)} in the target")
        if t.length == 0:
            continue  # matched, and nothing to move
        if ops and ops[-1][0] + ops[-1][2] == t.offset and ops[-1][1] + ops[-1][2] == there.offset:
            ops[-1] = (ops[-1][0], ops[-1][1], ops[-1][2] + t.length)
            continue
        if len(ops) == MAX_SCATTER_OPS:
            raise ValueError(f"tensors: the subset takes more than {MAX_SCATTER_OPS} separate ranges (at tensor "
                             f"{_quoted(t.name)}): name fewer tensors or move the region")
        ops.append((t.offset, there.offset, t.length))
    for i, pattern in enumerate(patterns):
        if not used[i]:
            raise ValueError(f"tensors[{i}]: {_quoted(pattern)} matches no tensor in the source region's manifest")
    if not ops:
        raise ValueError("tensors: the selected tensors are all empty: there is nothing to move")
    return ops
