"""Where a large fused GEMM's time goes: the main loop alone, each epilogue piece, and the anchors.

    PYTHONPATH=packages/engines-gemm/src:benchmarks python benchmarks/gemm_epilogue_probe.py [--out DIR]

For each shape (bf16, A row-major, B = W^T), the knob sets given (--knobs) each compiled with the
epilogues given (--epilogues), all timed in interleaved rounds with cuBLAS's mm / addmm, cuBLASLt's
fused bias+gelu and the unfused addmm-then-gelu:

  skip        the main loop alone (a probe build that writes no output but keeps every
              accumulator live; timing only; --skip names the knob sets that get it)
  plain       + convert and store C
  bias        + bias along N
  gelu        + gelu(tanh), no bias
  bias+gelu   the fused row of bench_gemm.py

Differences between columns place the epilogue's cost; a shape whose tile count is a whole number of
waves (7680x8448x8192: 1980 tiles of 128x256 = 15 x 132) against one that is not (8192^3: 2048 =
15.5 x 132) places the wave-quantization loss. The kernels cuBLAS picks are named via the profiler.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import torch
import torch.nn.functional as F
from bench_gemm import anchor_calls, interleaved, make_call, tflops

from pygraph_gemm.kernels import compile_cache
from pygraph_gemm.kernels.config import EpilogueSpec
from pygraph_gemm.kernels.gemm_sm90 import Sm90Gemm
from pygraph_gemm.knob_labels import parse_knob_label

SHAPES = [(8192, 8192, 8192), (7680, 8448, 8192), (16384, 4096, 4096), (4096, 4096, 4096)]
# tile x tile, cluster MxN, raster n, swizzle z, split tail t, stagger g, 64-wide epilogue sub-tiles e
# (pygraph_gemm.knob_labels). Earlier probes compared raster/swizzle/tile shapes and the swizzles that
# cut DRAM traffic; this set compares lockstep with 3 A/B stages (4-slot store ring), with 4 stages (3- and
# 2-slot rings, r3/r2) and the staggered warpgroups (g2, 4 stages), NOTES.md v9-v10.
KNOBS = "128x256c21z8,128x256c21z8r3,128x256c21z8r2,128x256c21z8g2"
EPILOGUES = {
    "plain": EpilogueSpec(),
    "bias": EpilogueSpec(bias=True, vec_dtype="bf16"),
    "gelu": EpilogueSpec(activation="gelu_approx_tanh"),
    "bias+gelu": EpilogueSpec(bias=True, activation="gelu_approx_tanh", vec_dtype="bf16"),
}


def variant_call(call, **kernel_attrs):
    """The same launch as ``call`` on a probe build of the kernel with class attributes changed
    (``probe_skip_epilogue=True``: the main loop alone)."""
    _, kargs = call.raw
    plan = call.plan
    saved = {name: getattr(Sm90Gemm, name) for name in kernel_attrs}
    for name, value in kernel_attrs.items():
        setattr(Sm90Gemm, name, value)
    try:
        probe = compile_cache.compile_uncached(plan.knobs, plan.kepi, plan.klay, compile_cache.ARCH)
    finally:
        for name, value in saved.items():
            setattr(Sm90Gemm, name, value)
    return lambda: probe(*kargs)


def cublas_kernel_names(fns: dict) -> dict:
    from torch.profiler import ProfilerActivity, profile

    names = {}
    for label, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names[label] = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--knobs", default=KNOBS, help="comma-separated knob labels (pygraph_gemm.knob_labels)")
    ap.add_argument("--epilogues", default=",".join(EPILOGUES), help=f"comma-separated of {list(EPILOGUES)}")
    ap.add_argument(
        "--skip",
        default=None,
        help="knob labels that also get the main-loop-alone probe build (default: the first)",
    )
    ap.add_argument("--no-names", action="store_true", help="do not profile cuBLAS's kernel names")
    args = ap.parse_args(argv)
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    knob_sets = {label: parse_knob_label(label) for label in args.knobs.split(",")}
    skip_for = set(args.skip.split(",")) if args.skip is not None else {next(iter(knob_sets))}

    epilogues = {name: EPILOGUES[name] for name in args.epilogues.split(",")}
    torch.manual_seed(0)
    lines, log = [], []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        b = w.t()
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        exact = a.float() @ b.float()
        cols = {}
        for klabel, kn in knob_sets.items():
            for name, spec in epilogues.items():
                c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                try:
                    call = make_call(kn, spec, a, b, c, bias)
                except Exception as e:
                    log.append(f"ERR {m}x{n}x{k} {klabel} {name}: {type(e).__name__}: {e}")
                    continue
                label = f"{klabel} {name}"
                c.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                ref = exact + bias.float() if spec.bias else exact
                if spec.activation != "none":
                    ref = F.gelu(ref, approximate="tanh")
                err = ((c.float() - ref).norm() / ref.norm()).item()
                log.append(f"{m}x{n}x{k} {label}: rel err {err:.2e}")
                if not err < 1e-2:
                    log.append(f"BAD {m}x{n}x{k} {label}")
                    continue
                cols[label] = call
                if name == "plain" and klabel in skip_for:
                    cols[f"{klabel} skip"] = variant_call(call, probe_skip_epilogue=True)

        del exact
        anchors = anchor_calls(a, b, bias, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        cols["cublas mm"] = anchors["mm"]
        cols["cublas addmm"] = anchors["addmm"]
        cols["lt fused"] = anchors["lt_fused"]
        cols["unfused"] = anchors["unfused"]
        times = interleaved(cols, args.rounds, log)
        tf = {name: tflops(m, n, k, t) for name, t in times.items()}
        head = len(lines)
        lines.append(f"{m}x{n}x{k} bf16: TFLOP/s, and vs the unfused addmm+gelu")
        for name, v in tf.items():
            lines.append(f"  {name:24} {v:7.1f}  {v / tf['unfused']:5.3f}  {times[name] * 1e3:8.1f} us")
        print("\n".join(lines[head:]), flush=True)
        if args.no_names:
            continue
        names = cublas_kernel_names(
            {
                "mm": functools.partial(torch.matmul, a, b),
                "addmm": functools.partial(torch.addmm, bias, a, b),
                "addmm_activation": functools.partial(torch._addmm_activation, bias, a, b, use_gelu=True),
            }
        )
        lines.append(f"kernels cuBLAS runs at {m}x{n}x{k} bf16:")
        for label, ks in names.items():
            lines.append(f"  {label}: {ks}")
    lines.append(f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d %H:%M')}")
    text = "\n".join([*log, "", *lines])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gemm_epilogue_probe.txt"), "w") as f:
            f.write(text + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
