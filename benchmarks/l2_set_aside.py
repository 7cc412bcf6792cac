"""The L2 set-aside for persisting accesses, for the benchmarks that time L2 eviction hints.

A TMA load marked ``evict_last`` (GemmKnobs.l2_hint 1-3) is a persisting access, and persisting
accesses only have priority in the part of the L2 set aside for them
(``cudaLimitPersistingL2CacheSize``, 0 unless a process sets it). With no set-aside the hint has
nothing to act on, which is one reading of v18's "h2 changed nothing" (kernels/NOTES.md).

    python3 benchmarks/ab_gemm.py --l2-set-aside 36 ...   # MB, clamped to what the part allows
    PYGRAPH_L2_SET_ASIDE_MB=36 ncu ... python3 scripts/device/ncu_gemm_target.py ...
"""

from __future__ import annotations

import os

ENV = "PYGRAPH_L2_SET_ASIDE_MB"


def _check(result, what: str):
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return values[0] if values else None


def set_aside(mb: float) -> tuple[int, int]:
    """Sets the current device's persisting-L2 set-aside to ``mb`` MB (clamped to the part's
    ``persistingL2CacheMaxSize``; 0 gives it all back) and returns (bytes in force, the part's max)."""
    if mb < 0:
        raise ValueError(f"L2 set-aside {mb} MB: want >= 0")
    import torch
    from cuda.bindings import runtime as rt

    device = torch.cuda.current_device()  # the runtime's calls act on this device's primary context, torch's
    most = _check(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMaxPersistingL2CacheSize, device),
                  "cudaDeviceGetAttribute(MaxPersistingL2CacheSize)")  # fmt: skip
    want = min(int(mb * 2**20), int(most))
    _check(rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, want), "cudaDeviceSetLimit")
    got = _check(rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize), "cudaDeviceGetLimit")
    return int(got), int(most)


def from_env() -> str | None:
    """Applies ``PYGRAPH_L2_SET_ASIDE_MB`` when set; returns a line saying what is in force."""
    value = os.environ.get(ENV)
    if not value:
        return None
    got, most = set_aside(float(value))
    return describe(got, most)


def describe(got: int, most: int) -> str:
    return (
        f"L2 set-aside for persisting accesses: {got / 2**20:.1f} MB (the part allows {most / 2**20:.1f} MB)"
    )
