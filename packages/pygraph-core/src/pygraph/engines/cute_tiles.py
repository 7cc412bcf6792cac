"""CuTe DSL building blocks shared by the families' Hopper kernels (gdn_sm90, sdpa_sm90): swizzled
row-major shared tiles (also the canonical wgmma operand layouts), 16-byte cp.async loads and
16-byte stores with row predicates, and warpgroup MMAs over shared (or register) operands.

Imported only by kernel modules, which need CuTe DSL (``nvidia-cutlass-dsl``) anyway; nothing on the
planning path imports it. A kernel's disk cache digests this file with its own sources (`SOURCE`).
"""

from __future__ import annotations

import math
from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass import Float32

__all__ = [
    "SOURCE",
    "VEC",
    "acc",
    "g2s_copy",
    "load_rows",
    "row_major",
    "row_predicate",
    "s2g_copy",
    "store_rows",
    "transposed",
    "wg_gemm",
    "wg_mma",
]

SOURCE = Path(__file__)
VEC = 8  # 16-bit elements per 16-byte copy


def row_major(rows: int, cols: int, stages: int = 0):
    """A (rows, cols) row-major shared layout of 16-bit elements (``stages`` of them side by side as
    a third mode, where given) and its byte swizzle: 8-row atoms of at most 64 columns, the 16-byte
    chunks of a 128-byte (or 64-byte) line XORed with the line, so the 8 rows an ldmatrix phase
    reads and the chunks a warp's cp.async writes hit distinct banks."""
    width = min(cols, 64)
    atom = cute.make_layout((8, width), stride=(width, 1))
    if stages:
        layout = cute.tile_to_shape(atom, (rows, cols, stages), (0, 1, 2))
    else:
        layout = cute.tile_to_shape(atom, (rows, cols), (0, 1))
    bits = min(3, int(math.log2(width * 2 // 16)))
    return layout, cute.make_swizzle(bits, 4, 3)


def transposed(t):
    """The same shared tile seen as (cols, rows)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 0]))


def wg_mma(
    dtype,
    n: int,
    a_mn_major: bool,
    b_mn_major: bool,
    *,
    tiling=(1, 1, 1),
    a_in_registers: bool = False,
):
    """Warpgroup MMAs (``wgmma.m64nNk16``, fp32 accumulators set to accumulate) tiled over
    ``tiling`` warpgroups ((2, 1, 1): a (128, n) product, 64 rows each; (1, 2, 1): (64, 2 n), n
    columns each). Operands from shared memory (A from registers where ``a_in_registers``), in the
    major modes given: an M of 64 k is k instructions per K step."""
    major = cute.nvgpu.OperandMajorMode
    source = cute.nvgpu.warpgroup.OperandSource
    op = cute.nvgpu.warpgroup.MmaF16BF16Op(
        dtype,
        Float32,
        (64, n, 16),
        source.RMEM if a_in_registers else source.SMEM,
        major.MN if a_mn_major else major.K,
        major.MN if b_mn_major else major.K,
    )
    tiled = cute.make_tiled_mma(cute.make_mma_atom(op), tiling)
    tiled.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
    return tiled


def wg_gemm(tiled_mma, tidx, acc_, sA, sB):
    """Issue acc += sA (M, K) @ sB (N, K)^T as one wgmma group (the caller waits on it); the
    operands' shared layouts are the canonical swizzled ones `row_major` builds, read in the
    major mode ``tiled_mma`` was made for."""
    thr = tiled_mma.get_slice(tidx)
    rA = tiled_mma.make_fragment_A(thr.partition_A(sA))
    rB = tiled_mma.make_fragment_B(thr.partition_B(sB))
    cute.nvgpu.warpgroup.fence()
    for kb in range(cute.size(rA, mode=[2])):
        cute.gemm(tiled_mma, acc_, rA[None, None, kb], rB[None, None, kb], acc_)
    cute.nvgpu.warpgroup.commit_group()


def acc(tiled_mma, tidx, m: int, n: int):
    """A zeroed fp32 accumulator of an (m, n) product and its (row, col) coordinates."""
    thr = tiled_mma.get_slice(tidx)
    crd = thr.partition_C(cute.make_identity_tensor((m, n)))
    out = cute.make_rmem_tensor(crd.shape, Float32)
    out.fill(0.0)
    return out, crd


def g2s_copy(dtype, cols: int, threads: int):
    """``threads`` x 16-byte cp.async over a (rows, cols) row-major tile, threads along the row."""
    atom = cute.make_copy_atom(
        cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL), dtype, num_bits_per_copy=128
    )
    per_row = cols // VEC
    thr = cute.make_layout((threads // per_row, per_row), stride=(per_row, 1))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, VEC)))


def s2g_copy(dtype, cols: int, threads: int):
    """``threads`` x 16-byte stores over a (rows, cols) row-major tile, threads along the row."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=128)
    per_row = cols // VEC
    thr = cute.make_layout((threads // per_row, per_row), stride=(per_row, 1))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, VEC)))


def row_predicate(part, crd, rows_left):
    """The per-copy predicate of a 16-byte tiled copy's partition ``part`` of a (rows, cols) tile:
    the copy's row (from ``crd``, the identity tensor partitioned alike) before ``rows_left``."""
    pred = cute.make_rmem_tensor(
        (cute.size(part, mode=[0]) // VEC, cute.size(part, mode=[1]), cute.size(part, mode=[2])),
        cutlass.Boolean,
    )
    for r in range(cute.size(pred, mode=[0])):
        for i in range(cute.size(pred, mode=[1])):
            for j in range(cute.size(pred, mode=[2])):
                pred[r, i, j] = crd[(0, r), i, j][0] < rows_left
    return pred


def load_rows(g2s, tidx, g_tile, s_tile, rows_left):
    """cp.async ``g_tile`` into ``s_tile``, rows at or past ``rows_left`` zero-filled (no commit)."""
    thr = g2s.get_slice(tidx)
    src = thr.partition_S(g_tile)
    dst = thr.partition_D(s_tile)
    crd = thr.partition_S(cute.make_identity_tensor(g_tile.shape))
    cute.copy(g2s, src, dst, pred=row_predicate(src, crd, rows_left))


def store_rows(s2g, tidx, s_tile, g_tile, rows_left):
    """The shared tile into the global ``g_tile``, 16 bytes per store, rows before ``rows_left``
    only: a few wide stores per thread where an accumulator's own layout would take one 2-byte
    store per element."""
    thr = s2g.get_slice(tidx)
    src = thr.partition_S(s_tile)
    dst = thr.partition_D(g_tile)
    crd = thr.partition_D(cute.make_identity_tensor(g_tile.shape))
    cute.copy(s2g, src, dst, pred=row_predicate(dst, crd, rows_left))
