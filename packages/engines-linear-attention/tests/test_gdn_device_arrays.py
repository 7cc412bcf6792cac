"""The DLPack views the gdn_cutile plan hands cuda.tile.launch, consumed on the CPU.

cuTile 1.7's consumer (``cuda/tile/_cext``, ``arrayrepr_dlpack_common``) calls
``obj.__dlpack__(stream=-1)``, reads the legacy ``dltensor`` capsule's DLTensor (device type 2 =
CUDA, data + byte_offset, ndim, shape, strides), renames the capsule ``used_dltensor`` and calls
the managed tensor's deleter without checking it: `_consume_like_cutile` does the same, so a view
whose deleter is NULL (the first H200 launch crashed on one) fails here instead. torch and numpy
read the views of host memory as well, bfloat16 included.
"""

from __future__ import annotations

import ctypes
import gc

import pytest

from pygraph_linear_attention.common.device_arrays import DeviceArray

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = (ctypes.py_object, ctypes.c_char_p)


class _DLTensor(ctypes.Structure):  # dlpack.h, written out again so the test does not share the producer's
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _consume_like_cutile(array) -> dict:
    capsule = array.__dlpack__(stream=-1)
    address = _get_pointer(capsule, b"dltensor")
    dl = _DLTensor.from_address(address)
    seen = {
        "pointer": dl.data + dl.byte_offset,
        "device": (dl.device_type, dl.device_id),
        "dtype": (dl.code, dl.bits, dl.lanes),
        "shape": tuple(dl.shape[i] for i in range(dl.ndim)),
        "strides": tuple(dl.strides[i] for i in range(dl.ndim)),
    }
    _set_name(capsule, b"used_dltensor")
    deleter = ctypes.c_void_p.from_address(
        address + ctypes.sizeof(_DLTensor) + ctypes.sizeof(ctypes.c_void_p)
    )
    assert deleter.value, "the managed tensor's deleter is NULL: cuTile calls it unconditionally"
    _DELETER(deleter.value)(address)
    return seen


def test_a_view_survives_cutiles_consumer_call_after_call():
    view = DeviceArray(0x7F0000001000, (130, 4, 128), (512, 128, 1), "bfloat16", device=0)
    for _ in range(3):  # the plan reuses a view while the call's pointers repeat
        seen = _consume_like_cutile(view)
    assert seen == {
        "pointer": 0x7F0000001000,
        "device": (2, 0),
        "dtype": (4, 16, 1),
        "shape": (130, 4, 128),
        "strides": (512, 128, 1),
    }


@pytest.mark.parametrize(
    ("dtype", "code_bits"),
    [("float16", (2, 16)), ("float32", (2, 32)), ("int32", (0, 32)), ("int64", (0, 64))],
)
def test_every_dtype_the_plan_passes(dtype, code_bits):
    assert _consume_like_cutile(DeviceArray(0x1000, (4,), (1,), dtype, device=1))["dtype"] == (*code_bits, 1)


def test_torch_and_numpy_read_views_of_host_memory():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    x = torch.arange(24, dtype=torch.bfloat16).reshape(2, 3, 4).transpose(1, 2)
    for _ in range(3):
        view = DeviceArray(x.data_ptr(), tuple(x.shape), tuple(x.stride()), "bfloat16", device=-1)
        y = torch.from_dlpack(view)
        assert torch.equal(y, x) and y.stride() == x.stride()
        del y, view
        gc.collect()  # the consumer's deleter runs on a live struct, or not at all
    f = torch.randn(3, 5)
    assert np.array_equal(
        np.from_dlpack(DeviceArray(f.data_ptr(), (3, 5), (5, 1), "float32", device=-1)), f.numpy()
    )


def test_an_unknown_dtype_or_rank_mismatch_is_refused():
    with pytest.raises(TypeError, match="DeviceArray: dtype 'float64' is not one of"):
        DeviceArray(0x1000, (4,), (1,), "float64")
    with pytest.raises(ValueError, match=r"DeviceArray: shape \[4, 2\] and strides \[1\] differ in rank"):
        DeviceArray(0x1000, (4, 2), (1,), "float32")
