"""Whole passes over the A/B ring with constant slot indices (GemmKnobs.static_ring): on by default,
and where the kernel takes it. The device proof is check_gemm's static_ring cases (both loops, ring
alignment lost and regained, ping-pong, split-K, a split tail) and bitwise_gemm.py (same outputs)."""

from __future__ import annotations

import pytest

from pygraph_gemm.kernels.config import GemmKnobs, KernelEpilogue, KernelLayout

pytest.importorskip("cutlass.cute")

RULE = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True)
LAY = KernelLayout("bf16", "bf16", "k", "k", "n")
EPI = KernelEpilogue(bias_n=True, act="gelu_approx_tanh")


def _kernel(knobs):
    from pygraph_gemm.kernels.gemm_sm90 import Sm90Gemm

    return Sm90Gemm(knobs, LAY, EPI)


def test_on_by_default():
    assert GemmKnobs().static_ring
    assert _kernel(RULE).static_ring


def test_turned_off_keeps_the_runtime_slot_loop():
    assert not _kernel(GemmKnobs(tile_m=128, tile_n=256, cga_m=2, static_ring=False)).static_ring


def test_wait_all_keeps_the_runtime_slot_loop():
    # wait_all releases each k-block's own slot at once; only the runtime loop has that order
    assert not _kernel(GemmKnobs(tile_m=128, tile_n=256, cga_m=2, stagger=2, wait_all=True)).static_ring
