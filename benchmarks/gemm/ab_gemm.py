"""Paired A/B of gemm_sm90 knob sets (and the cuBLAS anchors) over many short interleaved rounds.

    python -m benchmarks.gemm.ab_gemm --knobs 128x256c21z8,128x256c21z8g2 --shapes 8192x8192x8192 --epilogue bias+gelu --rounds 31

Single sweeps and even 5-round medians moved by +-2% on the H200 (the part is power-capped, so its
clock drifts with what ran just before). Here every round times each column once, ``--reps``
back-to-back launches between two CUDA events, in a rotated order; the columns of one round ran
within a few ms of each other, so their ratio cancels the drift. Printed per column: median
TFLOP/s, and the median with the 25th-75th percentile of the per-round time ratio against the first
column (>1: faster than it) and against the unfused addmm-then-gelu (the fused floor: at least 1.05x it at 8192^3).

Bursts of 10 launches do not reach the clock a kernel settles to on its own: on this power-capped
part a column that draws more power borrows headroom from the columns around it. To compare kernels
as they run in a long job, give every column about a second per round (``--reps 600`` at 8192^3;
scripts/device/floor_gemm.sh). Ping-pong 128x128 read 1-4% ahead of the cooperative 128x256 in
bursts and 2-5% behind it sustained.

A refactor that changes the SASS (not the math) is timed against the kernels it replaces in the same
process: ``--tree-b DIR`` loads another copy of the ``pygraph_gemm/kernels`` package (e.g. ``git
archive main packages/engines-gemm/src/pygraph_gemm/kernels | tar -x``), and a label ending in
``@b`` is built from it (sustained, as scripts/device/floor_gemm.sh times them:
``KNOBS=128x256c21z8g2vf,128x256c21z8g2vf@b AB_ARGS="--tree-b DIR" bash scripts/device/floor_gemm.sh``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.gemm.bench_gemm import Plan, anchor_calls, make_call
from benchmarks.gemm.shapes import parse_shape
from benchmarks.harness import l2_flush_buffer, paired_rounds, ratio_lines, run_footer
from pygraph_gemm.kernels.config import EpilogueSpec, dtype_name
from pygraph_gemm.knob_labels import parse_knob_label

EPILOGUES = {"plain": EpilogueSpec(), "bias+gelu": EpilogueSpec(bias=True, activation="gelu_approx_tanh")}
TREE_B = "@b"  # label suffix: the kernel of the --tree-b sources


def load_tree_b(kernels_dir: str):
    """``kernels_dir`` (another copy of pygraph_gemm/kernels) imported as ``pygraph_gemm.kernels_b``:
    its modules import each other relatively and hash their own files into the cache key, so both
    trees' kernels live in one process and one cache. Returns its Plan class."""
    init = os.path.join(kernels_dir, "__init__.py")
    if not os.path.isfile(init):
        raise FileNotFoundError(
            f"--tree-b {kernels_dir!r}: no __init__.py (want a pygraph_gemm/kernels copy)"
        )
    name = "pygraph_gemm.kernels_b"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[kernels_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.plan").Plan


def plan_for(label: str, plan_b) -> tuple[Any, str]:
    """The Plan class that builds ``label`` and the label without its tree suffix."""
    if not label.endswith(TREE_B):
        return Plan, label
    if plan_b is None:
        raise ValueError(f"knob label {label!r} names the second tree: pass --tree-b")
    return plan_b, label[: -len(TREE_B)]


def columns(m: int, n: int, k: int, labels: list[str], epilogue: str, dtype, plan_b=None) -> dict:
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t()  # B = W^T, W row-major (N, K)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    spec = EPILOGUES[epilogue]
    if spec.bias:  # the bias in the operands' dtype
        spec = EpilogueSpec(bias=True, activation=spec.activation, vec_dtype=dtype_name(dtype))
    cols = {}
    for label in labels:
        plan_cls, knobs = plan_for(label, plan_b)
        cols[label] = make_call(parse_knob_label(knobs), spec, a, b, c, bias, plan_cls=plan_cls)
    anchors = anchor_calls(a, b, bias, c)
    if epilogue == "plain":
        cols["cublas mm"] = anchors["mm"]
    else:
        cols["lt fused"] = anchors["lt_fused"]
    cols["cublas addmm"] = anchors["addmm"]
    cols["unfused"] = anchors["unfused"]
    ref = F.gelu(torch.addmm(bias.float(), a.float(), b.float()), approximate="tanh")
    for label in labels:  # a wrong kernel is not timed: check each against fp32 first
        c.fill_(float("nan"))
        cols[label]()
        want = ref if spec.bias else (a.float() @ b.float())
        err = ((c.float() - want).norm() / want.norm()).item()
        if not err < 1e-2:
            raise AssertionError(f"{label} at {m}x{n}x{k} {epilogue}: relative error {err:.2e}")
    return cols


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knobs", required=True, help="comma-separated knob labels (pygraph_gemm.knob_labels)")
    ap.add_argument("--shapes", default="8192x8192x8192", help="comma-separated MxNxK")
    ap.add_argument("--epilogue", default="bias+gelu", choices=sorted(EPILOGUES))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--reps", type=int, default=10, help="launches timed together per column per round")
    ap.add_argument(
        "--flush", action="store_true", help="time each launch alone from a cold L2 (the tables' way)"
    )
    ap.add_argument("--tree-b", help="another pygraph_gemm/kernels copy: labels ending in @b build from it")
    args = ap.parse_args(argv)
    plan_b = load_tree_b(args.tree_b) if args.tree_b else None
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    labels = args.knobs.split(",")
    flush = l2_flush_buffer() if args.flush else None
    for shape in args.shapes.split(","):
        m, n, k = parse_shape(shape)
        cols = columns(m, n, k, labels, args.epilogue, dtype, plan_b)
        rounds = paired_rounds(cols, args.rounds, args.reps, flush)
        first = next(iter(cols))
        print(
            f"\n{shape} {args.dtype} {args.epilogue}, {args.rounds} rounds x {args.reps} launches"
            + (" (each from a cold L2)" if args.flush else "")
            + f": TFLOP/s, then per-round ratio [p25 median p75] vs {first} and vs unfused"
        )
        print("\n".join(ratio_lines(rounds, [first, "unfused"], (m, n, k))))
    print(run_footer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
