"""Reading a caller's buffer object into an `OperandBuffer`: the ONE place that looks at its type.

Accepted: torch tensors, any ``__cuda_array_interface__`` or ``__dlpack__`` producer, and a bare
int device address (whose geometry is the declared tensor's). The reader for a type is chosen
once per type and cached; nothing below this module branches on what the caller passed.

Device codes in `OperandBuffer.device`: ``-1`` host, ``k >= 0`` CUDA device ``k``,
`DEVICE_CUDA_ANY` a CUDA device of unknown ordinal (a CUDA-array-interface producer),
`DEVICE_UNKNOWN` no information (a bare address).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

from pygraph.execution.dlpack import DLTensor
from pygraph.execution.errors import (
    DuplicateOperandError,
    OperandAddressError,
    OperandDeviceError,
    OperandDtypeError,
    OperandMissingError,
    OperandTypeError,
)
from pygraph.execution.variant_pack import (
    DEVICE_CUDA_ANY,
    DEVICE_HOST,
    DEVICE_UNKNOWN,
    OperandBuffer,
    OperandLayout,
    VariantPack,
)
from pygraph.ir.dtypes import data_type, to_data_type

__all__ = ["ITEMSIZE", "READERS", "Reader", "device_matches", "nbytes", "normalize", "reader_for"]

Reader = Callable[[Any, OperandBuffer], OperandBuffer]

_new = tuple.__new__

ITEMSIZE: dict[data_type, float] = {
    data_type.FLOAT: 4,
    data_type.DOUBLE: 8,
    data_type.HALF: 2,
    data_type.BFLOAT16: 2,
    data_type.INT8: 1,
    data_type.UINT8: 1,
    data_type.INT32: 4,
    data_type.INT64: 8,
    data_type.BOOLEAN: 1,
    data_type.FP8_E4M3: 1,
    data_type.FP8_E5M2: 1,
    data_type.FP8_E8M0: 1,
    data_type.FP4_E2M1: 0.5,
    data_type.INT4: 0.5,
}


def nbytes(buf: OperandBuffer) -> int | None:
    """Bytes spanned by ``buf`` (None for a bare address, whose extent is unknown)."""
    if buf.device == DEVICE_UNKNOWN:
        return None
    shape = buf.shape
    if 0 in shape:
        return 0
    span = 1
    for d, s in zip(shape, buf.stride):
        span += (d - 1) * s
    return int(span * ITEMSIZE.get(buf.dtype, 1))


def device_matches(a: int, b: int) -> bool:
    if a == b or DEVICE_UNKNOWN in (a, b):
        return True
    return DEVICE_CUDA_ANY in (a, b) and a != DEVICE_HOST and b != DEVICE_HOST


# --- torch (duck-typed: nothing here imports torch) ----------------------------------------------


# torch dtype -> ours, filled as dtypes are first read. A plain dict (not one with __missing__):
# the per-call subscript stays the interpreter's specialised dict lookup; an unseen dtype is a
# KeyError there, sending the call to `_checked`, whose reader fills the entry.
_TORCH_DT: dict[Any, data_type] = {}


def _torch_dtype(dtype: Any) -> data_type:
    found = _TORCH_DT.get(dtype)
    if found is None:
        found = _TORCH_DT[dtype] = to_data_type(dtype)
    return found


# torch.Tensor itself once a buffer of that exact type has been seen: `normalize` reads it inline.
# (Subclasses go through READERS like any other type.)
_TORCH_TENSOR: type | None = None


def _read_torch(t: Any, decl: OperandBuffer) -> OperandBuffer:
    return _new(OperandBuffer, (t.data_ptr(), t.shape, t.stride(), _torch_dtype(t.dtype), t.get_device()))


def _is_torch_tensor_type(kind: type) -> bool:
    return any(base.__module__ == "torch" and base.__name__ == "Tensor" for base in kind.__mro__)


# --- a bare address --------------------------------------------------------------------------------


def _read_address(address: int, decl: OperandBuffer) -> OperandBuffer:
    # Device addresses are 64-bit: a larger int would fail where the pointer array is packed
    # (`VariantPack.address`) or be truncated where it is handed to a kernel. 2**64 as a literal: one
    # chained comparison per call, no global lookup (this runs per bare-int operand of every call).
    if 0 < address < 0x1_0000_0000_0000_0000:
        return _new(OperandBuffer, (address, decl.shape, decl.stride, decl.dtype, DEVICE_UNKNOWN))
    if address > 0:
        raise ValueError(f"bare address {address} ({address:#x}) does not fit 64 bits; addresses are < 2**64")
    raise ValueError(f"bare address {address} cannot be a buffer's (null or negative); addresses are > 0")


# --- __cuda_array_interface__ ---------------------------------------------------------------------

_TYPESTR: dict[str, data_type] = {
    "f2": data_type.HALF,
    "f4": data_type.FLOAT,
    "f8": data_type.DOUBLE,
    "i1": data_type.INT8,
    "u1": data_type.UINT8,
    "i4": data_type.INT32,
    "i8": data_type.INT64,
    "b1": data_type.BOOLEAN,
}


def _typestr_dtype(typestr: str) -> data_type:
    found = _TYPESTR.get(typestr[1:]) if typestr[:1] in "<|=" else None
    if found is None:
        raise TypeError(f"__cuda_array_interface__ typestr {typestr!r} has no pygraph.data_type counterpart")
    return found


def _read_cai(obj: Any, decl: OperandBuffer) -> OperandBuffer:
    cai = obj.__cuda_array_interface__
    shape = tuple(cai["shape"])
    dtype = _typestr_dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.append(acc)
            acc *= d
        stride = tuple(reversed(stride))
    else:
        item = int(ITEMSIZE[dtype])
        stride = tuple(s // item for s in strides)
    return _new(OperandBuffer, (int(cai["data"][0]), shape, stride, dtype, DEVICE_CUDA_ANY))


# --- __dlpack__ (read through the capsule's DLTensor; the producer keeps the memory) ---------------


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)

# (type code, bits) -> ours. Codes per dlpack.h: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool,
# 10 float8_e4m3fn, 12 float8_e5m2, 14 float8_e8m0fnu, 17 float4_e2m1fn.
_DL_DTYPES: dict[tuple[int, int], data_type] = {
    (0, 8): data_type.INT8,
    (0, 32): data_type.INT32,
    (0, 64): data_type.INT64,
    (1, 8): data_type.UINT8,
    (1, 1): data_type.BOOLEAN,
    (2, 16): data_type.HALF,
    (2, 32): data_type.FLOAT,
    (2, 64): data_type.DOUBLE,
    (4, 16): data_type.BFLOAT16,
    (6, 8): data_type.BOOLEAN,
    (10, 8): data_type.FP8_E4M3,
    (12, 8): data_type.FP8_E5M2,
    (14, 8): data_type.FP8_E8M0,
    (17, 4): data_type.FP4_E2M1,
}
# DLDeviceType: 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed.
_DL_HOST_TYPES = (1, 3)
_DL_CUDA_TYPES = (2, 13)


def _read_dlpack(obj: Any, decl: OperandBuffer) -> OperandBuffer:
    capsule = obj.__dlpack__()
    address = _capsule_pointer(capsule, b"dltensor")
    # DLManagedTensor starts with its DLTensor.
    dl = DLTensor.from_address(address)
    ndim = dl.ndim
    shape = tuple(dl.shape[i] for i in range(ndim))
    if dl.strides:
        stride = tuple(dl.strides[i] for i in range(ndim))
    else:
        acc, rev = 1, []
        for d in reversed(shape):
            rev.append(acc)
            acc *= d
        stride = tuple(reversed(rev))
    key = (dl.dtype.code, dl.dtype.bits)
    dtype = _DL_DTYPES.get(key)
    if dtype is None or dl.dtype.lanes != 1:
        raise TypeError(
            f"DLPack dtype (code {key[0]}, bits {key[1]}, lanes {dl.dtype.lanes}) has no pygraph.data_type"
        )
    dev_type = dl.device.device_type
    if dev_type in _DL_HOST_TYPES:
        device = DEVICE_HOST
    elif dev_type in _DL_CUDA_TYPES:
        device = dl.device.device_id
    else:
        raise TypeError(f"DLPack device type {dev_type} is neither host nor CUDA")
    pointer = (dl.data or 0) + dl.byte_offset
    del dl, capsule  # the unconsumed capsule releases its DLManagedTensor; the producer keeps the memory
    return _new(OperandBuffer, (pointer, shape, stride, dtype, device))


# --- per-type cache ------------------------------------------------------------------------------

READERS: dict[type, Reader] = {int: _read_address}


def reader_for(obj: Any) -> Reader:
    """The reader for objects of ``obj``'s type (cached per type); TypeError when it is not a buffer."""
    kind = type(obj)
    reader = READERS.get(kind)
    if reader is not None:
        return reader
    if _is_torch_tensor_type(kind):
        reader = _read_torch
        if kind.__module__ == "torch" and kind.__name__ == "Tensor":
            global _TORCH_TENSOR
            _TORCH_TENSOR = kind
    elif issubclass(kind, int) and kind is not bool:
        reader = _read_address
    elif hasattr(obj, "__cuda_array_interface__"):
        reader = _read_cai
    elif hasattr(obj, "__dlpack__"):
        reader = _read_dlpack
    else:
        raise TypeError(
            f"{kind.__module__}.{kind.__qualname__} is not a buffer: pass a torch tensor, a __dlpack__ or "
            "__cuda_array_interface__ producer, or an int device address"
        )
    READERS[kind] = reader
    return reader


# --- the pack: one fast loop, and the checker that names what the loop refused --------------------


def normalize(layout: OperandLayout, values: Mapping[Any, Any], workspace: Any) -> VariantPack:
    """``values`` (keyed by Tensor, name or uid) and ``workspace`` as one `VariantPack`.

    One flat loop over the caller's values: positions come from the layout (resolved at build), a
    torch tensor is read in place (five attribute reads) and checked as it is read, anything else
    goes through its cached reader and the whole pack is checked after the loop. A torch read equal
    to the buffer its position last accepted (`OperandLayout.accepted`) is that buffer: its dtype
    passed then, and a position's expected dtype never changes, so only the device rule runs again
    (and a plan may recognise the buffer it checked last time by identity). The loop never raises:
    anything it does not accept goes to `_checked`, which re-reads the call with every rule and
    raises a typed error naming the operand (or, for a first-seen buffer type, resolves its reader
    and returns the pack). More keys than positions filled means one operand given twice (as its
    Tensor and by its name), which `_checked` names. Every call builds its own buffer list, so its
    own pack.
    """
    positions = layout.positions
    expected = layout.expected
    host = layout.host
    accepted = layout.accepted
    buffers: list[Any] = [None] * layout.size
    tensor_type = _TORCH_TENSOR
    torch_dtypes = _TORCH_DT
    device: Any = None
    inline = True
    try:
        count = len(values)
        for key, obj in values.items():
            i = positions[key]
            if type(obj) is tensor_type:
                dev = obj.get_device()
                read = (obj.data_ptr(), obj.shape, obj.stride(), torch_dtypes[obj.dtype], dev)
                buf = accepted[i]
                if buf != read:
                    if read[3] is not expected[i] and expected[i] is not None:
                        return _checked(layout, values, workspace)
                    buf = accepted[i] = _new(OperandBuffer, read)
                buffers[i] = buf
                if dev != device and not host[i]:
                    if device is not None:
                        return _checked(layout, values, workspace)
                    device = dev
            else:
                buffers[i] = READERS[type(obj)](obj, layout.declared[i])
                inline = False
    except (KeyError, TypeError, AttributeError, ValueError):
        return _checked(layout, values, workspace)
    if not inline or None in buffers:
        # a non-torch buffer, or a position the values left to the graph's default bindings
        defaults = layout.defaults
        device = None
        given = layout.size
        for i, buf in enumerate(buffers):
            if buf is None:
                given -= 1
                buf = buffers[i] = defaults[i]
                if buf is None:
                    return _checked(layout, values, workspace)
            if expected[i] is not None and buf[3] is not expected[i]:
                return _checked(layout, values, workspace)
            if not host[i]:
                if device is None:
                    device = buf[4]
                elif buf[4] != device:
                    return _checked(layout, values, workspace)
        if count != given:  # more keys than positions filled: one operand given twice
            return _checked(layout, values, workspace)
    elif count != layout.size:  # every position filled by more keys than positions
        return _checked(layout, values, workspace)
    if device is None:
        device = DEVICE_UNKNOWN
    if workspace is None:
        return VariantPack(layout, buffers, device)
    if type(workspace) is int:
        if not 0 <= workspace < 0x1_0000_0000_0000_0000:  # 0: none; 2**64: 64-bit addresses
            return _checked(layout, values, workspace)
        return VariantPack(layout, buffers, device, workspace, None)
    if type(workspace) is tensor_type and workspace.is_contiguous():
        # the usual workspace: a contiguous torch tensor spans exactly its nbytes
        if workspace.get_device() != device:
            return _checked(layout, values, workspace)
        return VariantPack(layout, buffers, device, workspace.data_ptr(), workspace.nbytes)
    try:
        ws = READERS[type(workspace)](workspace, _WORKSPACE_DECL)
    except (KeyError, TypeError, AttributeError, ValueError):  # ValueError: an int subclass's bad address
        return _checked(layout, values, workspace)
    if ws[4] != device:
        return _checked(layout, values, workspace)
    return VariantPack(layout, buffers, device, ws[0], nbytes(ws))


_WORKSPACE_DECL = OperandBuffer(0, (), (), data_type.UINT8)


def _checked(layout: OperandLayout, values: Mapping[Any, Any], workspace: Any) -> VariantPack:
    items = getattr(values, "items", None)
    if not callable(items):
        raise OperandTypeError(
            "execute(): expected a mapping of operand (Tensor, name or uid) to buffer, got "
            f"{type(values).__name__} {values!r}"[:300]
        )
    buffers = layout.defaults.copy()
    given: dict[int, Any] = {}
    for key, obj in items():
        i = layout.position(key)  # raises UnknownOperandError naming the key
        if i in given:
            raise DuplicateOperandError(
                f"execute(): tensor {layout.names[i]!r} is given twice, as {_shown(given[i])} and as "
                f"{_shown(key)}; give each operand once",
                tensor=layout.names[i],
            )
        given[i] = key
        try:
            reader = reader_for(obj)
            buffers[i] = reader(obj, layout.declared[i])
        except TypeError as exc:
            raise OperandDtypeError(f"tensor {layout.names[i]!r}: {exc}", tensor=layout.names[i]) from exc
        except ValueError as exc:
            raise OperandAddressError(f"tensor {layout.names[i]!r}: {exc}", tensor=layout.names[i]) from exc
    missing = [layout.names[i] for i, b in enumerate(buffers) if b is None]
    if missing:
        raise OperandMissingError(
            f"execute() has no buffer for tensor(s) {', '.join(map(repr, missing))}", tensor=missing[0]
        )
    device = DEVICE_UNKNOWN
    first = None
    for i, buf in enumerate(buffers):
        expected = layout.expected[i]
        if expected is not None and buf.dtype is not expected:
            raise OperandDtypeError(
                f"tensor {layout.names[i]!r} is declared {expected.name}, the buffer passed is {buf.dtype.name}",
                tensor=layout.names[i],
            )
        if layout.host[i]:
            continue
        if not device_matches(device, buf.device):
            raise OperandDeviceError(
                f"tensor {layout.names[i]!r} is on {_device_name(buf.device)}, "
                f"tensor {first!r} on {_device_name(device)}: one call runs on one device",
                tensor=layout.names[i],
            )
        if device in (DEVICE_UNKNOWN, DEVICE_CUDA_ANY) and buf.device != DEVICE_UNKNOWN:
            device, first = buf.device, layout.names[i]
        elif first is None:
            first = layout.names[i]
    ws_pointer, ws_bytes = 0, 0
    if type(workspace) is int and workspace < 0:
        raise OperandAddressError(
            f"workspace: bare address {workspace} is negative; pass a buffer, an address > 0, or 0 for none",
            tensor="workspace",
        )
    if workspace is not None and not (type(workspace) is int and workspace == 0):
        try:
            ws = reader_for(workspace)(workspace, _WORKSPACE_DECL)
        except TypeError as exc:
            raise OperandDtypeError(f"workspace: {exc}", tensor="workspace") from exc
        except ValueError as exc:
            raise OperandAddressError(f"workspace: {exc}", tensor="workspace") from exc
        if not device_matches(device, ws.device) or ws.device == DEVICE_HOST != device:
            raise OperandDeviceError(
                f"workspace is on {_device_name(ws.device)}, the operands on {_device_name(device)}",
                tensor="workspace",
            )
        ws_pointer, ws_bytes = ws.pointer, nbytes(ws)
    return VariantPack(layout, buffers, device, ws_pointer, ws_bytes)


def _shown(key: Any) -> str:
    """How a key of the call reads in a message: the Tensor, a name, a uid."""
    if isinstance(key, str):
        return f"name {key!r}"
    if isinstance(key, int):
        return f"uid {key}"
    return f"the Tensor {getattr(key, 'name', key)!r}"


def _device_name(code: int) -> str:
    if code == DEVICE_HOST:
        return "the host"
    if code == DEVICE_CUDA_ANY:
        return "a CUDA device"
    if code == DEVICE_UNKNOWN:
        return "an unknown device"
    return f"cuda:{code}"
