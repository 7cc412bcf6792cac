"""Which plan leads each heuristics cell: gemm_sm90's first-named config against the cuDNN backend's
plan of the same graph, both through ``graph.execute()``, per (dtype, A/B majors, shape bucket,
epilogue) cell of `pygraph_gemm.heuristics` (its ``_BACKEND_LEADS`` table).

Each cell: one representative shape per bucket, both plans built and checked against fp32 on a
NaN-poisoned output, then paired rounds, each launch timed alone from a cold L2 as bench_gemm
times it (`benchmarks.harness.paired_rounds`). Printed per cell: TFLOP/s of each and the per-round ratio ours /
backend [p25 median p75]; the cells where the backend was faster in three rounds of four (p75 < 1)
are printed last in ``_BACKEND_LEADS``'s own form.

    python -m benchmarks.gemm.placement_gemm --rounds 11

``--precompile`` (CPU machine, no GPU): builds every cell's gemm_sm90 kernel through the same graphs
into PYGRAPH_GEMM_CACHE_DIR, so the device run compiles nothing of ours.

``--shape small=768x4096x4096`` (repeatable) times a bucket at another shape; it must fall in that
bucket. Precompile with the same ``--shape`` and ``--only``: the rule's config depends on the shape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import pygraph
from pygraph import data_type as dt

BUCKETS = {  # one shape per heuristics bucket (heuristics.shape_bucket)
    "skinny": (16, 4096, 4096),
    "narrow": (128, 4096, 4096),
    "small": (1024, 4096, 4096),
    "large": (4096, 4096, 4096),
}
# A's contiguous dim (k: row-major, m: column-major), then B's (n: row-major)
LAYOUTS = ("kk", "kn", "mk", "mn")
DTYPES = {"bf16": dt.BFLOAT16, "fp16": dt.HALF}
EPILOGUES = ("plain", "fused")  # fused: + bias along N, then gelu_approx_tanh


def strides(layout: str, m: int, n: int, k: int) -> tuple[list[int], list[int]]:
    """3-D (batch 1) strides of A (1, M, K) and B (1, K, N) for a cell's majors."""
    a = [m * k, k, 1] if layout[0] == "k" else [m * k, 1, m]
    b = [k * n, n, 1] if layout[1] == "n" else [k * n, 1, k]
    return a, b


def graph_of(cell: tuple[str, str, str, str], handle: Any = None):
    """The cell's graph, not yet planned: (graph, {role: tensor})."""
    dname, layout, bucket, epilogue = cell
    m, n, k = BUCKETS[bucket]
    io = DTYPES[dname]
    sa, sb = strides(layout, m, n, k)
    g = pygraph.Graph(
        name=f"placement_{'_'.join(cell)}", io_data_type=io, compute_data_type=dt.FLOAT, handle=handle
    )
    ta = g.tensor(name="a", dim=[1, m, k], stride=sa, data_type=io)
    tb = g.tensor(name="b", dim=[1, k, n], stride=sb, data_type=io)
    x = g.matmul(ta, tb, compute_data_type=dt.FLOAT, name="mm")
    roles = {"a": ta, "b": tb}
    if epilogue == "fused":
        roles["bias"] = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=io)
        x = g.gelu_approx_tanh(input=g.bias(input=x, bias=roles["bias"], name="bias"), name="act")
    x.set_output(True).set_data_type(io)
    roles["out"] = x
    return g, roles


class ShapeError(ValueError):
    """A --shape that is malformed, names no bucket, or falls in another bucket."""


def set_shape(spec: str) -> tuple[int, int, int]:
    """Time ``BUCKET=MxNxK``'s bucket at that shape (it must fall in that bucket); returns it."""
    from benchmarks.gemm.shapes import parse_shape
    from pygraph_gemm.analyzer import analyze
    from pygraph_gemm.heuristics import shape_bucket

    bucket, _, dims = spec.partition("=")
    if bucket not in BUCKETS:
        raise ShapeError(f"--shape {spec!r}: bucket {bucket!r} is not one of {sorted(BUCKETS)}")
    try:
        m, n, k = parse_shape(dims)
    except ValueError as exc:
        raise ShapeError(f"--shape {spec!r} (want BUCKET=MxNxK): {exc}") from None
    old, BUCKETS[bucket] = BUCKETS[bucket], (m, n, k)
    got = shape_bucket(analyze(graph_of(("bf16", "kk", bucket, "plain"))[0]))
    if got != bucket:
        BUCKETS[bucket] = old
        raise ShapeError(f"--shape {spec!r}: {m}x{n}x{k} falls in bucket {got!r}, not {bucket!r}")
    return m, n, k


def build(cell: tuple[str, str, str, str], *, backend: bool, handle: Any = None):
    """The cell's graph, planned and built: gemm_sm90's first-named config, or the backend's plan.
    Returns (graph, {role: tensor})."""
    from benchmarks.gemm.graph_columns import build_side

    g, roles = graph_of(cell, handle)
    build_side(g, backend=backend, context=f"cell {cell}: ")
    return g, roles


def cells() -> list[tuple[str, str, str, str]]:
    return [(d, lay, b, e) for d in DTYPES for lay in LAYOUTS for b in BUCKETS for e in EPILOGUES]


def selected(only: str) -> list[tuple[str, str, str, str]]:
    """The cells ``--only``'s comma-separated filters name (every cell when empty)."""
    wanted = [w for w in only.split(",") if w]
    return [c for c in cells() if not wanted or any(w in c for w in wanted)]


def precompile(chosen: list[tuple[str, str, str, str]]) -> int:
    """The cells' gemm_sm90 kernels, built on a machine without a GPU (the arch check skipped)."""
    from pygraph_gemm.engines.sm90 import GemmSm90Engine

    GemmSm90Engine._arch_reason = lambda self: None
    t0 = time.time()
    for cell in chosen:
        t = time.time()
        build(cell, backend=False)
        print(f"{time.time() - t:5.1f}s {' '.join(cell)}", flush=True)
    print(f"built {len(chosen)} cells' kernels in {time.time() - t0:.0f}s")
    return 0


def _operands(cell, torch):
    dname, layout, bucket, epilogue = cell
    m, n, k = BUCKETS[bucket]
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dname]
    sa, sb = strides(layout, m, n, k)  # the strides the cell's graph declares

    def randn(shape, stride):
        return torch.empty_strided(shape, stride, device="cuda", dtype=tdt).copy_(
            torch.randn(shape, device="cuda")
        )

    ops = {"a": randn((1, m, k), sa), "b": randn((1, k, n), sb)}
    if epilogue == "fused":
        ops["bias"] = torch.randn(1, 1, n, device="cuda").to(tdt)
    ref = ops["a"][0].float() @ ops["b"][0].float()
    if epilogue == "fused":
        ref = torch.nn.functional.gelu(ref + ops["bias"][0].float(), approximate="tanh")
    return ops, ref, tdt


def measure(cell, rounds: int, flush, torch, handle) -> dict:
    from benchmarks.gemm.graph_columns import checked_call
    from benchmarks.harness import paired_rounds, quartiles, tflops

    ops, ref, tdt = _operands(cell, torch)
    m, n, k = BUCKETS[cell[2]]
    calls = {}
    for side, backend in (("ours", False), ("backend", True)):
        g, roles = build(cell, backend=backend, handle=handle)
        out = torch.full((1, m, n), float("nan"), device="cuda", dtype=tdt)
        bindings = {roles[r]: ops[r] for r in ops}
        bindings[roles["out"]] = out
        calls[side] = checked_call(g, bindings, out, ref, f"cell {cell}, {side} plan")
    per_round = paired_rounds(calls, rounds, 5, flush, warm_rounds=2)
    ours = statistics.median(rt["ours"] for rt in per_round)
    back = statistics.median(rt["backend"] for rt in per_round)
    ratio = quartiles([rt["backend"] / rt["ours"] for rt in per_round])  # > 1: ours faster
    return {"ours": tflops(m, n, k, ours), "backend": tflops(m, n, k, back), "ratio": ratio}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument(
        "--precompile", action="store_true", help="CPU only: build every cell's kernel into the cache"
    )
    ap.add_argument("--only", default="", help="comma-separated filters, e.g. 'narrow,small' or 'bf16'")
    ap.add_argument(
        "--shape",
        action="append",
        default=[],
        help="BUCKET=MxNxK: time that bucket at this shape (repeatable)",
    )
    args = ap.parse_args(argv)
    try:
        for spec in args.shape:
            set_shape(spec)
    except ShapeError as exc:
        ap.error(str(exc))
    chosen = selected(args.only)
    if args.precompile:
        return precompile(chosen)
    import cudnn
    import torch

    handle = cudnn.create_handle()
    from benchmarks.harness import l2_flush_buffer, run_footer

    flush = l2_flush_buffer()
    leads = []
    print(f"shapes: {', '.join(f'{b} {m}x{n}x{k}' for b, (m, n, k) in BUCKETS.items())}")
    print("dt   AB  bucket  epi    ours  backend   ours/backend [p25 median p75]  (TFLOP/s, cold L2)")
    for cell in chosen:
        try:
            r = measure(cell, args.rounds, flush, torch, handle)
        except Exception as exc:  # a cell either side cannot serve is reported, the rest still run
            print(
                f"{cell[0]} {cell[1]} {cell[2]:6s} {cell[3]:5s}  not measured: {type(exc).__name__}: {str(exc)[:160]}"
            )
            continue
        p25, med, p75 = r["ratio"]
        if p75 < 1.0:
            leads.append(cell)
        print(f"{cell[0]} {cell[1]} {cell[2]:6s} {cell[3]:5s} {r['ours']:6.1f} {r['backend']:8.1f}   "
              f"{p25:.3f} {med:.3f} {p75:.3f}{'   backend leads' if p75 < 1.0 else ''}", flush=True)  # fmt: skip
    print(f"_BACKEND_LEADS cells (backend faster in 3 of 4 rounds): {set(leads) or 'none'}")
    print(run_footer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
