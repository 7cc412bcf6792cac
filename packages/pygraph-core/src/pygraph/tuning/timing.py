"""How autotune and ``pygraph bench`` time one plan: a `Timer`, and the default one on CUDA events.

A timer is called as ``timer(run, warmup=..., reps=..., plan=...)``: ``run()`` executes the plan
once through ``graph.execute_plan_at_index`` (the per-call path users run), ``plan`` describes what
is timed (name, engine id, knobs). It returns the per-repetition times in milliseconds; autotune
takes their median. Inject another timer to time on the host, or to drive autotune from a test.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["CudaEventTimer", "Timer", "TimerUnavailableError", "median_ms"]

# A sleep queued ahead of the timed launches so they all wait behind it: the events then time the
# device, not the host's launch path (a small GEMM runs in ~10 us, execute() costs ~7 us of host).
# 2e6 cycles is ~1.3 ms at the H200's 1.5 GHz, longer than the host takes to queue 20 launches.
_QUEUE_SLEEP_CYCLES = 2_000_000


class TimerUnavailableError(RuntimeError):
    """The default timer cannot run here (no torch, or no CUDA device); ``reason`` says which, the
    message also that ``timer=`` times another way."""

    def __init__(self, call: str, reason: str) -> None:
        super().__init__(f"{call}: the default timer {reason}; pass timer= to time another way")
        self.call, self.reason = call, reason


class Timer(Protocol):
    def __call__(self, run: Callable[[], None], *, warmup: int, reps: int, plan: Any) -> Sequence[float]: ...


def median_ms(times: Sequence[float]) -> float:
    return float(statistics.median(times))


class CudaEventTimer:
    """Times ``run`` with CUDA events on the default stream, from a drained queue.

    The queue is drained, ``warmup`` runs warm caches and clocks, the queue is drained again, then
    ``reps`` runs are queued behind a short device sleep, each between its own pair of events.
    Repeated runs read operands warm in L2, the same for every plan compared.
    """

    def __init__(self, call: str = "autotune()") -> None:
        try:
            import torch
        except ImportError as exc:
            raise TimerUnavailableError(
                call, "needs torch with CUDA (pip install 'pygraph-core[torch]')"
            ) from exc
        if not torch.cuda.is_available():
            raise TimerUnavailableError(
                call,
                f"needs a CUDA device; torch {torch.__version__} sees none (torch.cuda.is_available() is False)",
            )
        self._torch = torch

    def __call__(self, run: Callable[[], None], *, warmup: int, reps: int, plan: Any = None) -> list[float]:
        torch = self._torch
        stream = torch.cuda.default_stream()
        torch.cuda.synchronize()
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)
        ]
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is not None:
            with torch.cuda.stream(stream):
                sleep(_QUEUE_SLEEP_CYCLES)
        for start, end in events:
            start.record(stream)
            run()
            end.record(stream)
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]
