"""Correctness runner for the SM90 CuTe DSL GEMM (pygraph_gemm.kernels), usable standalone on the device.

    PYTHONPATH=packages/engines-gemm/src python benchmarks/check_gemm.py [--quick] [--log FILE]

Each case: fresh random inputs, output (and aux) poisoned with NaN, relative Frobenius error of the
result against a float64 reference; bf16 outputs < 1e-2, fp16 < 5e-3, fp32 < 2e-3. Prints one line
per case and a summary line last.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs
from pygraph_gemm.kernels.torch_gemm import gemm

TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 2e-3}
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _act_ref(x: torch.Tensor, act: str) -> torch.Tensor:
    if act == "none":
        return x
    if act == "relu":
        return torch.relu(x)
    if act == "gelu":
        return F.gelu(x)
    if act == "gelu_approx_tanh":
        return F.gelu(x, approximate="tanh")
    if act in ("silu", "swish"):
        return F.silu(x)
    if act == "sigmoid":
        return torch.sigmoid(x)
    if act == "tanh":
        return torch.tanh(x)
    raise ValueError(act)


def random_operand(l, r, c, dt, col_major, bcast, dev, pad=0):
    """(l, r, c) random view; col_major stores columns contiguously; bcast gives batch stride 0;
    ``pad`` elements of NaN after each contiguous storage row (a read past the row shows as NaN)."""
    lb = 1 if bcast else l
    rows, cols = (c, r) if col_major else (r, c)
    t = torch.randn(lb, rows, cols, device=dev).to(dt)
    if pad:
        store = torch.full((lb, rows, cols + pad), float("nan"), device=dev, dtype=dt)
        store[:, :, :cols] = t
        t = store[:, :, :cols]
    if col_major:
        t = t.transpose(1, 2)
    return t.expand(l, r, c) if bcast else t


def poisoned_output(l, m, n, dt, col_major=False, pad=0, dev="cuda"):
    """(an (l, m, n) output view filled with NaN, its storage): row-major, or column-major (the
    transpose of a row-major (l, n, m)); ``pad`` elements of NaN after each contiguous storage row."""
    rows, cols = (n, m) if col_major else (m, n)
    store = torch.full((l, rows, cols + pad), float("nan"), device=dev, dtype=dt)
    view = store[:, :, :cols]
    return (view.transpose(1, 2) if col_major else view), store


def run_case(
    m,
    n,
    k,
    l=1,
    dt="bf16",
    out="bf16",
    a_col=False,
    b_col=False,
    a_bc=False,
    b_bc=False,
    bias=False,
    row_scale=False,
    col_scale=False,
    residual=False,
    act="none",
    aux=False,
    knobs=None,
    batched_api=None,
    dev="cuda",
    reps=1,
    vec="fp32",
    c_col=False,
):
    """Returns (rel_err, tol, aux_err_or_None). Raises on failure to run. ``vec``: the dtype of the
    bias and scale vectors; ``c_col``: column-major C."""
    idt, odt = DT[dt], DT[out]
    a = random_operand(l, m, k, idt, a_col, a_bc, dev)
    b = random_operand(l, k, n, idt, b_col, b_bc, dev)
    kw, res, pre, ref = reference(a, b, idt, row_scale, col_scale, bias, residual, act, DT[vec])
    if res is not None:
        kw["residual"] = res
    batched = l > 1 if batched_api is None else batched_api
    c3, _ = poisoned_output(l, m, n, odt, c_col, dev=dev)
    c = c3 if batched else c3[0]
    x = torch.full_like(c, float("nan"), dtype=idt) if aux else None
    if not batched:
        a, b = a[0], b[0]
        if residual:
            kw["residual"] = kw["residual"][0]
    for _ in range(reps):  # split-K: later launches reuse the semaphores the first one left zeroed
        if reps > 1:
            c.fill_(float("nan"))
            if x is not None:
                x.fill_(float("nan"))
        gemm(a, b, c, activation=act, aux=x, knobs=knobs, **kw)
    torch.cuda.synchronize()
    err = _relerr(c3, ref)
    xerr = None
    if aux:
        x3 = x if x.dim() == 3 else x[None]
        xerr = _relerr(x3, pre)
    return err, TOL[odt], xerr


def plan_args(case: dict) -> tuple:
    """The kernel `run_case` builds for ``case``, as `launch.Plan`'s arguments (what compiling it
    ahead takes): knobs, epilogue, dtypes, the operands' (batch, row, column) strides in the layout
    run_case gives them (a broadcast operand has batch stride 0), and the sizes."""
    m, n, k, batches = case["m"], case["n"], case["k"], case.get("l", 1)
    dt, out = case.get("dt", "bf16"), case.get("out", "bf16")
    spec = EpilogueSpec(
        bias=case.get("bias", False),
        row_scale=case.get("row_scale", False),
        col_scale=case.get("col_scale", False),
        residual=case.get("residual", False),
        activation=case.get("act", "none"),
        aux_out=case.get("aux", False),
        vec_dtype=case.get("vec", "fp32"),
        residual_dtype=dt,
        aux_dtype=dt,
    )
    a = (0 if case.get("a_bc") else m * k,) + ((1, m) if case.get("a_col") else (k, 1))
    b = (0 if case.get("b_bc") else k * n,) + ((n, 1) if case.get("b_col") else (1, k))
    c = (m * n,) + ((1, m) if case.get("c_col") else (n, 1))
    return case.get("knobs") or GemmKnobs(), spec, dt, out, a, b, c, m, n, k, batches


def reference(
    a, b, idt, row_scale: bool, col_scale: bool, bias: bool, residual: bool, act: str,
    vdt=torch.float32,
):  # fmt: skip
    """Fresh random epilogue operands for A (L, M, K) @ B (L, K, N), and the float64 reference.

    Returns (vectors by name, residual or None, pre-activation reference, reference); the vectors
    are ``vdt``, the residual in ``idt``. Both check runners draw them here, in this order."""
    l, m, n = a.shape[0], a.shape[1], b.shape[2]
    dev = a.device
    vecs = {}
    ref = torch.matmul(a.double(), b.double())
    if row_scale:
        vecs["row_scale"] = (torch.rand(m, device=dev) + 0.5).to(vdt)
        ref = ref * vecs["row_scale"].double()[None, :, None]
    if col_scale:
        vecs["col_scale"] = (torch.rand(n, device=dev) + 0.5).to(vdt)
        ref = ref * vecs["col_scale"].double()[None, None, :]
    if bias:
        vecs["bias"] = torch.randn(n, device=dev).to(vdt)
        ref = ref + vecs["bias"].double()
    res = None
    if residual:
        res = torch.randn(l, m, n, device=dev).to(idt)
        ref = ref + res.double()
    return vecs, res, ref, _act_ref(ref, act)


def _relerr(got: torch.Tensor, ref: torch.Tensor) -> float:
    g = got.double()
    if torch.isnan(g).any():
        return float("nan")
    return (torch.linalg.norm(g - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


K_BIG = GemmKnobs(tile_m=128, tile_n=256, cga_m=2)
K_128 = GemmKnobs(tile_m=128, tile_n=128)
K_64 = GemmKnobs(tile_m=64, tile_n=128, cga_n=2, raster="n")
K_SWAP = GemmKnobs(tile_m=128, tile_n=32, swap_ab=True)


def _all_pieces(knobs, act, **extra):
    """A ragged problem with every epilogue piece (both scales, bias, residual) and the aux output."""
    return dict(
        m=1000, n=1048, k=520, bias=True, row_scale=True, col_scale=True, residual=True, act=act, aux=True,
        knobs=knobs, **extra,
    )  # fmt: skip


def cases(quick: bool = False):
    cs = []
    # layouts x dtypes on a ragged shape
    for a_col in (False, True):
        for b_col in (False, True):
            for dt in ("bf16", "fp16"):
                cs.append(dict(m=1000, n=1048, k=520, dt=dt, out=dt, a_col=a_col, b_col=b_col, knobs=K_BIG))
    # output dtypes
    for out in ("bf16", "fp16", "fp32"):
        cs.append(dict(m=264, n=392, k=200, dt="bf16", out=out, knobs=K_128))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=K_64, bias=True, act="gelu"))
    # every activation, with bias (tile 128x256 cluster 2x1)
    for act in ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh"):
        cs.append(dict(m=1000, n=1048, k=520, bias=True, act=act, knobs=K_BIG))
    # scales, residual, aux, all together
    cs += [
        dict(m=1000, n=1048, k=520, row_scale=True, knobs=K_BIG),
        dict(m=1000, n=1048, k=520, col_scale=True, knobs=K_128),
        dict(m=1000, n=1048, k=520, residual=True, knobs=K_BIG),
        dict(m=1000, n=1048, k=520, bias=True, act="gelu_approx_tanh", aux=True, knobs=K_BIG),
        _all_pieces(K_BIG, "silu"),
        _all_pieces(K_SWAP, "gelu"),
    ]
    # tiny M, swap_ab and not
    for m in (1, 16):
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_SWAP))
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_128, bias=True, act="relu"))
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_SWAP, bias=True, row_scale=True, act="gelu_approx_tanh"))
    # batched, broadcast batch
    cs += [
        dict(m=384, n=520, k=264, l=3, knobs=K_BIG, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, a_bc=True, knobs=K_128),
        dict(m=384, n=520, k=264, l=3, b_bc=True, b_col=True, knobs=K_BIG, residual=True),
        dict(m=384, n=520, k=264, l=2, a_col=True, knobs=K_SWAP, bias=True),
    ]
    # larger, multi-wave (persistent loop over many tiles, k loop longer than the ring)
    cs += [
        dict(m=2048, n=2048, k=4096, knobs=K_BIG, bias=True, act="gelu_approx_tanh"),
        dict(m=4096, n=4096, k=1024, knobs=GemmKnobs(tile_m=128, tile_n=256, cga_n=2, raster="n", swizzle=4)),
    ]
    if quick:
        cs = cs[::4]
    return (
        cs
        + splitk_cases()
        + pingpong_cases()
        + wide_epilogue_cases()
        + swizzle_cases()
        + tail_cases()
        + stagger_cases()
        + ring_cases()
        + pingpong_z8_cases()
        + warpgroup_view_cases()
        + stagger_one_cases()
        + wait_all_cases()
        + stagger_256_cases()
        + shallow_kblock_cases()
        + bias_smem_cases()
        + l2_hint_cases()
        + reuse_order_cases()
        + gelu_half_cases()
        + static_ring_cases()
        + narrow_cluster_cases()
        + one_wave_cases()
        + tile_192_cases()
        + cluster_four_cases()
        + cluster_eight_cases()
        + place_order_cases()
    )


def narrow_cluster_cases():
    """64x64 tiles in a 2x1 cluster (B multicast to the two row tiles), the narrow rule: the
    128x4096x4096 row; ragged M and K (a partial second row tile) in fp16; a single row tile (the
    cluster's second CTA past M) with fp32 output; batched with a residual and B column-major;
    every epilogue piece + aux with A column-major."""
    gt = "gelu_approx_tanh"
    narrow = GemmKnobs(tile_m=64, tile_n=64, cga_m=2)
    return [
        dict(m=128, n=4096, k=4096, knobs=narrow, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=100, n=4096, k=4104, knobs=narrow, bias=True, act=gt, dt="fp16", out="fp16", vec="fp16"),
        dict(m=40, n=1000, k=1032, knobs=narrow, bias=True, act="relu", out="fp32"),
        dict(m=256, n=3000, k=520, l=2, knobs=narrow, residual=True, b_col=True),
        _all_pieces(narrow, "gelu", a_col=True),
    ]


def one_wave_cases():
    """The tiles the one-wave rule names beside 64x64 (heuristics._wave_tiles): 64x128 in a 2x1
    cluster on the ragged 200x3000x4104 row and on three row tiles (the cluster's fourth CTA past M)
    with fp32 output; 128x128 alone on one row tile with a residual and B column-major; 128x128 in a
    2x1 cluster at 256x8192x2048 and batched with every epilogue piece + aux; the long-K config on a
    single row tile (no cluster) in fp16; 192-column tiles (the long-K config at 768x4096x4096, where
    22 column tiles of 192 fill the wave, the last a third full; every epilogue piece + aux ragged;
    fp16 N narrower than one tile with B column-major; batched)."""
    gt = "gelu_approx_tanh"
    k64x128 = GemmKnobs(tile_m=64, tile_n=128, cga_m=2)
    k128 = GemmKnobs(tile_m=128, tile_n=128)
    k128c = GemmKnobs(tile_m=128, tile_n=128, cga_m=2)
    k192 = GemmKnobs(tile_m=128, tile_n=192, cga_m=2)
    long_k_192 = GemmKnobs(
        tile_m=128, tile_n=192, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True
    )
    long_k_one_row = GemmKnobs(tile_m=128, tile_n=256, swizzle=8, stagger=2, serpentine=True, k_flip=True)
    return [
        dict(m=200, n=3000, k=4104, knobs=k64x128, bias=True, act=gt, vec="bf16"),
        dict(m=130, n=1000, k=520, knobs=k64x128, bias=True, act="relu", out="fp32"),
        dict(m=100, n=1048, k=520, knobs=k128, residual=True, b_col=True),
        dict(m=256, n=8192, k=2048, knobs=k128c, bias=True, act=gt, vec="bf16"),
        _all_pieces(k128c, "silu", l=2, a_col=True),
        dict(
            m=120, n=3000, k=1032, knobs=long_k_one_row, bias=True, act=gt, dt="fp16", out="fp16", vec="fp16"
        ),
        dict(m=768, n=4096, k=4096, knobs=long_k_192, bias=True, act=gt, vec="bf16", reps=2),
        _all_pieces(long_k_192, "gelu"),
        dict(m=300, n=176, k=520, knobs=k192, residual=True, b_col=True, dt="fp16", out="fp16"),
        dict(m=384, n=520, k=264, l=3, knobs=k192, bias=True, act="relu"),
    ]


def tile_192_cases():
    """TILE_N 192 in the engine's other arrangements (its domain holds them all since v24): one
    warpgroup on a 64-row tile in a 2x1 cluster, ping-pong 64x192 with aux, swapped operands at M =
    16, and a 1x2 cluster rastered along N with a residual."""
    return [
        dict(m=200, n=1000, k=520, knobs=GemmKnobs(tile_m=64, tile_n=192, cga_m=2), bias=True, act="gelu_approx_tanh"),
        dict(
            m=1000, n=1048, k=520, knobs=GemmKnobs(tile_m=64, tile_n=192, pingpong=True), bias=True, act="relu",
            aux=True,
        ),
        dict(m=16, n=1000, k=1024, knobs=GemmKnobs(tile_m=128, tile_n=192, swap_ab=True), bias=True, act="silu"),
        dict(m=1000, n=2000, k=520, knobs=GemmKnobs(tile_m=128, tile_n=192, cga_n=2, raster="n"), residual=True),
    ]  # fmt: skip


def cluster_four_cases():
    """4-CTA clusters. 64x128 tiles in a 4x1 cluster (B multicast to four row tiles), the narrow
    rule where it fits one wave: the ragged 200x3000x4104 row; three row tiles (the fourth CTA past M)
    in fp16; one row tile (three CTAs past M) with fp32 output; eight row tiles (two clusters along M)
    with a residual and B column-major; batched with every epilogue piece + aux. 64x64 in a 4x1
    cluster, and the domain's other 4-CTA shapes (2x2, 1x4), once each."""
    gt = "gelu_approx_tanh"
    k41 = GemmKnobs(tile_m=64, tile_n=128, cga_m=4)
    return [
        dict(m=200, n=3000, k=4104, knobs=k41, bias=True, act=gt, vec="bf16"),
        dict(m=150, n=3000, k=1032, knobs=k41, bias=True, act=gt, dt="fp16", out="fp16", vec="fp16"),
        dict(m=40, n=1000, k=520, knobs=k41, bias=True, act="relu", out="fp32"),
        dict(m=512, n=1920, k=264, knobs=k41, residual=True, b_col=True),
        _all_pieces(k41, "silu", l=2, a_col=True),
        dict(m=200, n=1536, k=1032, knobs=GemmKnobs(tile_m=64, tile_n=64, cga_m=4), bias=True, act=gt),
        dict(m=1000, n=1048, k=520, knobs=GemmKnobs(tile_m=128, tile_n=128, cga_m=2, cga_n=2), bias=True, act="relu"),
        dict(m=300, n=2000, k=520, knobs=GemmKnobs(tile_m=64, tile_n=128, cga_n=4), residual=True, dt="fp16"),
    ]  # fmt: skip


def cluster_eight_cases():
    """8-CTA clusters (kernel-only until timed): 64x128 tiles in a 4x2 cluster (B multicast to four
    row tiles, A to two column tiles) on the ragged 200x3000x4104 row, on three row tiles and a
    ragged column pair in fp16, batched with every epilogue piece + aux; a 2x4 cluster with a
    residual and B column-major."""
    gt = "gelu_approx_tanh"
    k42 = GemmKnobs(tile_m=64, tile_n=128, cga_m=4, cga_n=2)
    return [
        dict(m=200, n=3000, k=4104, knobs=k42, bias=True, act=gt, vec="bf16"),
        dict(m=150, n=1160, k=520, knobs=k42, bias=True, act=gt, dt="fp16", out="fp16", vec="fp16"),
        _all_pieces(k42, "gelu", l=2),
        dict(m=256, n=3000, k=1032, knobs=GemmKnobs(tile_m=64, tile_n=128, cga_m=2, cga_n=4), residual=True, b_col=True),
    ]  # fmt: skip


def place_order_cases():
    """Clusters numbered GPC by GPC (GemmKnobs.place_order, tile_schedule.placed_rank), which
    permutes the clusters only at 64 and 66 resident: the long-K rule on a ragged grid of 144 units
    (66 resident, three rounds), twice; 64x128 tiles rastered along N at 1024x1024x4096 (64 units,
    one wave); ragged with every epilogue piece + aux at 66 resident; batched at 66 resident in fp16;
    48 units (the identity order)."""
    gt = "gelu_approx_tanh"
    long_k = GemmKnobs(
        tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True, place_order=True
    )
    wave = GemmKnobs(tile_m=64, tile_n=128, cga_m=2, raster="n", place_order=True)
    return [
        dict(m=2900, n=3000, k=4104, knobs=long_k, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=1024, n=1024, k=4096, knobs=wave, bias=True, act=gt, vec="bf16", reps=2),
        {**_all_pieces(wave, "gelu"), "n": 2104},
        dict(m=1024, n=1024, k=520, l=2, knobs=wave, residual=True, dt="fp16", out="fp16"),
        dict(m=200, n=3000, k=4104, knobs=wave, bias=True, act="relu"),
    ]


def warpgroup_view_cases():
    """The A/B shared-memory views sliced per warpgroup (wgmma descriptors in uniform registers,
    kernels/NOTES.md v12) in every arrangement of warpgroups over a tile: staggered and lockstep
    128x256 (two warpgroups on one tile), ping-pong 128x128, 64-row tiles (one warpgroup), swapped
    operands, split-K; with fp32 output, every epilogue piece + aux, all four operand majors, batched,
    8192^3."""
    g2 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
    gt = "gelu_approx_tanh"
    return [
        dict(m=2900, n=3000, k=4104, knobs=g2, bias=True, act=gt, vec="bf16", reps=2),
        _all_pieces(GemmKnobs(tile_m=128, tile_n=256, cga_m=2), "silu", a_col=True, b_col=True),
        dict(
            m=1000,
            n=1048,
            k=1288,
            knobs=GemmKnobs(tile_m=128, tile_n=128, cga_m=2, pingpong=True),
            bias=True,
            act=gt,
        ),
        dict(m=1000, n=1048, k=520, knobs=GemmKnobs(tile_m=64, tile_n=128, cga_n=2), out="fp32", a_col=True),
        dict(
            m=16, n=4096, k=1024, knobs=GemmKnobs(tile_m=64, tile_n=16, swap_ab=True), bias=True, act="relu"
        ),
        dict(
            m=128,
            n=4096,
            k=4096,
            knobs=GemmKnobs(tile_m=128, tile_n=64, split_k=2),
            bias=True,
            act=gt,
            reps=2,
        ),
        dict(m=384, n=520, k=264, l=3, knobs=g2, residual=True, b_col=True, dt="fp16", out="fp16"),
        dict(m=8192, n=8192, k=8192, knobs=g2, bias=True, act=gt, vec="bf16"),
    ]


def stagger_one_cases():
    """Stagger 1 (one k-block between the warpgroups: the producer keeps 3 stages of lead); always
    run. Ragged twice with bias+gelu, every epilogue piece + aux with K of one k-block, 8192^3."""
    s1 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=1)
    return [
        dict(m=2900, n=3000, k=4104, knobs=s1, bias=True, act="gelu_approx_tanh", vec="bf16", reps=2),
        dict(_all_pieces(s1, "gelu"), k=64),
        dict(m=8192, n=8192, k=8192, knobs=s1, bias=True, act="gelu_approx_tanh", vec="bf16"),
    ]


def wait_all_cases():
    """Every k-block's wgmma waited for before the next (knobs.wait_all); always run. Staggered and
    lockstep 128x256, 256x128 with a 1x2 cluster; ragged twice, every epilogue piece + aux, fp16
    batched with a residual, K of one k-block, 8192^3."""
    g2w = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, wait_all=True)
    w256 = GemmKnobs(tile_m=256, tile_n=128, cga_n=2, swizzle=8, epi_slots=3, wait_all=True)
    gt = "gelu_approx_tanh"
    return [
        dict(m=2900, n=3000, k=4104, knobs=g2w, bias=True, act=gt, vec="bf16", reps=2),
        _all_pieces(GemmKnobs(tile_m=128, tile_n=256, cga_m=2, wait_all=True), "silu", a_col=True),
        dict(m=2900, n=3000, k=4104, knobs=w256, bias=True, act=gt, reps=2),
        dict(_all_pieces(w256, "gelu"), k=64),
        dict(m=384, n=520, k=264, l=3, knobs=g2w, residual=True, b_col=True, dt="fp16", out="fp16"),
        dict(m=8192, n=8192, k=8192, knobs=g2w, bias=True, act=gt, vec="bf16"),
    ]


def stagger_256_cases():
    """Staggered warpgroups on 256-row tiles (each stores its two 64-row bands, 2r + its index);
    always run. 256x128 with a 1x2 cluster: ragged twice with bias+gelu, every epilogue piece + aux
    with column-major A, fp32 output with column-major C, fp16 batched with a residual, K of one
    k-block, 8192^3."""
    s256 = GemmKnobs(tile_m=256, tile_n=128, cga_n=2, swizzle=8, stagger=2)
    gt = "gelu_approx_tanh"
    return [
        dict(m=2900, n=3000, k=4104, knobs=s256, bias=True, act=gt, vec="bf16", reps=2),
        _all_pieces(s256, "silu", a_col=True),
        dict(m=1000, n=1048, k=520, knobs=s256, out="fp32", c_col=True, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, knobs=s256, residual=True, b_col=True, dt="fp16", out="fp16"),
        dict(m=700, n=1000, k=64, knobs=s256, bias=True, act=gt),
        dict(m=8192, n=8192, k=8192, knobs=s256, bias=True, act=gt, vec="bf16"),
    ]


def shallow_kblock_cases():
    """k-blocks 32 deep (twice the A/B stages in the same shared memory, 64-byte swizzle) with the
    rule's staggered 128x256 tile and 2x1 cluster; always run. Ragged M, N and K (K not a multiple
    of 32) with bias+gelu, every epilogue piece + aux with column-major A and B, fp32 output with
    column-major C, fp16 batched with a residual, one k-block, 8192^3, and 256x128 with a 1x2
    cluster in lockstep."""
    k32 = GemmKnobs(tile_m=128, tile_n=256, tile_k=32, cga_m=2, swizzle=8, stagger=2)
    gt = "gelu_approx_tanh"
    return [
        dict(m=2900, n=3000, k=4104, knobs=k32, bias=True, act=gt, vec="bf16", reps=2),
        _all_pieces(k32, "silu", a_col=True, b_col=True),
        dict(m=1000, n=1048, k=520, knobs=k32, out="fp32", c_col=True, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, knobs=k32, residual=True, b_col=True, dt="fp16", out="fp16"),
        dict(m=700, n=1000, k=32, knobs=k32, bias=True, act=gt),
        dict(m=8192, n=8192, k=8192, knobs=k32, bias=True, act=gt, vec="bf16"),
        dict(
            m=2900,
            n=3000,
            k=4104,
            knobs=GemmKnobs(tile_m=256, tile_n=128, tile_k=32, cga_n=2, swizzle=8, epi_slots=3),
            bias=True,
            act=gt,
        ),
    ]


def bias_smem_cases():
    """The bias along N staged in shared memory by a producer warp (GemmKnobs.bias_smem, on by default;
    named here so the cases keep it); always run, with one case of the global loads it replaced.
    The rule's staggered 128x256 tile: ragged M and N with a bf16 bias, N narrower than a tile
    (clamped loads), fp32 bias with fp16 output, every epilogue piece + aux, batched (one bias for
    every batch), 8192^3; lockstep 128x256, 256x128 with a 1x2 cluster, one consumer warpgroup
    (64x256), and swap_ab (the bias runs along the kernel's M, so the knob changes nothing)."""
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, bias_smem=True)
    gt = "gelu_approx_tanh"
    ragged = dict(m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16")
    swapped = GemmKnobs(tile_m=64, tile_n=128, swap_ab=True, bias_smem=True)
    return [
        dict(m=2900, n=3000, k=4104, knobs=rule, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=1000, n=104, k=520, knobs=rule, bias=True, act="relu"),
        dict(m=1000, n=1048, k=520, knobs=rule, bias=True, act=gt, dt="fp16", out="fp16"),
        _all_pieces(rule, gt, b_col=True),
        dict(m=384, n=520, k=264, l=3, knobs=rule, bias=True, act="silu", vec="bf16"),
        dict(m=8192, n=8192, k=8192, knobs=rule, bias=True, act=gt, vec="bf16"),
        dict(m=2900, n=3000, k=1000, knobs=GemmKnobs(cga_m=2, swizzle=8, bias_smem=True), bias=True, act=gt),
        dict(
            ragged, knobs=GemmKnobs(tile_m=256, tile_n=128, cga_n=2, swizzle=8, epi_slots=3, bias_smem=True)
        ),
        dict(
            m=1000, n=1048, k=520, knobs=GemmKnobs(tile_m=64, tile_n=256, bias_smem=True), bias=True, act=gt
        ),
        dict(m=16, n=4096, k=1024, knobs=swapped, bias=True),
        dict(ragged, knobs=dataclasses.replace(rule, bias_smem=False)),
    ]


def l2_hint_cases():
    """L2 eviction hints on the A/B loads and C's stores (GemmKnobs.l2_hint, kernel-only): the rule's
    tile with each hint, raster M and N, ragged twice; a hint changes where lines live in L2, never a
    value, so these guard the hinted copies' build and addressing."""
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
    ragged = dict(m=2900, n=3000, k=4104, bias=True, act="gelu_approx_tanh", vec="bf16", reps=2)
    return [dict(ragged, knobs=dataclasses.replace(rule, l2_hint=h)) for h in (1, 2, 3, 4)] + [
        dict(ragged, knobs=dataclasses.replace(rule, raster="n", l2_hint=3)),
        _all_pieces(dataclasses.replace(rule, l2_hint=3), "gelu"),
    ]


def reuse_order_cases():
    """Serpentine bands and K flipped on every other tile (GemmKnobs.serpentine, k_flip; kernel-only):
    the rule's tile with both, ragged twice, and with each alone; a K of one k-block (nothing to flip);
    raster N; unswizzled; batched; fp16 with every epilogue piece + aux; ping-pong (the flip
    alternates with the warpgroups' tiles); split-K and a split tail (each slice flips its own
    k-blocks); 8192^3."""
    gt = "gelu_approx_tanh"
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
    both = dataclasses.replace(rule, serpentine=True, k_flip=True)
    ragged = dict(m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16")
    return [
        dict(ragged, knobs=both, reps=2),
        dict(ragged, knobs=dataclasses.replace(rule, serpentine=True)),
        dict(ragged, knobs=dataclasses.replace(rule, k_flip=True)),
        dict(m=1000, n=1048, k=64, knobs=both, bias=True, act="relu"),
        dict(ragged, knobs=dataclasses.replace(both, raster="n")),
        dict(ragged, knobs=GemmKnobs(tile_m=128, tile_n=256, cga_m=2, serpentine=True, k_flip=True)),
        dict(m=384, n=520, k=264, l=3, knobs=both, bias=True, act="silu"),
        _all_pieces(both, "gelu", dt="fp16", out="fp16"),
        dict(
            ragged,
            knobs=GemmKnobs(
                tile_m=128, tile_n=128, cga_m=2, swizzle=8, pingpong=True, serpentine=True, k_flip=True
            ),
            reps=2,
        ),
        dict(
            m=128, n=4096, k=4096, knobs=GemmKnobs(tile_m=128, tile_n=64, split_k=2, k_flip=True), bias=True
        ),
        dict(
            m=2900,
            n=1400,
            k=1000,
            bias=True,
            act=gt,
            reps=2,
            knobs=GemmKnobs(
                tile_m=128, tile_n=256, cga_m=2, swizzle=8, tail_split=4, serpentine=True, k_flip=True
            ),
        ),
        dict(m=8192, n=8192, k=8192, knobs=both, bias=True, act=gt, vec="bf16"),
    ]


def gelu_half_cases():
    """tanh-gelu from half the pre-activation, the staged bias halved (GemmKnobs.gelu_half, on by
    default): the long-K rule, ragged twice; fp16 with an fp32 bias; both scales before the bias; N
    narrower than a tile (clamped bias loads); batched; lockstep 128x256; 8192^3; where it stands
    down (a residual after the bias, the aux output); and the whole-pre-activation path it replaced
    (gelu_half=False), ragged."""
    gt = "gelu_approx_tanh"
    half = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True)
    lockstep = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8)
    return [
        dict(m=2900, n=3000, k=4104, knobs=half, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=1000, n=1048, k=520, knobs=half, bias=True, act=gt, dt="fp16", out="fp16"),
        dict(m=1000, n=1048, k=520, knobs=half, bias=True, row_scale=True, col_scale=True, act=gt),
        dict(m=1000, n=104, k=520, knobs=half, bias=True, act=gt, vec="bf16"),
        dict(m=384, n=520, k=264, l=3, knobs=half, bias=True, act=gt),
        dict(m=2900, n=3000, k=1000, bias=True, act=gt, vec="bf16", knobs=lockstep),
        dict(m=8192, n=8192, k=8192, knobs=half, bias=True, act=gt, vec="bf16"),
        dict(m=1000, n=1048, k=520, knobs=half, bias=True, residual=True, act=gt),
        _all_pieces(half, gt),
        dict(
            m=2900,
            n=3000,
            k=4104,
            knobs=dataclasses.replace(half, gelu_half=False),
            bias=True,
            act=gt,
            reps=2,
        ),
    ]


def static_ring_cases():
    """Whole passes over the A/B ring with constant slot indices (GemmKnobs.static_ring, on by
    default; every other case runs it too where a tile starts at slot 0). The long-K rule: K a
    whole number of passes (every tile takes the static loop), K = 4104 ragged twice (65 k-blocks: the first tile runs 16 passes and one runtime k-block, the
    next tiles start off slot 0 until the ring comes round again), K below one pass (never static),
    fp16 batched with a residual, every epilogue piece + aux, 8192^3; lockstep 128x256; ping-pong
    (each warpgroup skips the other's k-blocks); one consumer warpgroup (64-row tiles); split-K and
    a split tail (slices of different lengths); 32-deep k-blocks (8 stages); and the runtime-slot
    loop alone (static_ring=False), ragged twice."""
    gt = "gelu_approx_tanh"
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2, serpentine=True, k_flip=True)
    return [
        dict(m=2900, n=3000, k=4104, knobs=rule, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=2900, n=3000, k=1024, knobs=rule, bias=True, act=gt, vec="bf16"),
        dict(m=1000, n=1048, k=136, knobs=rule, bias=True, act=gt),
        dict(m=384, n=520, k=264, l=3, knobs=rule, residual=True, b_col=True, dt="fp16", out="fp16"),
        _all_pieces(rule, "gelu", a_col=True),
        dict(m=8192, n=8192, k=8192, knobs=rule, bias=True, act=gt, vec="bf16"),
        dict(
            m=2900, n=3000, k=4104, bias=True, act=gt, reps=2,
            knobs=GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8),
        ),
        dict(
            m=1000, n=1048, k=1288, bias=True, act=gt, reps=2,
            knobs=GemmKnobs(tile_m=128, tile_n=128, cga_m=2, swizzle=8, pingpong=True),
        ),
        dict(
            m=1000, n=1048, k=1032, l=2, bias=True, act="relu",
            knobs=GemmKnobs(tile_m=64, tile_n=256),
        ),
        dict(
            m=128, n=4096, k=4104, bias=True, act=gt, reps=2,
            knobs=GemmKnobs(tile_m=128, tile_n=64, split_k=3),
        ),
        dict(
            m=2900, n=3000, k=4104, bias=True, act=gt,
            knobs=GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, tail_split=4),
        ),
        dict(
            m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16",
            knobs=GemmKnobs(tile_m=128, tile_n=256, tile_k=32, cga_m=2, swizzle=8, stagger=2),
        ),
        dict(
            m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16", reps=2,
            knobs=dataclasses.replace(rule, static_ring=False),
        ),
    ]  # fmt: skip


def pingpong_z8_cases():
    """Ping-pong 128x128 tiles with a 2x1 cluster and swizzle 8 (in the engine's domain; faster than
    the long-K rule in short bursts, slower sustained: kernels/NOTES.md v11); always run. Ragged
    tiles and swizzle bands, a 16-bit bias, column-major C, every epilogue piece + aux, batched,
    the 8192^3 benchmark shape."""
    pz8 = GemmKnobs(tile_m=128, tile_n=128, cga_m=2, swizzle=8, pingpong=True)
    gt = "gelu_approx_tanh"
    return [
        dict(m=2900, n=3000, k=4104, knobs=pz8, bias=True, act=gt, vec="bf16", reps=2),
        dict(
            m=1000,
            n=1048,
            k=2056,
            knobs=pz8,
            bias=True,
            act=gt,
            vec="fp16",
            dt="fp16",
            out="fp16",
            c_col=True,
        ),
        _all_pieces(pz8, "gelu", vec="bf16"),
        dict(m=1024, n=1024, k=1288, l=3, knobs=pz8, residual=True, act="silu", b_col=True),
        dict(m=8192, n=8192, k=8192, knobs=pz8, bias=True, act=gt, vec="bf16"),
    ]


def ring_cases():
    """Store rings of 2 or 3 slots (knobs.epi_slots), which let a 4th A/B stage fit at 128x256;
    always run. Ragged tiles, long K, every epilogue piece + aux, fp32 output, the staggered kernel's
    per-warpgroup rings, repeated launches."""
    r2 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, epi_slots=2)
    r3 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, epi_slots=3)
    return [
        dict(m=2900, n=3000, k=4104, knobs=r2, bias=True, act="gelu_approx_tanh", reps=2),
        dict(m=2900, n=3000, k=4104, knobs=r3),
        _all_pieces(r3, "gelu", dt="fp16", out="fp16", b_col=True),
        dict(m=1000, n=1048, k=520, out="fp32", knobs=r2, bias=True, act="silu"),
        dict(
            m=1000,
            n=1048,
            k=264,
            l=3,
            knobs=GemmKnobs(tile_m=128, tile_n=256, cga_m=2, stagger=2, epi_slots=3),
        ),
        dict(m=8192, n=8192, k=8192, knobs=r3, bias=True, act="gelu_approx_tanh"),
    ]


def stagger_cases():
    """Staggered cooperative warpgroups (knobs.stagger): each stores its own 64 rows of a tile, k-blocks
    apart; always run. Ragged tiles, every epilogue piece + aux, fp32 and column-major C, batched,
    K shorter than the stagger, repeated launches."""
    s3 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=3)
    s2 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
    return [
        dict(m=2900, n=3000, k=520, knobs=s3, bias=True, act="gelu_approx_tanh", reps=2),
        dict(m=2900, n=3000, k=4104, knobs=s3),
        _all_pieces(s2, "gelu", dt="fp16", out="fp16", a_col=True),
        dict(m=1000, n=1048, k=520, out="fp32", knobs=s2, bias=True, act="silu"),
        dict(m=1000, n=1048, k=264, l=3, b_col=True, knobs=s3, residual=True, act="relu"),
        dict(m=700, n=904, k=64, knobs=s3, bias=True, act="tanh"),  # one k-block: fewer than the stagger
        dict(m=8192, n=8192, k=8192, knobs=s3, bias=True, act="gelu_approx_tanh"),
        dict(
            m=384, n=520, k=1024, knobs=GemmKnobs(tile_m=128, tile_n=128, stagger=3), bias=True, act="sigmoid"
        ),
    ]


def tail_cases():
    """Split tails (knobs.tail_split): grids whose last round of clusters is short, so its tiles run
    as K slices; always run. With 2x1 clusters 66 are resident (H200): 72 units leave 6 for the last
    round, split 4 ways (3 when K has only 3 k-tiles)."""
    t4 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, tail_split=4)
    t4_1x1 = GemmKnobs(tile_m=128, tile_n=128, tail_split=4)
    return [
        # 12 x 6 clusters (ragged M and N): 66 whole units, then 6 in 4 slices of 4 k-tiles
        dict(m=2900, n=1400, k=1000, knobs=t4, bias=True, act="gelu_approx_tanh", reps=2),
        # K of 3 k-tiles: at most 3 slices
        dict(m=2900, n=1400, k=136, knobs=t4, bias=True, act="relu"),
        dict(
            m=2904,
            n=1400,
            k=1000,
            dt="fp16",
            out="fp16",
            a_col=True,
            knobs=t4,
            bias=True,
            row_scale=True,
            col_scale=True,
            residual=True,
            act="gelu",
            aux=True,
        ),
        dict(m=1000, n=2104, k=520, l=2, knobs=t4, residual=True, act="silu"),
        dict(m=2900, n=1400, k=1000, out="fp32", knobs=t4, bias=True),
        # 1x1 clusters, 128x128: 133 units on 132 resident CTAs
        dict(m=896, n=2432, k=2048, knobs=t4_1x1, bias=True, act="gelu_approx_tanh"),
        # a grid the tail does not pay for (256 units, 58 in the last round): runs unsplit
        dict(m=4096, n=4096, k=512, knobs=t4, bias=True, act="gelu_approx_tanh"),
        # the benchmark's long-K shape (1024 units: 34 in the last round, 3 slices)
        dict(m=8192, n=8192, k=8192, knobs=t4, bias=True, act="gelu_approx_tanh"),
    ]


def swizzle_cases():
    """Swizzled rasters (knobs.swizzle, the long-K rule's 8): tile grids that the swizzle band does
    not divide, batched, along N, with ping-pong; always run. Column-major operands keep their
    leading dimension a multiple of 8 elements (TMA's 16-byte rule)."""
    z8 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8)
    return [
        # 23 x 12 tiles = 12 x 12 clusters: a band of 8 columns and a ragged band of 4
        dict(m=2900, n=3000, k=520, knobs=z8, bias=True, act="gelu_approx_tanh"),
        dict(
            m=2904,
            n=3000,
            k=520,
            dt="fp16",
            out="fp16",
            a_col=True,
            knobs=z8,
            aux=True,
            bias=True,
            act="relu",
        ),
        dict(m=1000, n=1048, k=264, l=3, knobs=z8, residual=True),
        dict(m=3000, n=2904, k=264, knobs=GemmKnobs(tile_m=128, tile_n=256, cga_n=2, raster="n", swizzle=2)),
        dict(
            m=2900, n=3000, k=264, knobs=GemmKnobs(tile_m=128, tile_n=128, cga_m=2, swizzle=4, pingpong=True)
        ),
    ]


def wide_epilogue_cases():
    """Epilogue sub-tiles 64 columns wide (knobs.epi_n=64, a 2-deep store ring): always run."""
    e64 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, epi_n=64)
    return [
        _all_pieces(e64, "gelu_approx_tanh"),
        dict(
            m=1000,
            n=1048,
            k=520,
            dt="fp16",
            out="fp16",
            a_col=True,
            b_col=True,
            knobs=e64,
            bias=True,
            act="gelu",
        ),
        dict(m=2048, n=2048, k=4096, knobs=GemmKnobs(tile_m=128, tile_n=256, cga_n=2, raster="n", epi_n=64)),
        dict(m=264, n=392, k=1000, out="fp32", knobs=GemmKnobs(tile_m=128, tile_n=128, epi_n=64)),
        dict(
            m=384,
            n=520,
            k=264,
            l=3,
            b_bc=True,
            knobs=GemmKnobs(tile_m=64, tile_n=128, epi_n=64),
            residual=True,
        ),
        dict(m=16, n=4096, k=1024, knobs=GemmKnobs(tile_m=128, tile_n=64, swap_ab=True, epi_n=64), bias=True),
        _all_pieces(GemmKnobs(tile_m=128, tile_n=128, pingpong=True, epi_n=64), "silu"),
        dict(
            m=128,
            n=4096,
            k=4096,
            knobs=GemmKnobs(tile_m=128, tile_n=64, split_k=2, epi_n=64),
            bias=True,
            act="gelu_approx_tanh",
            reps=2,
        ),
    ]


def pingpong_cases():
    """Ping-pong consumers (knobs.pingpong): always run, also under --quick."""
    pp = GemmKnobs(tile_m=128, tile_n=128, pingpong=True)
    pp_c21 = GemmKnobs(tile_m=128, tile_n=128, cga_m=2, pingpong=True)
    pp_64 = GemmKnobs(tile_m=64, tile_n=256, cga_n=2, raster="n", pingpong=True)
    return [
        # ragged, every epilogue piece + aux; both dtypes
        _all_pieces(pp, "gelu_approx_tanh"),
        dict(m=1000, n=1048, k=520, dt="fp16", out="fp16", knobs=pp_c21, bias=True, act="gelu"),
        # 12 tiles on 12 CTAs: the second warpgroup of every CTA has no tile
        dict(m=264, n=392, k=200, knobs=pp, bias=True, act="relu", reps=2),
        # 256 tiles over 132 CTAs: some CTAs run one tile, some two; long K (64 k-blocks) through the ring
        dict(m=2048, n=2048, k=4096, knobs=pp, bias=True, act="gelu_approx_tanh"),
        dict(m=2048, n=2048, k=4096, knobs=pp_64),
        # many tiles per warpgroup, short K (the ring wraps inside and across tiles)
        dict(m=4096, n=4096, k=256, knobs=pp_c21, bias=True, act="silu", aux=True),
        # fp32 out, column-major operands, batched with broadcast B, swap_ab
        dict(m=264, n=392, k=1000, out="fp32", a_col=True, b_col=True, knobs=pp),
        dict(m=384, n=520, k=264, l=3, b_bc=True, knobs=pp, residual=True),
        dict(
            m=16,
            n=4096,
            k=1024,
            knobs=GemmKnobs(tile_m=128, tile_n=16, swap_ab=True, pingpong=True),
            bias=True,
        ),
    ]


def splitk_cases():
    """Split-K (knobs.split_k > 1): always run, also under --quick."""
    G = GemmKnobs
    cs = []
    for dt in ("bf16", "fp16"):
        for m, kn in (
            (128, G(tile_m=128, tile_n=64, split_k=2)),
            (128, G(tile_m=128, tile_n=128, split_k=4)),
            (64, G(tile_m=64, tile_n=64, split_k=4)),
        ):
            cs.append(dict(m=m, n=4096, k=4096, dt=dt, out=dt, knobs=kn, reps=2))
            cs.append(
                dict(m=m, n=4096, k=4096, dt=dt, out=dt, knobs=kn, bias=True, act="gelu_approx_tanh", reps=2)
            )
        # ragged M/N/K (K=1000: 16 k-tiles split 3 ways unevenly), multi-wave (1000x1000: 8x16 tiles x 4)
        cs.append(
            dict(
                m=1000,
                n=1000,
                k=1000,
                dt=dt,
                out=dt,
                knobs=G(tile_m=128, tile_n=64, split_k=3),
                bias=True,
                act="gelu_approx_tanh",
            )
        )
        cs.append(dict(m=1000, n=4096, k=1000, dt=dt, out=dt, knobs=G(tile_m=128, tile_n=128, split_k=4)))
    cs += [
        # batched (+ broadcast B), every epilogue piece + aux, fp32 out, cluster multicast, swap_ab
        dict(
            m=128,
            n=1000,
            k=1000,
            l=3,
            knobs=G(tile_m=128, tile_n=64, split_k=2),
            bias=True,
            act="relu",
            reps=2,
        ),
        dict(m=64, n=1000, k=4096, l=2, b_bc=True, knobs=G(tile_m=64, tile_n=64, split_k=4), residual=True),
        _all_pieces(G(tile_m=128, tile_n=128, split_k=2), "silu"),
        dict(m=264, n=392, k=1000, out="fp32", knobs=G(tile_m=128, tile_n=128, split_k=4)),
        dict(
            m=128,
            n=4096,
            k=4096,
            knobs=G(tile_m=128, tile_n=128, cga_n=2, split_k=4),
            bias=True,
            act="gelu_approx_tanh",
            reps=2,
        ),
        dict(
            m=16,
            n=4096,
            k=4096,
            knobs=G(tile_m=128, tile_n=16, swap_ab=True, split_k=4),
            bias=True,
            act="gelu_approx_tanh",
            reps=2,
        ),
    ]
    return cs


# One case per config family, for compute-sanitizer (slow: each case runs once under memcheck).
_FAMILIES = {
    "cluster 2x1, every epilogue piece + aux": lambda c, kn: kn.cga_m > 1 and c.get("aux"),
    "swap_ab, every epilogue piece + aux": lambda c, kn: kn.swap_ab and kn.split_k == 1 and c.get("aux"),
    "M=1": lambda c, kn: c["m"] == 1,
    "broadcast B over the batch": lambda c, kn: c.get("b_bc") and kn.split_k == 1,
    "64-row tiles, cluster 1x2, raster n": lambda c, kn: kn.tile_m == 64 and kn.raster == "n",
    "fp32 output": lambda c, kn: c.get("out") == "fp32" and kn.split_k == 1,
    "split-K 2, bias+gelu": lambda c, kn: kn.split_k == 2 and c.get("act") == "gelu_approx_tanh",
    "split-K, every epilogue piece + aux": lambda c, kn: kn.split_k > 1 and c.get("aux"),
    "split-K, cluster 1x2": lambda c, kn: kn.split_k > 1 and kn.cga_n > 1,
    "split-K, swap_ab": lambda c, kn: kn.split_k > 1 and kn.swap_ab,
    "split-K, batched": lambda c, kn: kn.split_k > 1 and c.get("l", 1) > 1,
    "ping-pong, every epilogue piece + aux": lambda c, kn: kn.pingpong and c.get("aux"),
    "ping-pong, cluster 1x2, 64x256": lambda c, kn: kn.pingpong and kn.cga_n > 1,
    "ping-pong, one tile per CTA": lambda c, kn: kn.pingpong and c["m"] == 264 and c.get("reps"),
    "64-wide epilogue sub-tiles, every piece + aux": lambda c, kn: kn.epi_n == 64 and c.get("aux"),
    "64-wide epilogue sub-tiles, split-K": lambda c, kn: kn.epi_n == 64 and kn.split_k > 1,
    "swizzle 8, ragged swizzle group": lambda c, kn: kn.swizzle == 8 and c["m"] == 2900,
    "swizzle 4, ping-pong": lambda c, kn: kn.swizzle == 4 and kn.pingpong,
    "split tail, every epilogue piece + aux": lambda c, kn: kn.tail_split > 1 and c.get("aux"),
    "split tail, batched": lambda c, kn: kn.tail_split > 1 and c.get("l", 1) > 1,
    "stagger, every epilogue piece + aux": lambda c, kn: kn.stagger > 0 and c.get("aux"),
    "stagger 3, batched": lambda c, kn: kn.stagger == 3 and c.get("l", 1) > 1,
    "stagger 3, ragged, twice": lambda c, kn: kn.stagger == 3 and c.get("reps"),
    "3-slot store ring, every epilogue piece + aux": lambda c, kn: kn.epi_slots == 3 and c.get("aux"),
    "2-slot store ring, ragged, twice": lambda c, kn: kn.epi_slots == 2 and c.get("reps"),
    "ping-pong swizzle 8, ragged, twice": lambda c, kn: kn.pingpong and kn.swizzle == 8 and c.get("reps"),
    "ping-pong swizzle 8, column-major C": lambda c, kn: kn.pingpong and kn.swizzle == 8 and c.get("c_col"),
    "stagger 256-row tiles, every piece + aux": lambda c, kn: (
        kn.stagger and kn.tile_m == 256 and c.get("aux")
    ),
    "stagger 256-row tiles, column-major C": lambda c, kn: kn.stagger and kn.tile_m == 256 and c.get("c_col"),
    "32-deep k-blocks, every piece + aux": lambda c, kn: kn.tile_k == 32 and c.get("aux"),
    "staged bias, N narrower than a tile": lambda c, kn: kn.bias_smem and c.get("bias") and c["n"] == 104,
    "L2 hints on loads and stores, every piece + aux": lambda c, kn: kn.l2_hint == 3 and c.get("aux"),
    "serpentine bands, K flipped, every piece + aux": lambda c, kn: (
        kn.k_flip and kn.serpentine and c.get("aux")
    ),
    "K flipped, split-K": lambda c, kn: kn.k_flip and kn.split_k > 1,
    "tanh-gelu from half, scales and a halved bias": lambda c, kn: (
        kn.gelu_half and kn.k_flip and c.get("col_scale") and c.get("act") == "gelu_approx_tanh"
    ),
    "static ring, ragged, twice": lambda c, kn: kn.static_ring and kn.stagger and c.get("reps"),
    "static ring, ping-pong": lambda c, kn: kn.static_ring and kn.pingpong,
    "static ring, split-K": lambda c, kn: kn.static_ring and kn.split_k > 1,
    "staged bias, one consumer warpgroup": lambda c, kn: (
        kn.bias_smem and c.get("bias") and kn.tile_m == 64 and kn.tile_n == 256
    ),
    "64x128 in a 2x1 cluster, a padded row tile": lambda c, kn: (
        (kn.tile_m, kn.tile_n, kn.cga_m) == (64, 128, 2) and c["m"] == 130
    ),
    "192 columns, staggered, every piece + aux": lambda c, kn: (
        kn.tile_n == 192 and kn.stagger and c.get("aux")
    ),
    "192 columns, ping-pong + aux": lambda c, kn: kn.tile_n == 192 and kn.pingpong and c.get("aux"),
    "4x1 cluster, three CTAs past M": lambda c, kn: kn.cga_m == 4 and c["m"] == 40,
    "4x1 cluster, every piece + aux": lambda c, kn: kn.cga_m == 4 and c.get("aux"),
    "2x2 cluster": lambda c, kn: (kn.cga_m, kn.cga_n) == (2, 2),
    "1x4 cluster": lambda c, kn: kn.cga_n == 4 and kn.cga_m == 1 and kn.split_k == 1,
    "4x2 cluster, every piece + aux": lambda c, kn: (kn.cga_m, kn.cga_n) == (4, 2) and c.get("aux"),
    "2x4 cluster": lambda c, kn: (kn.cga_m, kn.cga_n) == (2, 4),
    "clusters by GPC, every piece + aux": lambda c, kn: kn.place_order and c.get("aux"),
}


def representatives(cs) -> dict[str, int]:
    """Family name -> index of the first case in ``cs`` that belongs to it."""
    picks = {}
    for name, belongs in _FAMILIES.items():
        for i, c in enumerate(cs):
            kn = c.get("knobs") or GemmKnobs()
            if belongs(c, kn):
                picks[name] = i
                break
        else:
            raise LookupError(f"no case of config family {name!r}")
    return picks


class Tally:
    """Case lines as they come (printed, and written to ``log`` with any traceback), then the
    summary line; shared by the SM90 and SM80 runners."""

    def __init__(self, log=None):
        self.log, self.n_ok, self.n_fail, self.worst, self.t0 = log, 0, 0, 0.0, time.time()

    def result(self, label: str, err: float, tol: float, xerr: float | None) -> None:
        ok = err == err and err < tol and (xerr is None or (xerr == xerr and xerr < tol))
        self.worst = max(self.worst, err / tol if err == err else float("inf"))
        aux = f" aux_err={xerr:.2e}" if xerr is not None else ""
        self._line(f"{'PASS' if ok else 'FAIL'} {label}: err={err:.2e} tol={tol:.0e}{aux}", ok)

    def error(self, label: str, exc: Exception) -> None:
        if self.log:
            self.log.write(traceback.format_exc())
        self._line(f"ERROR {label}: {type(exc).__name__}: {str(exc)[:300]}", False)

    def compiled(self, label: str) -> None:
        self._line(f"COMPILED {label}", True)

    def _line(self, line: str, ok: bool) -> None:
        self.n_ok += ok
        self.n_fail += not ok
        print(line, flush=True)
        if self.log:
            self.log.write(line + "\n")
            self.log.flush()

    def summary(self, title: str, passed: str, where: str) -> int:
        line = (
            f"SUMMARY {title}: {self.n_ok} {passed}, {self.n_fail} failed, worst err/tol={self.worst:.2f}, "
            f"{time.time() - self.t0:.0f}s, {where}"
        )
        print(line)
        if self.log:
            self.log.write(line + "\n")
        return 1 if self.n_fail else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--log", default=None)
    ap.add_argument("--only", default=None, help="comma-separated case indices")
    ap.add_argument(
        "--representatives", action="store_true", help="one case per config family (for compute-sanitizer)"
    )
    args = ap.parse_args(argv)
    tally = Tally(open(args.log, "w") if args.log else None)
    torch.manual_seed(0)
    only = None if args.only is None else {int(x) for x in args.only.split(",")}
    all_cases = cases(args.quick)
    if args.representatives:
        picks = representatives(all_cases)
        print("config families:", ", ".join(f"{name} (#{i})" for name, i in picks.items()))
        only = set(picks.values())
    for i, c in enumerate(all_cases):
        if only is not None and i not in only:
            continue
        desc = " ".join(f"{k}={v}" for k, v in c.items() if k != "knobs")
        kn = c.get("knobs")
        kd = (
            f"{kn.tile_m}x{kn.tile_n} cga{kn.cga_m}x{kn.cga_n}{' swap' if kn.swap_ab else ''}"
            f"{f' sk{kn.split_k}' if kn.split_k > 1 else ''}{' pp' if kn.pingpong else ''}"
            f"{f' t{kn.tail_split}' if kn.tail_split > 1 else ''}{f' g{kn.stagger}' if kn.stagger else ''}"
            f"{f' r{kn.epi_slots}' if kn.epi_slots else ''}{' e64' if kn.epi_n == 64 else ''}"
            f"{f' z{kn.swizzle}' if kn.swizzle > 1 else ''}{' w' if kn.wait_all else ''}"
            if kn
            else "default"
        )
        label = f"[{kd}] {desc}"
        try:
            tally.result(label, *run_case(**c))
        except Exception as e:  # report and go on
            tally.error(label, e)
    return tally.summary("check_gemm", "passed", torch.cuda.get_device_name())


if __name__ == "__main__":
    sys.exit(main())
