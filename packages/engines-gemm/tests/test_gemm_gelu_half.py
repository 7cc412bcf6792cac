"""tanh-gelu from half the pre-activation (`config.gelu_from_half`): where the kernel takes it
(config level; no GPU, no DSL import) and why it changes no value. The device runs are
gemm_cases.gelu_from_half's cases."""

import math

import pytest

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue, gelu_from_half

ON = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
GT = "gelu_approx_tanh"


def _epi(swap_ab: bool = False, **spec) -> KernelEpilogue:
    return KernelEpilogue.from_spec(EpilogueSpec(**spec), swap_ab=swap_ab)


@pytest.mark.parametrize(
    "spec", [dict(bias=True, activation=GT), dict(bias=True, row_scale=True, col_scale=True, activation=GT)]
)
def test_staged_bias_then_tanh_gelu_takes_it(spec):
    assert ON.validate() is None
    assert gelu_from_half(ON, _epi(**spec))


@pytest.mark.parametrize(
    "spec",
    [
        dict(bias=True, activation="gelu"),  # erf gelu has no half form
        dict(activation=GT),  # no bias to fold the half into
        dict(bias=True, residual=True, activation=GT),  # the residual comes after the bias
        dict(bias=True, activation=GT, aux_out=True),  # aux stores the whole pre-activation
    ],
)
def test_other_epilogues_keep_the_plain_path(spec):
    assert not gelu_from_half(ON, _epi(**spec))


def test_bias_along_the_kernels_m_is_not_staged():
    # swap_ab puts the bias along the kernel's M: loaded per row, never staged, nothing to halve
    assert not gelu_from_half(ON, _epi(swap_ab=True, bias=True, activation=GT))


def test_it_follows_the_staged_bias():
    # wherever the bias is not staged (ping-pong tiles, split-K) the plain path runs
    assert gelu_from_half(GemmKnobs(), _epi(bias=True, activation=GT))
    assert not gelu_from_half(
        GemmKnobs(tile_m=128, tile_n=128, pingpong=True), _epi(bias=True, activation=GT)
    )
    assert not gelu_from_half(GemmKnobs(tile_m=128, tile_n=64, split_k=2), _epi(bias=True, activation=GT))


def test_constants_move_by_powers_of_two():
    # u = h (2 c0 + 8 c1 h^2) with h = x / 2 equals x (c0 + c1 x^2) step by step: each product and
    # sum is the other path's times a power of two, so fp32 rounds them the same
    c0 = math.sqrt(2.0 / math.pi)
    c1 = c0 * 0.044715
    for a, b in ((2.0 * c0, c0), (8.0 * c1, c1)):
        ratio = a / b
        assert ratio == 2.0 ** round(math.log2(ratio))
