"""The engine-owned split-K semaphore pool, against a stand-in driver (no GPU)."""

from __future__ import annotations

import pytest

from pygraph_gemm.kernels import semaphores


class _Driver:
    """Records allocations, memsets and frees; hands out increasing addresses."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self, fail_alloc=None) -> None:
        self.allocs, self.memsets, self.frees, self._next = [], [], [], 0x10000
        self.fail_alloc = fail_alloc

    def cuDeviceGet(self, ordinal):
        return 0, ordinal

    def cuDevicePrimaryCtxRetain(self, dev):
        return 0, f"ctx{dev}"

    def cuCtxPushCurrent(self, ctx):
        return (0,)

    def cuCtxPopCurrent(self):
        return 0, None

    def cuDevicePrimaryCtxRelease(self, dev):
        return (0,)

    def cuCtxSynchronize(self):
        return (0,)

    def cuMemAlloc(self, size):
        if self.fail_alloc is not None:
            return self.fail_alloc, 0
        self.allocs.append(size)
        self._next += 0x100000
        return 0, self._next

    def cuMemsetD32Async(self, address, value, words, stream):
        self.memsets.append((address, value, words, stream))
        return (0,)

    def cuCtxGetDevice(self):
        return 0, 1  # the current device is ordinal 1

    def cuMemFree(self, address):
        self.frees.append(address)
        return (0,)


@pytest.fixture
def driver(monkeypatch):
    fake = _Driver()
    monkeypatch.setattr(semaphores, "_driver", lambda: fake)
    return fake


def test_one_zeroed_buffer_per_device_and_stream_reused_without_a_memset(driver):
    pool = semaphores.StreamSemaphores()
    first = pool.address(0, 0xA, 64)
    assert pool.address(0, 0xA, 64) == first  # reused: no alloc, no memset
    assert pool.address(0, 0xA, 10) == first
    other_stream = pool.address(0, 0xB, 64)
    other_device = pool.address(1, 0xA, 64)
    assert len({first, other_stream, other_device}) == 3
    assert len(driver.allocs) == 3
    # each buffer zeroed once, on the stream that will use it (stream-ordered before its launches)
    assert [(m[0], m[1], m[3]) for m in driver.memsets] == [
        (first, 0, 0xA),
        (other_stream, 0, 0xB),
        (other_device, 0, 0xA),
    ]


def test_a_larger_need_grows_the_buffer_and_keeps_the_old_one_until_close(driver):
    pool = semaphores.StreamSemaphores()
    small = pool.address(0, 0xA, 8)
    big = pool.address(0, 0xA, 10 * semaphores._MIN_WORDS)
    assert big != small and driver.memsets[-1][2] >= 10 * semaphores._MIN_WORDS
    assert driver.frees == []  # an earlier launch on the stream may still read the small one
    pool.close()
    assert sorted(driver.frees) == sorted([small, big]) and len(pool) == 0


def test_allocation_failure_names_the_stream_and_the_capture_rule(monkeypatch):
    class Err:
        name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

        def __eq__(self, other):
            return False

        def __str__(self):
            return self.name

    fake = _Driver(fail_alloc=Err())
    monkeypatch.setattr(semaphores, "_driver", lambda: fake)
    with pytest.raises(semaphores.SemaphoreError, match=r"stream 0xab.*run the plan once on this stream"):
        semaphores.StreamSemaphores().address(0, 0xAB, 16)


def test_operands_of_unknown_device_use_the_current_device(driver):
    pool = semaphores.StreamSemaphores()
    assert pool.address(-3, 0xA, 8) == pool.address(1, 0xA, 8)  # bare addresses: device unknown
    assert len(driver.allocs) == 1
