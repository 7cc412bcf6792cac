"""Shared-memory budget and the staged bias: config-level behaviour (no GPU, no DSL import)."""

import pytest

from pygraph_gemm.kernels.config import (
    EPI_N,
    MAX_SMEM_BYTES,
    EpilogueSpec,
    GemmKnobs,
    KernelEpilogue,
    KernelLayout,
    _smem_bytes,
    bias_staged,
    pick_stages,
)

BF16 = KernelLayout("bf16", "bf16", "k", "k", "n")
RULE = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)  # the long-K rule
BIAS_GELU = KernelEpilogue.from_spec(EpilogueSpec(bias=True, activation="gelu_approx_tanh"), swap_ab=False)
PLAIN = KernelEpilogue.from_spec(EpilogueSpec(), swap_ab=False)


def test_bias_is_staged_on_cooperative_tiles():
    assert bias_staged(GemmKnobs(), BIAS_GELU)
    assert bias_staged(RULE, BIAS_GELU)
    assert bias_staged(GemmKnobs(tile_m=256, tile_n=128, cga_n=2), BIAS_GELU)
    assert bias_staged(GemmKnobs(tile_m=64, tile_n=64), BIAS_GELU)


@pytest.mark.parametrize(
    "knobs, why",
    [
        (GemmKnobs(tile_m=128, tile_n=128, pingpong=True), "ping-pong: a warpgroup per tile"),
        (GemmKnobs(tile_m=128, tile_n=64, split_k=2), "split-K: the last slice runs the epilogue"),
        (GemmKnobs(tile_m=128, tile_n=16), "tile_n below one warp's 32 lanes"),
    ],
)
def test_bias_stays_in_global_memory(knobs, why):
    assert not bias_staged(knobs, BIAS_GELU), why


def test_swapped_bias_runs_along_the_kernels_m_and_is_not_staged():
    swapped = KernelEpilogue.from_spec(EpilogueSpec(bias=True), swap_ab=True)
    assert swapped.bias_m and not swapped.bias_n
    assert not bias_staged(GemmKnobs(tile_m=64, tile_n=128, swap_ab=True), swapped)


def test_no_bias_no_buffers():
    assert not bias_staged(RULE, PLAIN)
    assert _smem_bytes(RULE, BF16, PLAIN, 4) == _smem_bytes(RULE, BF16, BIAS_GELU, 4) - (2 * 256 * 4 + 64)


def test_staged_bias_costs_no_measured_config_a_stage():
    # the long-K rule keeps its 4 A/B stages with the bias buffers (2 KB each), and so does its
    # 192-column tile (the one-wave rule's) its 5
    assert pick_stages(RULE, BF16, BIAS_GELU) == pick_stages(RULE, BF16, PLAIN) == 4
    assert _smem_bytes(RULE, BF16, BIAS_GELU, 4) <= MAX_SMEM_BYTES
    wave = GemmKnobs(tile_m=128, tile_n=192, cga_m=2, swizzle=8, stagger=2)
    assert pick_stages(wave, BF16, BIAS_GELU) == pick_stages(wave, BF16, PLAIN) == 5


@pytest.mark.parametrize("tile_n", [48, 80, 240])
def test_a_tile_that_does_not_split_into_whole_epilogue_sub_tiles_is_refused(tile_n):
    why = GemmKnobs(tile_m=128, tile_n=tile_n).validate()
    assert why is not None and f"tile_n={tile_n}" in why and f"multiple of {EPI_N}" in why


@pytest.mark.parametrize("tile_n", [16, 32, 96, 192, 256])
def test_tiles_of_whole_epilogue_sub_tiles_or_narrower_are_accepted(tile_n):
    assert GemmKnobs(tile_m=128, tile_n=tile_n).validate() is None
