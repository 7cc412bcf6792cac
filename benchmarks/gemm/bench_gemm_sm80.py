"""Timing of the portable SM80 GEMM (kernels/gemm_sm80.py) next to cuBLAS and gemm_sm90, one run.

    python -m benchmarks.gemm.bench_gemm_sm80 [--rounds 3]

bf16, A row-major, B = W^T (column-major), C row-major; plain and +bias+gelu_approx_tanh. Every
column of a row is timed in interleaved rounds (median of do_bench medians), each output checked
first against torch (relative Frobenius error < 2e-2). The SM80 kernel is compiled for the GPU's own
arch (sm_90 on the H200). Prints a table of TFLOP/s and ratios to cuBLAS last.
"""

from __future__ import annotations

import argparse
import functools
import sys

import torch
import torch.nn.functional as F

from benchmarks.gemm.bench_gemm import make_call, unfused_bias_gelu
from benchmarks.harness import interleaved, run_footer, tflops
from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue
from pygraph_gemm.kernels.frame import kernel_frame, kernel_layout

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (128, 4096, 4096), (16, 4096, 4096)]
SM80_KNOBS = {
    "128x128x32": GemmKnobs(tile_m=128, tile_n=128, tile_k=32),
    "128x128x64": GemmKnobs(tile_m=128, tile_n=128, tile_k=64),
    "64x128x64": GemmKnobs(tile_m=64, tile_n=128, tile_k=64),
    "64x64x32": GemmKnobs(tile_m=64, tile_n=64, tile_k=32),
}
SM90_KNOBS = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8)


@functools.cache
def _compiled(knobs, kepi, lay, arch):
    from pygraph_gemm.kernels.gemm_sm80 import compile_sm80

    return compile_sm80(knobs, kepi, lay, arch=arch)


def _default_arch() -> str:
    """The GPU's own architecture: a cubin loads only on its own major (sm_90 on the H200)."""
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def sm80_call(knobs, spec, a, b, c, bias, arch):
    """A launch of the SM80 kernel on 2-D operands (the SM90 engine's user->kernel mapping)."""
    m, k = a.shape
    n = b.shape[1]
    st = lambda t: (0, t.stride(0), t.stride(1))  # noqa: E731
    lay = kernel_layout(knobs.swap_ab, a.dtype, c.dtype, st(a), st(b), st(c), m, n, k, 1)
    fn = _compiled(knobs, KernelEpilogue.from_spec(spec, knobs.swap_ab), lay, arch)
    order, geometry = kernel_frame(lay, knobs.swap_ab)
    ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), bias.data_ptr() if spec.bias else 0, 0, 0, 0, 0)
    geo = geometry(m, n, k, 1, st(a), st(b), st(c), (0, 0, 0), (0, 0, 0))
    args = (*(ptrs[i] for i in order), *geo)
    return lambda: fn(*args, torch.cuda.current_stream().cuda_stream)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    args = ap.parse_args(argv)
    arch = _default_arch()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    torch.manual_seed(0)
    lines, log = [], []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for fused in (False, True):
            spec = EpilogueSpec(
                bias=fused, activation="gelu_approx_tanh" if fused else "none", vec_dtype="bf16"
            )
            ref = (F.gelu(torch.addmm(bias, a, b), approximate="tanh") if fused else a @ b).float()
            columns, outs = {}, {}
            for name, kn in SM80_KNOBS.items():
                c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                columns[f"sm80 {name}"], outs[f"sm80 {name}"] = sm80_call(kn, spec, a, b, c, bias, arch), c
            c90 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            columns["sm90"], outs["sm90"] = make_call(SM90_KNOBS, spec, a, b, c90, bias), c90
            for name, call in list(columns.items()):
                outs[name].fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                err = ((outs[name].float() - ref).norm() / ref.norm()).item()
                if not err < 2e-2:
                    log.append(f"BAD {m}x{n}x{k} fused={fused} {name}: err={err}")
                    del columns[name]
            if fused:
                columns["unfused"] = functools.partial(unfused_bias_gelu, bias, a, b)
                columns["cublas"] = functools.partial(torch.addmm, bias, a, b)
            else:
                columns["cublas"] = functools.partial(torch.matmul, a, b)
            times = interleaved(columns, args.rounds, log)
            t_cub = times["cublas"]
            op = "bias+gelu" if fused else "plain"
            for name, t in times.items():
                lines.append(
                    f"{m:>5}x{n:<5}x{k:<5} {op:9} {name:16} {tflops(m, n, k, t):6.0f} TFLOP/s  "
                    f"{t * 1e3:8.1f} us  {t_cub / t:5.2f}x cuBLAS"
                )
            print("\n".join(lines[-len(times) :]), flush=True)
    print("\n".join(log))
    print(f"\nSM80 kernel compiled for {arch}; {run_footer()}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
