"""benchmarks.gemm.bench_gemm.make_call (the raw kernel call every timing script uses) refuses a problem
the kernel cannot serve, with the product's own reason, before any plan is built (no GPU: the check
reads shapes, strides and pointers only)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("cutlass")

import torch

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs


def test_an_output_row_breaking_tma_alignment_is_refused_with_the_reason():
    from benchmarks.gemm import bench_gemm as bench

    a = torch.empty(200, 4096, dtype=torch.bfloat16)
    b = torch.empty(1500, 4096, dtype=torch.bfloat16).t()  # K-major B: aligned
    c = torch.empty(200, 1500, dtype=torch.bfloat16)  # rows of 3000 bytes
    with pytest.raises(ValueError, match=r"64x64c21 at 200x1500x4096: .*3000 bytes is not a multiple of 16"):
        bench.make_call(GemmKnobs(tile_m=64, tile_n=64, cga_m=2), EpilogueSpec(), a, b, c, None)
