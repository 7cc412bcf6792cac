"""Split-K tile semaphores, owned by the engine: one zeroed buffer per (device, stream).

A split-K launch counts the arrivals of each output tile's K slices on an int32 semaphore that must
be zero at launch; the kernel's last arrival puts it back to zero. So a buffer zeroed once stays
valid for every later launch on the same stream, whatever plan launches there (launches on one
stream are serialized), and no per-call memset runs. Two streams never share a buffer, so plans may
run concurrently on different streams. The caller's workspace then holds only the fp32 partials,
which need no initialization.

The first launch on a stream allocates (cuMemAlloc in the device's primary context) and zeroes the
buffer on that stream (stream-ordered, no host sync). Allocation is not allowed while a stream is
being captured into a CUDA graph; such a stream must have run the plan once before capture.
"""

from __future__ import annotations

import threading

__all__ = ["SemaphoreError", "StreamSemaphores", "stream_semaphores"]

_MIN_WORDS = 4096  # 16 KiB: every narrow-M shape the heuristics send to split-K fits the first buffer


class SemaphoreError(RuntimeError):
    """The engine-owned split-K semaphores could not be provided for a stream."""


class StreamSemaphores:
    """Zeroed int32 semaphore buffers keyed by (device ordinal, stream handle)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int], tuple[int, int]] = {}  # key -> (address, words)
        self._retired: list[tuple[int, int]] = []  # (device, address) outgrown, kept until close()
        self._lock = threading.Lock()

    def address(self, device: int, stream: int, words: int) -> int:
        """Device address of at least ``words`` zeroed semaphores for launches on ``stream``.

        ``device`` is the CUDA ordinal of the call's operands; a negative one (operands passed as
        bare addresses, whose device is not known) means the current device.
        """
        if device < 0:
            device = _current_device()
        hit = self._buffers.get((device, stream))
        if hit is not None and hit[1] >= words:
            return hit[0]
        return self._grow(device, stream, words)

    def _grow(self, device: int, stream: int, words: int) -> int:
        driver = _driver()
        with self._lock:
            hit = self._buffers.get((device, stream))
            if hit is not None and hit[1] >= words:
                return hit[0]
            size = max(words, _MIN_WORDS, 2 * hit[1] if hit else 0)
            with _primary_context(driver, device):
                err, address = driver.cuMemAlloc(size * 4)
                _check(err, f"allocating {size} split-K semaphores on device {device} for stream {stream:#x}")
                (err,) = driver.cuMemsetD32Async(address, 0, size, stream)
                _check(err, f"zeroing {size} split-K semaphores on stream {stream:#x}")
            if hit is not None:
                # an older launch on this stream may still be using it; it is freed at close()
                self._retired.append((device, hit[0]))
            self._buffers[(device, stream)] = (int(address), size)
            return int(address)

    def close(self) -> None:
        """Free every buffer (after synchronizing each device). Later launches allocate afresh."""
        driver = _driver()
        with self._lock:
            owned = [(d, a) for (d, _), (a, _) in self._buffers.items()] + self._retired
            self._buffers, self._retired = {}, []
        for device in sorted({d for d, _ in owned}):
            with _primary_context(driver, device):
                driver.cuCtxSynchronize()
                for d, address in owned:
                    if d == device:
                        driver.cuMemFree(address)

    def __len__(self) -> int:
        return len(self._buffers)


class _primary_context:
    """Make ``device``'s primary context current for the block (the allocation's home)."""

    def __init__(self, driver, device: int) -> None:
        self._driver, self._device = driver, device

    def __enter__(self):
        d = self._driver
        err, dev = d.cuDeviceGet(self._device)
        _check(err, f"cuDeviceGet({self._device})")
        err, self._ctx = d.cuDevicePrimaryCtxRetain(dev)
        _check(err, f"retaining the primary context of device {self._device}")
        (err,) = d.cuCtxPushCurrent(self._ctx)
        _check(err, f"making device {self._device} current")
        self._dev = dev
        return self

    def __exit__(self, *exc) -> None:
        d = self._driver
        d.cuCtxPopCurrent()
        d.cuDevicePrimaryCtxRelease(self._dev)


def _current_device() -> int:
    driver = _driver()
    err, dev = driver.cuCtxGetDevice()
    _check(err, "reading the current device (cuCtxGetDevice; is a CUDA context current?)")
    return int(dev)


def _driver():
    from cuda.bindings import driver

    return driver


def _check(err, what: str) -> None:
    if err != _driver().CUresult.CUDA_SUCCESS:
        hint = ""
        if "CAPTURE" in getattr(err, "name", str(err)):
            hint = " (the stream is being captured: run the plan once on this stream before capturing it)"
        raise SemaphoreError(f"gemm_sm90 split-K: {what} failed: {err}{hint}")


_POOL = StreamSemaphores()


def stream_semaphores() -> StreamSemaphores:
    """The process-wide pool every split-K launch takes its semaphores from."""
    return _POOL
