"""The one timing harness of the benchmarks: device time of a launch, rounds of columns, ratios
against anchors measured in the same run, and the host cost of a call.

Device time (`device_time`, `round_times`) is read with CUDA events around launches queued behind a
drained queue, after warm-up, as a median over many reps. Two ways, for two questions:

- *from a cold L2* (`device_time`, or `round_times` with a flush buffer): each launch alone, after
  zeroing a 256 MB buffer so it starts with nothing of its operands in L2. This is how the tables
  time every column (triton's ``do_bench`` method: warm-up and reps sized from a first estimate).
- *sustained* (`round_times` without a flush buffer): ``reps`` launches back to back between two
  events, queued behind a sleep kernel so a small problem times the device, not the host. On a
  power-capped part a column given about a second per round runs at the clock its own power
  settles to; bursts of ten launches borrow headroom left by the columns before.

Single timings of one config drift by several percent between runs of a day (the clock follows the
part's power and temperature), so every comparison is made within one run: columns timed in
interleaved rounds (`rotated` order), their ratio taken per round (`ratio_lines`), so drift hits
all alike. Host cost (`burst_cost`) is the min over bursts of back-to-back calls, per call.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than the H200's 50 MB L2 several times over


@functools.cache
def l2_flush_buffer():
    """The device buffer zeroed before each cold-L2 launch (one per process)."""
    import torch

    return torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")


def device_time(fn: Callable[[], Any], *, warmup_ms: float = 25, rep_ms: float = 100, flush=None) -> float:
    """Median device time (ms) of ``fn``'s launch, each rep from a cold L2.

    ``fn`` runs once and the queue is drained; five launches estimate its time; then ``warmup_ms``
    worth of launches warm it and ``rep_ms`` worth are timed, one pair of CUDA events each, the
    flush buffer zeroed before every one (``flush``: another buffer to zero)."""
    import torch

    flush = l2_flush_buffer() if flush is None else flush
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    n_warmup, n_reps = max(1, int(warmup_ms / estimate)), max(1, int(rep_ms / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_reps)]
    for _ in range(n_warmup):
        fn()
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def round_times(columns: dict, order: list[str], reps: int, flush=None) -> dict:
    """One round: per column (in ``order``), ms per launch. With ``flush`` (`l2_flush_buffer`), the
    median of ``reps`` launches each timed alone from a cold L2; without, ``reps`` launches back to
    back between two events, queued behind a sleep so they time the device."""
    import torch

    out = {}
    for name in order:
        fn = columns[name]
        if flush is not None:
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                flush.zero_()
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            out[name] = statistics.median(times)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda._sleep(1_000_000)  # the launches queue behind it: small shapes time the device
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        out[name] = start.elapsed_time(end) / reps
    return out


def rotated(names: list, r: int) -> list:
    """The column order of round ``r``: ``names`` rotated by ``r``, so each column takes every place
    in turn and none always runs right after the same neighbour."""
    shift = r % len(names)
    return names[shift:] + names[:shift]


def paired_rounds(columns: dict, rounds: int, reps: int, flush=None, warm_rounds: int = 3) -> list[dict]:
    """``rounds`` rounds of `round_times` in rotated order, after ``warm_rounds`` that warm the clocks."""
    names = list(columns)
    for _ in range(warm_rounds):
        round_times(columns, names, reps, flush)
    return [round_times(columns, rotated(names, r), reps, flush) for r in range(rounds)]


def interleaved(columns: dict, rounds: int, log: list, per_round: dict | None = None) -> dict:
    """Median `device_time` (ms) per column over ``rounds`` rounds, each timing every column once in
    rotated order; a column that raises is logged and left out of that round (None in
    ``per_round``). ``per_round``, where given, receives each column's time of every round, for the
    per-round ratios `time_lines` prints."""
    names = list(columns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in rotated(names, r):
            try:
                times[name].append(device_time(columns[name]))
            except Exception as e:  # one broken column must not stop the table
                times[name].append(None)
                log.append(f"ERR column {name}: {type(e).__name__}: {e}")
    if per_round is not None:
        per_round.update(times)
    done = {name: [t for t in ts if t is not None] for name, ts in times.items()}
    return {name: statistics.median(ts) for name, ts in done.items() if ts}


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile)."""
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def tflops(m: int, n: int, k: int, ms: float) -> float:
    """TFLOP/s of an M x N x K GEMM that took ``ms``."""
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def ratio_lines(
    rounds: list[dict], anchors: list[str], flop: tuple[int, int, int], width: int = 24
) -> list[str]:
    """The ratio table of `paired_rounds`' result: per column, median TFLOP/s, then per anchor the
    per-round time ratio anchor / column as [p25 median p75] (> 1: the column is faster)."""
    lines = []
    for name in rounds[0]:
        ms = statistics.median(rt[name] for rt in rounds)
        ratios = [
            "   " + " ".join(f"{x:.3f}" for x in quartiles([rt[a] / rt[name] for rt in rounds]))
            for a in anchors
        ]
        lines.append(f"  {name:{width}s} {tflops(*flop, ms):7.1f}" + "".join(ratios))
    return lines


def time_lines(
    times: dict[str, float],
    tokens: int,
    anchors: tuple[str, ...] = ("fla", "cudnn"),
    width: int = 14,
    per_round: dict | None = None,
) -> list[str]:
    """A timing table's rows: per column ms and tokens/s and, on every column that is not an anchor,
    each anchor's time over its own (> 1: the column is faster), all from the same run: the ratio of
    the medians and, with ``per_round`` (`interleaved`'s), the ratio in each round, then their median."""
    lines = []
    for name, ms in times.items():
        ratios = ""
        if name not in anchors:
            for a in (a for a in anchors if a in times):
                ratios += f"  {a}/{name} {times[a] / ms:.2f}x"
                if per_round:
                    pairs = [(x, y) for x, y in zip(per_round[a], per_round[name]) if x and y]
                    each = [x / y for x, y in pairs]
                    if each:
                        rounds = " ".join(f"{r:.2f}" for r in each)
                        ratios += f" (rounds {rounds}; median {statistics.median(each):.2f}x)"
        lines.append(f"  {name:{width}s} {ms:8.3f} ms  {tokens / ms / 1e3:8.2f} Mtok/s{ratios}")
    return lines


def run_footer() -> str:
    """The device and the date, the last line of every table."""
    import torch

    return f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d %H:%M')}"


def burst_cost(
    call: Callable[[], Any],
    n: int,
    *,
    reps: int = 25,
    sync: Callable[[], Any] | None = None,
    warmup_s: float = 0.0,
) -> float:
    """Host cost of ``call`` in microseconds: min over ``reps`` of (time of ``n`` back-to-back calls)
    / n, each burst started from a drained queue when ``sync`` is given. A number flat in ``n`` is
    host-bound; one that climbs with it is the device's rate showing through. ``warmup_s``: seconds
    of the same calls (in bursts of ``n``) before the timed ones, so that a host CPU that idled
    through a GPU-bound run is back at its working clock."""
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
