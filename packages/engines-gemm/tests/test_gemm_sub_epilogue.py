"""The epilogue's math per store sub-tile (GemmKnobs.sub_epilogue): where the kernel takes it (config
level; no GPU, no DSL import). The device runs are check_gemm's sub_epilogue cases."""

import pytest

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue, sub_epilogue

ON = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, sub_epilogue=True)


def _epi(**spec) -> KernelEpilogue:
    return KernelEpilogue.from_spec(EpilogueSpec(**spec), swap_ab=False)


@pytest.mark.parametrize(
    "spec",
    [
        dict(bias=True, activation="gelu_approx_tanh"),
        dict(bias=True),
        dict(activation="silu"),
        dict(row_scale=True, col_scale=True, residual=True, activation="gelu"),
    ],
)
def test_epilogues_with_math_take_it(spec):
    assert ON.validate() is None
    assert sub_epilogue(ON, _epi(**spec))


def test_nothing_to_compute_leaves_it_off():
    assert not sub_epilogue(ON, _epi())


def test_aux_output_stands_it_down():
    # the aux output stores the pre-activation from the registers the activation overwrites
    assert not sub_epilogue(ON, _epi(bias=True, activation="gelu_approx_tanh", aux_out=True))


def test_off_by_default():
    assert not GemmKnobs().sub_epilogue
    assert not sub_epilogue(GemmKnobs(), _epi(bias=True, activation="gelu_approx_tanh"))
