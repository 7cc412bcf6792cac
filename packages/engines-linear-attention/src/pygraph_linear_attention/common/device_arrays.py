"""Device arrays over bare addresses, for ``cuda.tile.launch``: the variant pack hands the plan
pointers, shapes and strides, and cuTile takes array objects.

`DeviceArray` describes memory it does not own through DLPack (``__dlpack__`` and
``__dlpack_device__``), the one array protocol that spells bfloat16 (``__cuda_array_interface__``
has no typestr for it). The DLTensor behind it is built once per array and reused by every
capsule it hands out, so a call that reuses the same buffers pays one PyCapsule per argument.
The managed tensor's deleter is a no-op, never NULL: the memory belongs to the caller and the
struct to this object, and cuTile 1.7's consumer calls the deleter of every capsule it reads
without checking it (a NULL one crashed the first launch on the H200). The object must outlive
the consumer's use: the plan keeps its arrays, and cuTile reads pointer, shape and strides at
the launch, then calls the deleter.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pygraph.execution.dlpack import DLDataType, DLDevice, DLTensor

__all__ = ["DL_DTYPES", "DeviceArray"]

# dtype name -> (DLPack type code, bits): 0 int, 1 uint, 2 float, 4 bfloat (dlpack.h)
DL_DTYPES = {
    "int32": (0, 32),
    "int64": (0, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "bfloat16": (4, 16),
}
_KDL_CUDA = 2
_KDL_CPU = 1


class _DLManagedTensor(ctypes.Structure):
    _fields_ = (("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p))


class _DLPackVersion(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint32), ("minor", ctypes.c_uint32))


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = (
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    )


# void (*deleter)(DLManagedTensor*): a no-op the consumer may call (kept referenced for the process)
_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_NO_OP_DELETER = _DELETER_TYPE(lambda _managed: None)
_NO_OP_ADDRESS = ctypes.cast(_NO_OP_DELETER, ctypes.c_void_p).value

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


class DeviceArray:
    """A strided array at ``pointer`` (shape and strides in elements) on CUDA device ``device``
    (``device=-1``: host memory, for tests)."""

    __slots__ = (
        "_legacy",
        "_shape_buf",
        "_stride_buf",
        "_versioned",
        "device",
        "dtype",
        "pointer",
        "shape",
        "strides",
    )

    def __init__(self, pointer: int, shape: tuple, strides: tuple, dtype: str, device: int = 0) -> None:
        code_bits = DL_DTYPES.get(dtype)
        if code_bits is None:
            raise TypeError(f"DeviceArray: dtype {dtype!r} is not one of {sorted(DL_DTYPES)}")
        if len(shape) != len(strides):
            raise ValueError(f"DeviceArray: shape {list(shape)} and strides {list(strides)} differ in rank")
        self.pointer, self.shape, self.strides = int(pointer), tuple(shape), tuple(strides)
        self.dtype, self.device = dtype, device
        ndim = len(self.shape)
        self._shape_buf = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        self._stride_buf = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        kind = (_KDL_CPU, 0) if device < 0 else (_KDL_CUDA, device)

        def tensor() -> DLTensor:
            return DLTensor(
                ctypes.c_void_p(self.pointer or None), DLDevice(*kind), ndim, DLDataType(*code_bits, 1),
                self._shape_buf, self._stride_buf, 0,
            )  # fmt: skip

        self._legacy = _DLManagedTensor(tensor(), None, _NO_OP_ADDRESS)
        self._versioned = _DLManagedTensorVersioned(_DLPackVersion(1, 0), None, _NO_OP_ADDRESS, 0, tensor())

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._legacy.dl_tensor.device.device_type, self._legacy.dl_tensor.device.device_id

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None, **_: Any) -> Any:
        """A capsule over this array (the versioned struct when the consumer asks for 1.x). ``stream``
        is ignored: the caller orders its own stream; nothing here is produced on a stream."""
        if max_version is not None and max_version[0] >= 1:
            return _capsule_new(ctypes.addressof(self._versioned), b"dltensor_versioned", None)
        return _capsule_new(ctypes.addressof(self._legacy), b"dltensor", None)

    def __repr__(self) -> str:
        return f"DeviceArray({self.pointer:#x}, {list(self.shape)}, {list(self.strides)}, {self.dtype}, device={self.device})"
