"""Which kernel the anchors launch: cuBLAS's mm, its bias addmm and cuBLASLt's fused bias+gelu, per
shape and dtype, with each kernel's mean time under the profiler.

nvjet's kernel names spell its tile, stage count and cluster (``nvjet_sm90_tst_64x64_64x13_2x1_v_bz``:
64x64 tiles, 64-deep k-blocks, 13 stages, a 2x1 cluster), so this is the quickest way to learn what
the anchor does in a cell where our rule trails it. The names are in cuBLAS's column-major frame,
where torch's C = A B runs as C^T = B^T A^T: nvjet's M is our N (its ``128x64 ... 1x2`` at
1024x1024x4096 is our 64x128 tile in a 2x1 cluster).

    PYTHONPATH=benchmarks python benchmarks/anchor_kernels.py --shapes 1024x1024x4096,200x3000x4104
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from functools import partial

from gemm_shapes import parse_shape


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"MxNxK,MxNxK"`` as tuples; a clear error for anything else."""
    shapes = [parse_shape(item) for item in text.split(",") if item]
    if not shapes:
        raise ValueError(f"no shape in {text!r}")
    return shapes


def device_kernels(events: Iterable) -> list[tuple[str, float]]:
    """(name, mean device time in us) of every GPU kernel among profiler ``key_averages()`` rows,
    slowest first (copies, memsets and CPU-side rows are left out)."""
    rows = []
    for e in events:
        device_us = getattr(e, "device_time", None)
        if device_us is None:
            device_us = getattr(e, "cuda_time", 0.0)
        name = e.key
        if device_us and not name.startswith(("Memcpy", "Memset", "aten::", "cuda")):
            rows.append((name, float(device_us)))
    return sorted(rows, key=lambda r: -r[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    # the cells where our rule trails cuBLAS most (kernels/NOTES.md "Open / next")
    ap.add_argument(
        "--shapes",
        default="1024x1024x4096,200x3000x4104,256x8192x2048,1100x3000x4096,320x3000x4096,640x3000x4096,384x5120x4096",
    )
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        ap.error(str(exc))
    import torch
    from torch.profiler import ProfilerActivity, profile

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dname in args.dtypes.split(","):
        if dname not in dtypes:
            ap.error(f"--dtypes: {dname!r} not in {sorted(dtypes)}")
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=dtypes[dname])
            b = torch.randn(
                n, k, device="cuda", dtype=dtypes[dname]
            ).t()  # a weight's transpose, as bench_gemm
            bias = torch.randn(n, device="cuda", dtype=dtypes[dname])
            calls = {
                "mm": partial(torch.mm, a, b),
                "addmm": partial(torch.addmm, bias, a, b),
                "lt_fused": partial(torch._addmm_activation, bias, a, b, use_gelu=True),
            }
            for label, call in calls.items():
                call()  # pick and load the kernel outside the profile
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.reps):
                        call()
                    torch.cuda.synchronize()
                kernels = device_kernels(prof.key_averages())
                listed = "; ".join(f"{name} {us:.1f} us" for name, us in kernels) or "none recorded"
                print(f"{dname} {m}x{n}x{k} {label:8s} {listed}", flush=True)
    print(f"device: {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
