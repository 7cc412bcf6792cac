"""The portable SM80 GEMM (kernels/gemm_sm80.py) compiles for sm_80 on a CPU-only machine.

Numerics need a GPU: test_gemm_sm80_numerics.py runs them on the device.
"""

from __future__ import annotations

import pytest

from pygraph_gemm.kernels.config import GemmKnobs, KernelEpilogue, KernelLayout

pytest.importorskip("cutlass.cute")

_CONFIGS = {
    "bf16_row_major": (
        GemmKnobs(tile_m=128, tile_n=128, tile_k=32),
        KernelLayout("bf16", "bf16", "k", "k", "n"),
        KernelEpilogue(),
    ),
    "fp16_col_major_ab_bias_gelu_aux": (
        GemmKnobs(tile_m=64, tile_n=128, tile_k=64),
        KernelLayout("fp16", "fp16", "m", "n", "n"),
        KernelEpilogue(bias_n=True, act="gelu", aux_out=True, aux_dtype="fp16"),
    ),
    "fp32_out_residual_scales": (
        GemmKnobs(tile_m=128, tile_n=128, tile_k=32),
        KernelLayout("bf16", "fp32", "k", "k", "m", False, True),
        KernelEpilogue(scale_m=True, scale_n=True, residual=True),
    ),
}


@pytest.mark.parametrize("name", list(_CONFIGS))
def test_sm80_gemm_compiles(name):
    from pygraph_gemm.kernels.gemm_sm80 import can_implement_sm80, compile_sm80

    knobs, lay, epi = _CONFIGS[name]
    assert can_implement_sm80(knobs, lay, epi) is None
    fn = compile_sm80(knobs, epi, lay, arch="sm_80")
    assert callable(fn)


def test_sm80_declines_what_it_cannot_build():
    from pygraph_gemm.kernels.gemm_sm80 import can_implement_sm80

    lay, epi = KernelLayout("bf16", "bf16", "k", "k", "n"), KernelEpilogue()
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=256), lay, epi)
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=128, tile_k=128), lay, epi)
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=128, tile_k=32, cga_m=2), lay, epi)
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=128, tile_k=32, split_k=2), lay, epi)
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=128, tile_k=64, stages=8), lay, epi)
    assert can_implement_sm80(GemmKnobs(tile_m=128, tile_n=128, tile_k=32), lay, epi) is None
