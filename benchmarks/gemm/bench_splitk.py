"""Split-K timing for the SM90 CuTe DSL GEMM on the small-M shape (128x4096x4096 by default).

    python -m benchmarks.gemm.bench_splitk [--m 128 --n 4096 --k 4096]

Timed as bench_gemm times (`benchmarks.harness.device_time`: CUDA events, warm-up, L2 flushed
between reps, median).
A is (M, K) row-major, B the transpose of an (N, K) row-major weight (nn.Linear layout). Rows are
knob sets (split_k 1/2/4/8); 'ours' = the plan's own workspace, 'caller ws' = a caller workspace
filled with garbage once (the partials are written before they are read; nothing is reset per
call). Both take the tile semaphores from the stream's engine-owned buffer. Baselines: torch.matmul,
torch._addmm_activation(use_gelu=True) (cuBLASLt fused), unfused gelu_tanh(addmm).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.gemm.bench_gemm import make_call, unfused_bias_gelu
from benchmarks.harness import device_time, tflops
from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, workspace_bytes

G = GemmKnobs
CONFIGS = [
    ("sk1 64x64", G(tile_m=64, tile_n=64)),
    ("sk2 128x64", G(tile_m=128, tile_n=64, split_k=2)),
    ("sk2 128x128", G(tile_m=128, tile_n=128, split_k=2)),
    ("sk4 128x128", G(tile_m=128, tile_n=128, split_k=4)),
    ("sk4 128x64", G(tile_m=128, tile_n=64, split_k=4)),
    ("sk8 128x256", G(tile_m=128, tile_n=256, split_k=8)),
]


def specs(dn):
    return {
        "plain": EpilogueSpec(),
        "bias+gelu": EpilogueSpec(bias=True, activation="gelu_approx_tanh", vec_dtype=dn),
    }


def tensors(m, n, k, dt, dev="cuda"):
    a = torch.randn(m, k, device=dev).to(dt)
    w = torch.randn(n, k, device=dev).to(dt)
    b = w.t()
    bias = torch.randn(n, device=dev).to(dt)
    c = torch.empty(m, n, device=dev, dtype=dt)
    return a, b, bias, c


def caller_ws_call(knobs, spec, a, b, c, bias):
    """Launch with a caller-owned workspace for the partials, filled with garbage once."""
    m, n = a.shape[0], b.shape[1]
    ws = torch.full((max(256, workspace_bytes(m, n, 1, knobs)),), 0x7F, dtype=torch.uint8, device=a.device)
    run = make_call(knobs, spec, a, b, c, bias, workspace=ws)
    run.ws = ws
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    args = ap.parse_args(argv)
    m, n, k = args.m, args.n, args.k
    rows = []
    for dn, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        torch.manual_seed(0)
        a, b, bias, c = tensors(m, n, k, dt)
        ref_plain = torch.matmul(a, b)
        bd = bias
        ref_fused = unfused_bias_gelu(bd, a, b)
        base = {
            "plain": {"cublas": device_time(lambda a=a, b=b: torch.matmul(a, b))},
            "bias+gelu": {
                "addmm": device_time(lambda a=a, b=b, bd=bd: torch.addmm(bd, a, b)),
                "lt_fused": device_time(
                    lambda a=a, b=b, bd=bd: torch._addmm_activation(bd, a, b, use_gelu=True)
                ),
                "unfused": device_time(lambda a=a, b=b, bd=bd: unfused_bias_gelu(bd, a, b)),
            },
        }
        for op, spec in specs(dn).items():
            ref = ref_plain if op == "plain" else ref_fused
            for name, kn in CONFIGS:
                c.fill_(float("nan"))
                call = make_call(kn, spec, a, b, c, bias)
                t = device_time(call)
                err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                tm = float("nan")
                if kn.split_k > 1:
                    c.fill_(float("nan"))
                    mc = caller_ws_call(kn, spec, a, b, c, bias)
                    tm = device_time(mc)
                    err = max(err, ((c.float() - ref.float()).norm() / ref.float().norm()).item())
                rows.append((dn, op, name, t, tm, err, base[op]))
                print(
                    f"{dn} {op:9s} {name:12s} {t * 1e3:7.2f} us  caller ws {tm * 1e3:7.2f} us  "
                    f"err vs torch {err:.1e}",
                    flush=True,
                )
    print(f"\nTABLE split-K {m}x{n}x{k} (TFLOP/s; median of CUDA-event reps, L2 flushed; us in brackets)")
    print(
        f"{'dt':4s} {'op':9s} {'cfg':12s} {'ours':>14s} {'caller ws':>9s} {'cuBLAS':>7s} {'LtFuse':>7s} "
        f"{'unfus':>7s} {'/cuBLAS':>7s} {'/unf':>5s}  err"
    )
    for dn, op, name, t, tm, err, bs in rows:
        tf = lambda x: tflops(m, n, k, x)  # noqa: E731
        cb = bs.get("cublas", bs.get("addmm"))
        lt = bs.get("lt_fused", float("nan"))
        un = bs.get("unfused", float("nan"))
        print(
            f"{dn:4s} {op:9s} {name:12s} {tf(t):6.0f} ({t * 1e3:5.1f}) {tf(tm):9.0f} {tf(cb):7.0f} {tf(lt):7.0f} "
            f"{tf(un):7.0f} {cb / t:7.2f} {un / t if un == un else float('nan'):5.2f}  {err:.0e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
