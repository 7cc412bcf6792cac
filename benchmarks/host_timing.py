"""Host cost of a call, the one way every benchmark here measures it.

Min over ``reps`` of (time of ``n`` back-to-back calls) / n, in microseconds, each burst started
from a drained queue when ``sync`` is given. A number flat in ``n`` is host-bound; one that climbs
with it is the device's rate showing through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def burst_cost(
    call: Callable[[], Any],
    n: int,
    *,
    reps: int = 25,
    sync: Callable[[], Any] | None = None,
    warmup_s: float = 0.0,
) -> float:
    """``warmup_s``: seconds of the same calls (in bursts of ``n``) before the timed ones, so that a
    host CPU that idled through a GPU-bound run before is back at its working clock."""
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        for _ in range(n):
            call()
        if sync is not None:
            sync()
    best = float("inf")
    for _ in range(reps):
        if sync is not None:
            sync()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            call()
        t1 = time.perf_counter_ns()
        best = min(best, (t1 - t0) / n / 1000)
    if sync is not None:
        sync()
    return best
