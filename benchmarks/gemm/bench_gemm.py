"""Benchmark: SM90 CuTe DSL GEMM (pygraph_gemm.kernels) against cuBLAS / cuBLASLt in the same run.

    python -m benchmarks.gemm.bench_gemm [--quick] [--graph] [--out DIR]

Timing: `benchmarks.harness.device_time` (CUDA events, L2 flushed between reps, median). The knob
sets are swept once to pick ours; then every column is timed again in --rounds interleaved rounds
(order rotated each round) and the median per column is reported. A is (M, K) row-major, B is the
transpose of an (N, K) row-major weight (the nn.Linear layout). Columns:
  ours       best of a few knob sets (named in the 'cfg' column), plain or fused bias+gelu(tanh)
  cublas     torch.matmul (plain rows) / torch.addmm (bias rows, reference only)
  lt_fused   torch._addmm_activation(bias, a, b, use_gelu=True) (cuBLASLt GELU epilogue)
  unfused    F.gelu(torch.addmm(bias, a, b), approximate='tanh')
EXTRA_COLUMNS: name -> fn(a, b, bias, fused) -> callable, for other backends (e.g. cuDNN) to add.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys

import torch
import torch.nn.functional as F

from benchmarks.harness import burst_cost, device_time, interleaved, run_footer, tflops
from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, can_implement
from pygraph_gemm.kernels.plan import Plan
from pygraph_gemm.knob_labels import knob_label

EXTRA_COLUMNS: dict = {}  # hook: the engine layer may register e.g. a cuDNN column here

SHAPES = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 8192, 1024),
    (4096, 14336, 4096),
    (16384, 4096, 4096),
    (16, 4096, 4096),
    (128, 4096, 4096),
]


# the long-K rule's config without the GPC order of its clusters
_LONG_K = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True)


def candidates(m, n, k):
    if m <= 64:
        return [
            GemmKnobs(tile_m=128, tile_n=max(16, 16 * ((m + 15) // 16)), swap_ab=True),
            GemmKnobs(tile_m=64, tile_n=max(16, 16 * ((m + 15) // 16)), swap_ab=True),
            GemmKnobs(tile_m=64, tile_n=64),
            GemmKnobs(tile_m=64, tile_n=64, cga_n=4),
        ]
    if m <= 256:
        return [
            GemmKnobs(tile_m=64, tile_n=64, cga_m=2),  # what the heuristics name first at M=128
            GemmKnobs(
                tile_m=128, tile_n=64, split_k=2
            ),  # the heuristics named it at M = 128 before 64x64 in a 2x1 cluster
            GemmKnobs(tile_m=128, tile_n=64),
            GemmKnobs(tile_m=64, tile_n=64),
        ]
    return [
        # what the heuristics name for K > 1024, then without the GPC order of its clusters, then
        # without the L2 order (serpentine bands, K flipped)
        dataclasses.replace(_LONG_K, place_order=True),
        _LONG_K,
        GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2),
        GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8),
        GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=3),
        GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=4),
        GemmKnobs(tile_m=128, tile_n=128, cga_m=2, pingpong=True),  # named for K <= 1024
        GemmKnobs(tile_m=128, tile_n=128, cga_m=2, swizzle=8, pingpong=True),
    ]


def unfused_bias_gelu(bias, a, b):
    return F.gelu(torch.addmm(bias, a, b), approximate="tanh")


def anchor_calls(a, b, bias, c) -> dict:
    """The anchors every GEMM benchmark here times, by name: cuBLAS's mm (into ``c``) and addmm,
    cuBLASLt's fused bias+gelu(tanh) epilogue, and the unfused addmm-then-gelu."""
    return {
        "mm": functools.partial(torch.matmul, a, b, out=c),
        "addmm": functools.partial(torch.addmm, bias, a, b),
        "lt_fused": functools.partial(torch._addmm_activation, bias, a, b, use_gelu=True),
        "unfused": functools.partial(unfused_bias_gelu, bias, a, b),
    }


def make_call(knobs, spec, a, b, c, bias, workspace=None, plan_cls=Plan):
    """The kernel called directly on 2-D operands. ``workspace`` (split-K only): a caller-owned
    buffer for the fp32 partials; None: the plan's own. Semaphores: the stream's engine-owned ones.
    ``plan_cls``: another source tree's Plan (ab_gemm.py --tree-b)."""
    st = lambda t: (0, t.stride(0), t.stride(1))  # noqa: E731
    m, k = a.shape
    n = b.shape[1]
    # the raw plan reads pointers and strides as given (the engine checked them at check_support)
    why = can_implement(
        m, n, k, 1, a.dtype, b.dtype, c.dtype, st(a), st(b), st(c), a.data_ptr(), b.data_ptr(), c.data_ptr(),
        knobs, spec,
    )  # fmt: skip
    if why:
        raise ValueError(f"{knob_label(knobs)} at {m}x{n}x{k}: {why}")
    plan = plan_cls(knobs, spec, a.dtype, c.dtype, st(a), st(b), st(c), m, n, k, 1)
    args = (
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        m,
        n,
        k,
        1,
        st(a),
        st(b),
        st(c),
        bias.data_ptr() if spec.bias else 0,
    )
    s = torch.cuda.current_stream().cuda_stream
    extra = {} if workspace is None else {"workspace": workspace.data_ptr()}
    if plan.needs_workspace:  # resolved once, so the raw call below is launchable as is
        extra = {
            "workspace": extra.get("workspace") or plan.own_workspace(m, n, 1),
            "semaphores": plan.semaphores(m, n, 1, s),
        }

    def call():
        plan(*args, stream=s, **extra)

    call.raw = (plan.fn, plan.kernel_args(*args, stream=s, **extra))
    call.plan = plan
    return call


def host_cost(fn, burst=64):
    # measured after the GPU-bound columns, during which the host CPU mostly waited: half a second of
    # the same calls first (a first reading without it was 11.1 us against 7.2 us)
    return burst_cost(fn, burst, sync=torch.cuda.synchronize, warmup_s=0.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES (default: all)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per column")
    ap.add_argument(
        "--graph",
        action="store_true",
        help="add the cuDNN backend plan and gemm_sm90 through pygraph's graph API as columns",
    )
    args = ap.parse_args(argv)
    if args.graph:
        from benchmarks.gemm.graph_columns import register

        register(EXTRA_COLUMNS)
    dts = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows, log = [], []
    shapes = SHAPES[:2] + SHAPES[5:6] if args.quick else SHAPES
    if args.shapes:
        shapes = [SHAPES[int(i)] for i in args.shapes.split(",")]
    torch.manual_seed(0)
    for dname in args.dtypes.split(","):
        dt = dts[dname]
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt)
            b = w.t()
            bias = torch.randn(n, device="cuda", dtype=dt)
            c = torch.empty(m, n, device="cuda", dtype=dt)
            for fused in (False, True):
                spec = EpilogueSpec(
                    bias=fused, activation="gelu_approx_tanh" if fused else "none", vec_dtype=dname
                )
                ref = (F.gelu(torch.addmm(bias, a, b), approximate="tanh") if fused else a @ b).float()
                best, best_cfg, best_call = float("inf"), "-", None
                for kn in candidates(m, n, k):
                    try:
                        call = make_call(kn, spec, a, b, c, bias)
                        c.fill_(float("nan"))
                        call()
                        torch.cuda.synchronize()
                        err = ((c.float() - ref).norm() / ref.norm()).item()
                        if not err < 2e-2:
                            log.append(f"BAD {dname} {m}x{n}x{k} fused={fused} {kn}: err={err}")
                            continue
                        t = device_time(call)
                        log.append(
                            f"{dname} {m}x{n}x{k} fused={fused} {kn}: {t * 1e3:.1f} us "
                            f"{tflops(m, n, k, t):.0f} TF err={err:.1e}"
                        )
                        if t < best:
                            best, best_cfg, best_call = t, knob_label(kn), call
                    except Exception as e:
                        log.append(f"ERR {dname} {m}x{n}x{k} fused={fused} {kn}: {type(e).__name__}: {e}")
                # The reported numbers: every column re-timed in interleaved rounds (order rotated per
                # round), the median per column, so slow drifts of clock and temperature hit all alike.
                columns = {"ours": best_call} if best_call is not None else {}
                anchors = anchor_calls(a, b, bias, c)
                if fused:
                    columns["lt"] = anchors["lt_fused"]
                    columns["unf"] = anchors["unfused"]
                    columns["cublas"] = anchors["addmm"]
                else:
                    columns["cublas"] = anchors["mm"]
                for name, mk in EXTRA_COLUMNS.items():
                    try:
                        columns[name] = mk(a, b, bias, fused)
                    except Exception as e:
                        log.append(f"ERR extra {name}: {e}")
                times = interleaved(columns, args.rounds, log)
                t_cub = times.get("cublas", float("nan"))
                t_lt = times.get("lt", float("nan"))
                t_unf = times.get("unf", float("nan"))
                best = times.get("ours", float("nan"))
                extra = {name: tflops(m, n, k, times[name]) for name in EXTRA_COLUMNS if name in times}
                row = dict(
                    dt=dname,
                    shape=f"{m}x{n}x{k}",
                    op="bias+gelu" if fused else "plain",
                    ours=tflops(m, n, k, best),
                    cfg=best_cfg,
                    cublas=tflops(m, n, k, t_cub),
                    lt=tflops(m, n, k, t_lt),
                    unf=tflops(m, n, k, t_unf),
                    us=best * 1e3,
                    **extra,
                )
                row["vs_cublas"] = row["ours"] / row["cublas"]
                row["vs_fused"] = row["ours"] / max(row["lt"], row["unf"]) if fused else float("nan")
                row["vs_unf"] = row["ours"] / row["unf"] if fused else float("nan")
                rows.append(row)
                print(_fmt(row), flush=True)
    # host cost of one launch, small problem
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    call = make_call(GemmKnobs(tile_m=128, tile_n=128), EpilogueSpec(), a, w.t(), c, None)
    call()
    hc = host_cost(call)
    fn, kargs = call.raw
    hc_raw = host_cost(lambda: fn(*kargs))
    hc_torch = host_cost(lambda: torch.matmul(a, w.t(), out=c))
    text = [_hdr()] + [_fmt(r) for r in rows]
    text.append(
        f"host cost per launch (256x256x128 bf16, min of 25 x 64-call bursts): ours {hc:.2f} us "
        f"(compiled fn alone, args prebuilt: {hc_raw:.2f} us), torch.matmul {hc_torch:.2f} us"
    )
    text.append(run_footer())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_gemm_log.txt"), "w") as f:
            f.write("\n".join([*log, "", *text]) + "\n")
    print("\n".join(log[-200:]))
    print("\n".join(text))
    return 0


def _hdr():
    return (
        f"{'dt':4} {'shape':17} {'op':9} {'ours':>6} {'cfg':12} {'cuBLAS':>6} {'LtFuse':>6} {'unfus':>6} "
        f"{'/cuBLAS':>7} {'/bestF':>6} {'/unf':>5}"
        + "".join(f" {name:>6} {'/' + name:>7}" for name in EXTRA_COLUMNS)
        + "  (TFLOP/s)"
    )


def _fmt(r):
    return (
        f"{r['dt']:4} {r['shape']:17} {r['op']:9} {r['ours']:6.0f} {r['cfg']:12} {r['cublas']:6.0f} "
        f"{r['lt']:6.0f} {r['unf']:6.0f} {r['vs_cublas']:7.2f} {r['vs_fused']:6.2f} {r['vs_unf']:5.2f}"
        + "".join(
            f" {r.get(name, float('nan')):6.0f} {r['ours'] / r.get(name, float('nan')):7.2f}"
            for name in EXTRA_COLUMNS
        )
    )


if __name__ == "__main__":
    sys.exit(main())
