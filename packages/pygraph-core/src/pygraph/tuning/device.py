"""The CUDA device this process runs on: name, SM, SM count, memory, asked of the driver.

Planning reads it once a graph, for what the graph does not declare (`DeviceInfo.of_graph` in
`pygraph.engines.base`: the families' rules are sized by the SM count); the plan cache keys its
entries by it, because a measured winner is a fact about one device, and ``pygraph info`` prints it.
It is asked of the CUDA driver through ctypes, so no framework is imported; torch's answer is used
when torch is already imported with a CUDA device, because the device torch has made current is the
one the caller's tensors are on.
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import threading

__all__ = ["CudaDevice", "current_device", "no_device_reason"]

# cuDeviceGetAttribute codes (cuda.h, CUdevice_attribute)
_MULTIPROCESSOR_COUNT = 16
_COMPUTE_CAPABILITY_MAJOR = 75
_COMPUTE_CAPABILITY_MINOR = 76


@dataclasses.dataclass(frozen=True)
class CudaDevice:
    """One CUDA device: ``sm`` is major*10+minor (90 for Hopper)."""

    name: str
    sm: int
    sm_count: int
    memory_bytes: int | None = None
    ordinal: int = 0

    @property
    def key(self) -> str:
        """What the plan cache keys an entry by: the name, the SM and the SM count."""
        return f"{self.name}|sm{self.sm}|{self.sm_count} SMs"


_lock = threading.Lock()
_probed: tuple[CudaDevice | None, str | None] | None = None


def _from_torch() -> CudaDevice | None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    return CudaDevice(
        props.name, props.major * 10 + props.minor, props.multi_processor_count, props.total_memory, ordinal
    )


def _from_driver() -> tuple[CudaDevice | None, str | None]:
    """Device 0 as the driver numbers the visible devices, or (None, why there is none)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return None, f"no CUDA driver ({exc})"
    if cuda.cuInit(0) != 0:
        return None, "the CUDA driver found no usable device (cuInit failed)"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the CUDA driver sees no device"
    dev = ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)

    def attribute(code: int) -> int:
        value = ctypes.c_int(0)
        cuda.cuDeviceGetAttribute(ctypes.byref(value), code, dev)
        return value.value

    memory = ctypes.c_size_t(0)
    total = getattr(cuda, "cuDeviceTotalMem_v2", None) or cuda.cuDeviceTotalMem
    total(ctypes.byref(memory), dev)
    sm = attribute(_COMPUTE_CAPABILITY_MAJOR) * 10 + attribute(_COMPUTE_CAPABILITY_MINOR)
    device = CudaDevice(
        name.value.decode(errors="replace"), sm, attribute(_MULTIPROCESSOR_COUNT), memory.value
    )
    return device, None


def _probe() -> tuple[CudaDevice | None, str | None]:
    global _probed
    with _lock:
        if _probed is None:
            _probed = _from_driver()
        return _probed


def current_device() -> CudaDevice | None:
    """The device this process runs on, or None without one (asked of the driver once)."""
    device = _from_torch()
    return device if device is not None else _probe()[0]


def no_device_reason() -> str | None:
    """Why `current_device` is None (None when there is a device)."""
    if _from_torch() is not None:
        return None
    return _probe()[1]
