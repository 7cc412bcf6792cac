"""The GEMM kernels' correctness cases, as data: one `Case` per problem and knob set.

`SM90_CASES` are the SM90 kernel's (test_gemm_sm90_numerics.py, through `torch_gemm.gemm`),
`SM80_CASES` the portable kernel's (test_gemm_sm80_numerics.py). Each case is a problem (sizes,
dtypes, operand majors and broadcasts, epilogue pieces) and the knobs it runs with; its `id` reads
back what it is, e.g. ``bf16-1000x1048x520-bias-gelu-128x256c21``. The tables are grouped by what
they exercise. `compile_keys` yields every case's compile key (kernel, arch, knobs, kernel
epilogue, kernel layout) in the layout the tests give the operands: scripts/kernel_objects.py
compiles them to prove a restructuring leaves the kernels' objects unchanged.

`SM90_MEMCHECK` / `SM80_MEMCHECK` name one case per config family for compute-sanitizer
(``pytest -m memcheck``; scripts/device/run.sh gemm memcheck).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue, KernelLayout
from pygraph_gemm.kernels.frame import kernel_layout
from pygraph_gemm.knob_labels import knob_label

SM90_ARCH = "sm_90a"
SM80_ARCH = "sm_80"  # the portable kernel's A100 build; on the device the tests build the GPU's own arch
SM80_KNOBS = GemmKnobs(tile_m=128, tile_n=128, tile_k=32)  # the SM80 tests' knobs when a case names none
_ACT_IDS = {"gelu_approx_tanh": "gelutanh"}


@dataclasses.dataclass(frozen=True)
class Case:
    """One problem: A (L, M, K) @ B (L, K, N) -> C (L, M, N) with the named epilogue pieces.

    ``a_col`` / ``b_col`` / ``c_col`` store that operand column-major (the transpose of a row-major
    tensor); ``a_bc`` / ``b_bc`` give it batch stride 0; ``vec`` is the dtype of the bias and scale
    vectors; ``aux`` writes the pre-activation too; ``reps`` launches it that many times (split-K:
    later launches reuse the semaphores the first one left zeroed). SM80 only: ``k_pad`` stores
    the K-contiguous rows of A and B padded to 8 elements with NaN (any k >= K leaking into the sum
    shows as NaN), ``c_pad`` C's contiguous rows padded to 8 (a store past the edge shows).
    """

    m: int
    n: int
    k: int
    l: int = 1
    dt: str = "bf16"
    out: str = "bf16"
    a_col: bool = False
    b_col: bool = False
    c_col: bool = False
    a_bc: bool = False
    b_bc: bool = False
    bias: bool = False
    row_scale: bool = False
    col_scale: bool = False
    residual: bool = False
    act: str = "none"
    aux: bool = False
    vec: str = "fp32"
    knobs: GemmKnobs | None = None
    reps: int = 1
    k_pad: bool = False
    c_pad: bool = False

    @property
    def id(self) -> str:
        parts = [self.dt if self.out == self.dt else f"{self.dt}>{self.out}", f"{self.m}x{self.n}x{self.k}"]
        flags = (
            (self.l > 1, f"batch{self.l}"),
            (self.a_bc, "Abcast"),
            (self.b_bc, "Bbcast"),
            (self.a_col, "Acol"),
            (self.b_col, "Bcol"),
            (self.c_col, "Ccol"),
            (self.k_pad, "Kpad"),
            (self.c_pad, "Cpad"),
            (self.row_scale, "rowscale"),
            (self.col_scale, "colscale"),
            (self.bias, "bias"),
            (self.residual, "residual"),
            (self.act != "none", _ACT_IDS.get(self.act, self.act)),
            (self.aux, "aux"),
            (self.vec != "fp32" and (self.bias or self.row_scale or self.col_scale), f"vec{self.vec}"),
        )
        parts += [name for on, name in flags if on]
        parts.append(knob_label(self.knobs) if self.knobs else "default")
        if self.reps > 1:
            parts.append(f"{self.reps}launches")
        return "-".join(parts)

    def pads(self) -> tuple[int, int, int]:
        """NaN elements after each contiguous storage row of A, B and C."""
        kp = (-self.k) % 8 if self.k_pad else 0
        cp = (-(self.m if self.c_col else self.n)) % 8 if self.c_pad else 0
        return (0 if self.a_col else kp), (kp if self.b_col else 0), cp

    def strides(self) -> tuple[tuple, tuple, tuple]:
        """User-frame (batch, row, col) strides of A, B and C as the tests store them."""
        pa, pb, pc = self.pads()
        return (
            operand_strides(self.l, self.m, self.k, self.a_col, self.a_bc, pa),
            operand_strides(self.l, self.k, self.n, self.b_col, self.b_bc, pb),
            operand_strides(self.l, self.m, self.n, self.c_col, False, pc),
        )

    def spec(self, unused_dtype: str | None = None) -> EpilogueSpec:
        """The epilogue; the residual's and aux's dtypes are the inputs', or ``unused_dtype`` for
        a piece the case leaves out (`torch_gemm.gemm` names an absent one "bf16")."""
        vectors = self.bias or self.row_scale or self.col_scale
        return EpilogueSpec(
            bias=self.bias,
            row_scale=self.row_scale,
            col_scale=self.col_scale,
            residual=self.residual,
            activation=self.act,
            aux_out=self.aux,
            vec_dtype=self.vec if vectors or unused_dtype is None else "fp32",
            residual_dtype=self.dt if self.residual or unused_dtype is None else unused_dtype,
            aux_dtype=self.dt if self.aux or unused_dtype is None else unused_dtype,
        )


def operand_strides(l: int, rows: int, cols: int, col_major: bool, bcast: bool, pad: int = 0) -> tuple:
    """(batch, row, col) strides of a (rows, cols) operand stored row by row (columns when
    ``col_major``) with ``pad`` elements after each storage row; batch stride 0 when ``bcast``."""
    s_rows, s_cols = (cols, rows) if col_major else (rows, cols)
    line = s_cols + pad
    batch = 0 if bcast and l > 1 else s_rows * line
    return (batch, 1, line) if col_major else (batch, line, 1)


# ---------------------------------------------------------------------------------------------
# SM90 tables

K_BIG = GemmKnobs(tile_m=128, tile_n=256, cga_m=2)
K_128 = GemmKnobs(tile_m=128, tile_n=128)
K_64 = GemmKnobs(tile_m=64, tile_n=128, cga_n=2, raster="n")
K_SWAP = GemmKnobs(tile_m=128, tile_n=32, swap_ab=True)
# the long-K rule's tile: 128x256 in a 2x1 cluster, swizzle 8, warpgroups two k-blocks apart
RULE = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
GT = "gelu_approx_tanh"


def _all_pieces(knobs, act, **extra) -> dict:
    """A ragged problem with every epilogue piece (both scales, bias, residual) and the aux output."""
    base = dict(
        m=1000, n=1048, k=520, bias=True, row_scale=True, col_scale=True, residual=True, act=act, aux=True,
        knobs=knobs,
    )  # fmt: skip
    return {**base, **extra}


def basics() -> list[dict]:
    """Operand majors x dtypes, output dtypes, every activation, each epilogue piece, tiny M
    (swapped and not), batched and broadcast batches, multi-wave problems."""
    cs = []
    for a_col in (False, True):
        for b_col in (False, True):
            for dt in ("bf16", "fp16"):
                cs.append(dict(m=1000, n=1048, k=520, dt=dt, out=dt, a_col=a_col, b_col=b_col, knobs=K_BIG))
    for out in ("bf16", "fp16", "fp32"):
        cs.append(dict(m=264, n=392, k=200, dt="bf16", out=out, knobs=K_128))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=K_64, bias=True, act="gelu"))
    for act in ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh"):
        cs.append(dict(m=1000, n=1048, k=520, bias=True, act=act, knobs=K_BIG))
    cs += [
        dict(m=1000, n=1048, k=520, row_scale=True, knobs=K_BIG),
        dict(m=1000, n=1048, k=520, col_scale=True, knobs=K_128),
        dict(m=1000, n=1048, k=520, residual=True, knobs=K_BIG),
        dict(m=1000, n=1048, k=520, bias=True, act="gelu_approx_tanh", aux=True, knobs=K_BIG),
        _all_pieces(K_BIG, "silu"),
        _all_pieces(K_SWAP, "gelu"),
    ]
    for m in (1, 16):
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_SWAP))
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_128, bias=True, act="relu"))
        cs.append(dict(m=m, n=4096, k=1024, knobs=K_SWAP, bias=True, row_scale=True, act="gelu_approx_tanh"))
    cs += [
        dict(m=384, n=520, k=264, l=3, knobs=K_BIG, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, a_bc=True, knobs=K_128),
        dict(m=384, n=520, k=264, l=3, b_bc=True, b_col=True, knobs=K_BIG, residual=True),
        dict(m=384, n=520, k=264, l=2, a_col=True, knobs=K_SWAP, bias=True),
    ]
    # persistent loop over many tiles, a K loop longer than the ring
    cs += [
        dict(m=2048, n=2048, k=4096, knobs=K_BIG, bias=True, act="gelu_approx_tanh"),
        dict(m=4096, n=4096, k=1024, knobs=GemmKnobs(tile_m=128, tile_n=256, cga_n=2, raster="n", swizzle=4)),
    ]
    return cs


def split_k() -> list[dict]:
    """Split-K (knobs.split_k > 1)."""
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


def pingpong() -> list[dict]:
    """Ping-pong consumers (knobs.pingpong)."""
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


def swizzle() -> list[dict]:
    """Swizzled rasters (knobs.swizzle, the long-K rule's 8): tile grids that the swizzle band does
    not divide, batched, along N, with ping-pong. Column-major operands keep their
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


def stagger() -> list[dict]:
    """Staggered cooperative warpgroups (knobs.stagger): each stores its own 64 rows of a tile, k-blocks
    apart. Ragged tiles, every epilogue piece + aux, fp32 and column-major C, batched,
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


def pingpong_swizzle8() -> list[dict]:
    """Ping-pong 128x128 tiles with a 2x1 cluster and swizzle 8 (in the engine's domain; faster than
    the long-K rule in short bursts, slower sustained). Ragged
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


def warpgroup_views() -> list[dict]:
    """The A/B shared-memory views sliced per warpgroup (wgmma descriptors in uniform
    registers) in every arrangement of warpgroups over a tile: staggered and lockstep
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


def stagger1() -> list[dict]:
    """Stagger 1 (one k-block between the warpgroups: the producer keeps 3 stages of lead). Ragged twice with bias+gelu, every epilogue piece + aux with K of one k-block, 8192^3."""
    s1 = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=1)
    return [
        dict(m=2900, n=3000, k=4104, knobs=s1, bias=True, act="gelu_approx_tanh", vec="bf16", reps=2),
        dict(_all_pieces(s1, "gelu"), k=64),
        dict(m=8192, n=8192, k=8192, knobs=s1, bias=True, act="gelu_approx_tanh", vec="bf16"),
    ]


def stagger_256_rows() -> list[dict]:
    """Staggered warpgroups on 256-row tiles (each stores its two 64-row bands, 2r + its index).
    256x128 with a 1x2 cluster: ragged twice with bias+gelu, every epilogue piece + aux
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


def k_blocks_32_deep() -> list[dict]:
    """k-blocks 32 deep (twice the A/B stages in the same shared memory, 64-byte swizzle) with the
    rule's staggered 128x256 tile and 2x1 cluster. Ragged M, N and K (K not a multiple
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
            knobs=GemmKnobs(tile_m=256, tile_n=128, tile_k=32, cga_n=2, swizzle=8),
            bias=True,
            act=gt,
        ),
    ]


def staged_bias() -> list[dict]:
    """The bias along N staged in shared memory by a producer warp (`config.bias_staged`).
    The rule's staggered 128x256 tile: ragged M and N with a bf16 bias, N narrower than a tile
    (clamped loads), fp32 bias with fp16 output, every epilogue piece + aux, batched (one bias for
    every batch), 8192^3; lockstep 128x256, 256x128 with a 1x2 cluster, one consumer warpgroup
    (64x256), and swap_ab (the bias runs along the kernel's M and is loaded, not staged)."""
    rule = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, stagger=2)
    gt = "gelu_approx_tanh"
    ragged = dict(m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16")
    swapped = GemmKnobs(tile_m=64, tile_n=128, swap_ab=True)
    return [
        dict(m=2900, n=3000, k=4104, knobs=rule, bias=True, act=gt, vec="bf16", reps=2),
        dict(m=1000, n=104, k=520, knobs=rule, bias=True, act="relu"),
        dict(m=1000, n=1048, k=520, knobs=rule, bias=True, act=gt, dt="fp16", out="fp16"),
        _all_pieces(rule, gt, b_col=True),
        dict(m=384, n=520, k=264, l=3, knobs=rule, bias=True, act="silu", vec="bf16"),
        dict(m=8192, n=8192, k=8192, knobs=rule, bias=True, act=gt, vec="bf16"),
        dict(m=2900, n=3000, k=1000, knobs=GemmKnobs(cga_m=2, swizzle=8), bias=True, act=gt),
        dict(ragged, knobs=GemmKnobs(tile_m=256, tile_n=128, cga_n=2, swizzle=8)),
        dict(m=1000, n=1048, k=520, knobs=GemmKnobs(tile_m=64, tile_n=256), bias=True, act=gt),
        dict(m=16, n=4096, k=1024, knobs=swapped, bias=True),
    ]


def serpentine_and_k_flip() -> list[dict]:
    """Serpentine bands and K flipped on every other tile (GemmKnobs.serpentine, k_flip):
    the rule's tile with both, ragged twice, and with each alone; a K of one k-block (nothing to flip);
    raster N; unswizzled; batched; fp16 with every epilogue piece + aux; ping-pong (the flip
    alternates with the warpgroups' tiles); split-K (each slice flips its own k-blocks); 8192^3."""
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
        dict(m=8192, n=8192, k=8192, knobs=both, bias=True, act=gt, vec="bf16"),
    ]


def gelu_from_half() -> list[dict]:
    """tanh-gelu from half the pre-activation, the staged bias halved (`config.gelu_from_half`): the
    long-K rule, ragged twice; fp16 with an fp32 bias; both scales before the bias; N narrower than a
    tile (clamped bias loads); batched; lockstep 128x256; 8192^3; and where it stands down (a
    residual after the bias, the aux output)."""
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
    ]


def static_ring() -> list[dict]:
    """Whole passes over the A/B ring with constant slot indices and the runtime-slot loop beside
    them (`mainloop.run_k_blocks`; every other case runs them too). The long-K rule: K a whole
    number of passes (every tile takes the static loop), K = 4104 ragged twice (65 k-blocks: the
    first tile runs 16 passes and one runtime k-block, the next tiles start off slot 0 until the
    ring comes round again), K below one pass (never static), fp16 batched with a residual, every
    epilogue piece + aux, 8192^3; lockstep 128x256; ping-pong (each warpgroup skips the other's
    k-blocks); one consumer warpgroup (64-row tiles); split-K (slices of different lengths);
    32-deep k-blocks (8 stages)."""
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
            m=2900, n=3000, k=4104, bias=True, act=gt, vec="bf16",
            knobs=GemmKnobs(tile_m=128, tile_n=256, tile_k=32, cga_m=2, swizzle=8, stagger=2),
        ),
    ]  # fmt: skip


def narrow_64x64_cluster() -> list[dict]:
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


def one_wave_tiles() -> list[dict]:
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


def tile_n_192() -> list[dict]:
    """TILE_N 192 in the engine's other arrangements (the engine's domain holds them all): one
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


def clusters_of_4() -> list[dict]:
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


def clusters_of_8() -> list[dict]:
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


def place_order() -> list[dict]:
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


# every SM90 table, in the order the suite runs them
SM90_TABLES: tuple[Callable[[], list[dict]], ...] = (
    basics,
    split_k,
    pingpong,
    swizzle,
    stagger,
    pingpong_swizzle8,
    warpgroup_views,
    stagger1,
    stagger_256_rows,
    k_blocks_32_deep,
    staged_bias,
    serpentine_and_k_flip,
    gelu_from_half,
    static_ring,
    narrow_64x64_cluster,
    one_wave_tiles,
    tile_n_192,
    clusters_of_4,
    clusters_of_8,
    place_order,
)


def _distinct(cases: Iterable[Case]) -> tuple[Case, ...]:
    """The cases in order, each once: several tables name the long-K rule's ragged and 8192^3 rows."""
    return tuple(dict.fromkeys(cases))


SM90_CASES = _distinct(Case(**row) for table in SM90_TABLES for row in table())


# One SM90 case per config family for compute-sanitizer (slow: each case runs once under memcheck):
# the first case of the suite that belongs to the family.
_SM90_FAMILIES: dict[str, Callable[[Case, GemmKnobs], bool]] = {
    "cluster 2x1, every epilogue piece + aux": lambda c, kn: kn.cga_m > 1 and c.aux,
    "swap_ab, every epilogue piece + aux": lambda c, kn: kn.swap_ab and kn.split_k == 1 and c.aux,
    "M=1": lambda c, kn: c.m == 1,
    "broadcast B over the batch": lambda c, kn: c.b_bc and kn.split_k == 1,
    "64-row tiles, cluster 1x2, raster n": lambda c, kn: kn.tile_m == 64 and kn.raster == "n",
    "fp32 output": lambda c, kn: c.out == "fp32" and kn.split_k == 1,
    "split-K 2, bias+gelu": lambda c, kn: kn.split_k == 2 and c.act == GT,
    "split-K, every epilogue piece + aux": lambda c, kn: kn.split_k > 1 and c.aux,
    "split-K, cluster 1x2": lambda c, kn: kn.split_k > 1 and kn.cga_n > 1,
    "split-K, swap_ab": lambda c, kn: kn.split_k > 1 and kn.swap_ab,
    "split-K, batched": lambda c, kn: kn.split_k > 1 and c.l > 1,
    "ping-pong, every epilogue piece + aux": lambda c, kn: kn.pingpong and c.aux,
    "ping-pong, cluster 1x2, 64x256": lambda c, kn: kn.pingpong and kn.cga_n > 1,
    "ping-pong, one tile per CTA": lambda c, kn: kn.pingpong and c.m == 264 and c.reps > 1,
    "swizzle 8, ragged swizzle group": lambda c, kn: kn.swizzle == 8 and c.m == 2900,
    "swizzle 4, ping-pong": lambda c, kn: kn.swizzle == 4 and kn.pingpong,
    "stagger, every epilogue piece + aux": lambda c, kn: kn.stagger > 0 and c.aux,
    "stagger 3, batched": lambda c, kn: kn.stagger == 3 and c.l > 1,
    "stagger 3, ragged, twice": lambda c, kn: kn.stagger == 3 and c.reps > 1,
    "ping-pong swizzle 8, ragged, twice": lambda c, kn: kn.pingpong and kn.swizzle == 8 and c.reps > 1,
    "ping-pong swizzle 8, column-major C": lambda c, kn: kn.pingpong and kn.swizzle == 8 and c.c_col,
    "stagger 256-row tiles, every piece + aux": lambda c, kn: bool(kn.stagger) and kn.tile_m == 256 and c.aux,
    "stagger 256-row tiles, column-major C": lambda c, kn: bool(kn.stagger) and kn.tile_m == 256 and c.c_col,
    "32-deep k-blocks, every piece + aux": lambda c, kn: kn.tile_k == 32 and c.aux,
    "staged bias, N narrower than a tile": lambda c, kn: c.bias and c.n == 104,
    "serpentine bands, K flipped, every piece + aux": lambda c, kn: kn.k_flip and kn.serpentine and c.aux,
    "K flipped, split-K": lambda c, kn: kn.k_flip and kn.split_k > 1,
    "tanh-gelu from half, scales and a halved bias": lambda c, kn: kn.k_flip and c.col_scale and c.act == GT,
    "static ring, ragged, twice": lambda c, kn: bool(kn.stagger) and c.reps > 1,
    "static ring, ping-pong": lambda c, kn: kn.pingpong,
    "static ring, split-K": lambda c, kn: kn.split_k > 1,
    "staged bias, one consumer warpgroup": lambda c, kn: c.bias and kn.tile_m == 64 and kn.tile_n == 256,
    "64x128 in a 2x1 cluster, a padded row tile": lambda c, kn: (
        (kn.tile_m, kn.tile_n, kn.cga_m) == (64, 128, 2) and c.m == 130
    ),
    "192 columns, staggered, every piece + aux": lambda c, kn: (
        kn.tile_n == 192 and bool(kn.stagger) and c.aux
    ),
    "192 columns, ping-pong + aux": lambda c, kn: kn.tile_n == 192 and kn.pingpong and c.aux,
    "4x1 cluster, three CTAs past M": lambda c, kn: kn.cga_m == 4 and c.m == 40,
    "4x1 cluster, every piece + aux": lambda c, kn: kn.cga_m == 4 and c.aux,
    "2x2 cluster": lambda c, kn: (kn.cga_m, kn.cga_n) == (2, 2),
    "1x4 cluster": lambda c, kn: kn.cga_n == 4 and kn.cga_m == 1 and kn.split_k == 1,
    "4x2 cluster, every piece + aux": lambda c, kn: (kn.cga_m, kn.cga_n) == (4, 2) and c.aux,
    "2x4 cluster": lambda c, kn: (kn.cga_m, kn.cga_n) == (2, 4),
    "clusters by GPC, every piece + aux": lambda c, kn: kn.place_order and c.aux,
}


# ---------------------------------------------------------------------------------------------
# SM80 tables (the portable kernel)

S80_128 = GemmKnobs(tile_m=128, tile_n=128, tile_k=32)
S80_128_64 = GemmKnobs(tile_m=128, tile_n=128, tile_k=64)
S80_64 = GemmKnobs(tile_m=64, tile_n=128, tile_k=64)
S80_64_32 = GemmKnobs(tile_m=64, tile_n=128, tile_k=32, stages=3)
S80_SQ = GemmKnobs(tile_m=128, tile_n=64, tile_k=32)
S80_SMALL = GemmKnobs(tile_m=64, tile_n=64, tile_k=32, stages=2)
S80_SWAP = GemmKnobs(tile_m=128, tile_n=64, tile_k=32, swap_ab=True)


def sm80_basics() -> list[dict]:
    """All four A/B majors x both input dtypes on a ragged problem, both C majors; output dtypes
    with both tile shapes and both tile_k; every activation; each epilogue piece and all together
    (also fp32 out, column-major C, swap_ab)."""
    rag = dict(m=1000, n=1048, k=520)
    cs = []
    for a_col in (False, True):
        for b_col in (False, True):
            for dt in ("bf16", "fp16"):
                cs.append(dict(**rag, dt=dt, out=dt, a_col=a_col, b_col=b_col, knobs=S80_128))
            cs.append(dict(**rag, a_col=a_col, b_col=b_col, c_col=True, knobs=S80_64))
    for out in ("bf16", "fp16", "fp32"):
        cs.append(dict(m=264, n=392, k=200, dt="bf16", out=out, knobs=S80_128_64))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=S80_64, bias=True, act="gelu"))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=S80_64_32, c_col=True, a_col=True))
    for act in ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh"):
        cs.append(dict(**rag, bias=True, act=act, knobs=S80_128))
    every = dict(bias=True, row_scale=True, col_scale=True, residual=True, aux=True)
    cs += [
        dict(**rag, row_scale=True, knobs=S80_128),
        dict(**rag, col_scale=True, knobs=S80_64),
        dict(**rag, residual=True, knobs=S80_128_64),
        dict(**rag, bias=True, act="gelu_approx_tanh", aux=True, knobs=S80_128),
        dict(**rag, **every, act="silu", knobs=S80_128),
        # fp32 out: no aux (a 16-bit aux next to an fp32 output is declined by can_implement)
        dict(**rag, **{**every, "aux": False}, act="gelu", out="fp32", knobs=S80_64),
        dict(**rag, **every, act="relu", dt="fp16", out="fp16", c_col=True, a_col=True, knobs=S80_SQ),
        dict(**rag, **every, act="gelu", knobs=S80_SWAP),
    ]
    return cs


def sm80_edges() -> list[dict]:
    """K tails (K < tile_k, K % 8 != 0 with NaN in the row padding, one k-tile, many k-tiles), odd
    M and N with C's rows padded (the padding must stay free of writes), tiny M (and swap_ab, which
    turns it into tiny N), batched and broadcast operands."""
    cs = [
        dict(m=200, n=136, k=1, k_pad=True, knobs=S80_128),
        dict(m=200, n=136, k=37, k_pad=True, knobs=S80_128_64),
        dict(m=200, n=136, k=37, k_pad=True, a_col=True, b_col=True, knobs=S80_64),
        dict(m=200, n=136, k=77, k_pad=True, b_col=True, dt="fp16", out="fp16", knobs=S80_SMALL),
        dict(m=130, n=136, k=32, knobs=S80_128),
        dict(m=131, n=131, k=64, b_col=True, c_pad=True, bias=True, residual=True, act="silu", knobs=S80_128),
        dict(m=131, n=131, k=64, b_col=True, c_pad=True, c_col=True, knobs=S80_64),
        dict(m=512, n=512, k=4096, knobs=S80_128, bias=True, act="gelu_approx_tanh"),
        dict(m=512, n=512, k=4104, a_col=True, knobs=S80_128_64),
    ]
    for m in (1, 16):
        cs.append(dict(m=m, n=4096, k=1024, knobs=S80_128))
        cs.append(dict(m=m, n=4096, k=1024, knobs=S80_64, bias=True, act="relu"))
        cs.append(
            dict(m=m, n=4096, k=1024, knobs=S80_SWAP, bias=True, row_scale=True, act="gelu_approx_tanh")
        )
    cs += [
        dict(m=384, n=520, k=264, l=3, knobs=S80_128, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, a_bc=True, knobs=S80_64),
        dict(m=384, n=520, k=264, l=3, b_bc=True, b_col=True, knobs=S80_128, residual=True, aux=True),
        dict(m=384, n=520, k=264, l=2, a_col=True, a_bc=True, c_col=True, knobs=S80_128_64, bias=True),
        dict(m=384, n=520, k=264, l=2, knobs=S80_SWAP, bias=True, b_bc=True),
    ]
    return cs


SM80_CASES = _distinct(Case(**row) for table in (sm80_basics, sm80_edges) for row in table())

# The SM80 cases compute-sanitizer runs: K tails with NaN padding, odd M/N with padded C rows,
# M=1 (also swapped), a broadcast batch.
_SM80_FAMILIES: dict[str, Callable[[Case, GemmKnobs], bool]] = {
    "K of one element, NaN-padded": lambda c, kn: c.k == 1,
    "K padded, A and B column-major": lambda c, kn: c.k_pad and c.a_col and c.b_col,
    "K padded, two stages": lambda c, kn: c.k_pad and kn.stages == 2,
    "odd M and N, padded C rows, bias + residual": lambda c, kn: c.c_pad and c.bias,
    "odd M and N, padded column-major C": lambda c, kn: c.c_pad and c.c_col,
    "M=1": lambda c, kn: c.m == 1 and not kn.swap_ab,
    "M=1 swapped": lambda c, kn: c.m == 1 and kn.swap_ab,
    "broadcast B over the batch, residual + aux": lambda c, kn: c.b_bc and c.aux,
}


def representatives(
    cases: tuple[Case, ...], families: dict[str, Callable[[Case, GemmKnobs], bool]], default: GemmKnobs
) -> dict[str, Case]:
    """Family name -> the first case that belongs to it (LookupError when a family has none)."""
    picks = {}
    for name, belongs in families.items():
        picks[name] = next((c for c in cases if belongs(c, c.knobs or default)), None)
        if picks[name] is None:
            raise LookupError(f"gemm_cases.representatives: no case of config family {name!r}")
    return picks


SM90_MEMCHECK = frozenset(representatives(SM90_CASES, _SM90_FAMILIES, GemmKnobs()).values())
SM80_MEMCHECK = frozenset(representatives(SM80_CASES, _SM80_FAMILIES, SM80_KNOBS).values())


def sm90_key(case: Case) -> tuple[GemmKnobs, KernelEpilogue, KernelLayout]:
    """The SM90 kernel `torch_gemm.gemm` compiles for ``case``."""
    kn = case.knobs or GemmKnobs()
    a, b, c = case.strides()
    lay = kernel_layout(kn.swap_ab, case.dt, case.out, a, b, c, case.m, case.n, case.k, case.l)
    return kn, KernelEpilogue.from_spec(case.spec(unused_dtype="bf16"), kn.swap_ab), lay


def sm80_key(case: Case) -> tuple[GemmKnobs, KernelEpilogue, KernelLayout]:
    """The SM80 kernel the SM80 test compiles for ``case``."""
    kn = case.knobs or SM80_KNOBS
    a, b, c = case.strides()
    lay = kernel_layout(kn.swap_ab, case.dt, case.out, a, b, c, case.m, case.n, case.k, case.l)
    return kn, KernelEpilogue.from_spec(case.spec(), kn.swap_ab), lay


def compile_keys() -> Iterator[tuple[str, str, GemmKnobs, KernelEpilogue, KernelLayout]]:
    """(kernel, arch, knobs, kernel epilogue, kernel layout) of every case of both suites."""
    for case in SM90_CASES:
        yield ("sm90", SM90_ARCH, *sm90_key(case))
    for case in SM80_CASES:
        yield ("sm80", SM80_ARCH, *sm80_key(case))
