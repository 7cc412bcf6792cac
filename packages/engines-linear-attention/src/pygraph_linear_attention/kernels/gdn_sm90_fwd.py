"""The Gated DeltaNet forward in CuTe DSL (the ``gdn_sm90`` engine): two kernels (three with SPLIT)
over 64-token chunks.

1. `GdnSm90Fwd.prepare` (grid: chunk slots x output heads, 128 threads): per chunk, the options
   applied to g, beta and k, the cumulative log decay gamma, ``A`` (strictly lower, decay-weighted
   ``beta k k^T``, fp32), ``T = (I + A)^-1`` and from it ``w = T (beta exp(gamma) k)`` and
   ``u = T (beta v)``; gamma (fp32), w and u (the io dtype) go to the workspace. No chunk table:
   sequence n's chunks take the slots from ``cu_seqlens[n] // 64 + n`` on (those ranges never
   overlap, and ``T // 64 + N + 1`` slots hold them for any lengths), and each CTA finds its
   sequence by a binary search of ``cu_seqlens``, so nothing is read on the host or built first.
2. `GdnSm90Fwd.scan` (grid: sequences x output heads x value blocks of ``BV``): the state
   ``S`` [BV, K] carried chunk after chunk in fp32 registers (the accumulator of its own update);
   per chunk ``v_new = u - w S^T``, the output ``o = scale (exp(gamma) q S^T + (q k^T * decay) v_new)``
   and ``S = exp(gamma_last) S + (v_new exp(gamma_last - gamma))^T k``. With ``split`` (SPLIT) it
   stores each chunk's entering state and v_new instead of the output (`GdnSm90Fwd.scan_wg` with
   ``wgmma``: the same on warpgroup MMAs, the state carried transposed), and
3. `GdnSm90Fwd.output` (grid: chunk slots x output heads x value blocks) computes every chunk's
   output at once from them.

Every product outside `scan_wg` is a warp-level ``mma.sync.m16n8k16`` (bf16 / fp16 operands, fp32 accumulators)
over operands in shared memory, read by ``ldmatrix`` (transposed where the product wants the
operand's other major mode: S's update reads v_new and k column-wise from their row-major tiles).
Tiles arrive by 16-byte ``cp.async`` copies, zero-filled past the sequence's end (the zero-token
padding `chunked.py` relies on); stores are predicated per element on the sequence's end.

The inverse is exact forward substitution in fp32: column j of ``(I + A)^-1`` solves
``(I + A) x = e_j`` by itself, so 64 threads each carry one column in registers (2016 fused
multiply-adds, no barrier) while the other 64 scale k and v by the gates.
"""

from __future__ import annotations

import math
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.kernels.gdn_cutile_host import CHUNK  # 64 tokens, as the cuTile kernels

THREADS = 128
_VEC = 8  # 16-bit elements per 16-byte cp.async
_DT = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}
_LOG2E = 1.4426950408889634


def _exp(x):
    return cute.math.exp2(x * _LOG2E, fastmath=True)


def _row_major(rows: int, cols: int, stages: int = 0):
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


def _aligned(stride):
    """A row stride the 16-byte copies may rely on (the engine checks it: head dims are multiples of 8)."""
    return cute.assume(stride, divby=_VEC)


def _transposed(t):
    """The same shared tile seen as (cols, rows)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 0]))


def _tiled_mma(dtype, m: int, n: int):
    """4 warps over an (m, n) product: m / 16 of them along M (at most 4), the rest along N; each warp
    takes two n8 atoms side by side, so one x4 ldmatrix feeds its B."""
    wm = min(4, m // 16)
    wn = THREADS // 32 // wm
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(dtype, Float32, (16, 8, 16)),
        cute.make_layout((wm, wn, 1)),
        permutation_mnk=(wm * 16, wn * 16, 16),
    )


def _wg_mma(dtype, n: int, a_mn_major: bool, b_mn_major: bool):
    """The warpgroup (4 warps) ``wgmma.m64nNk16`` over operands in shared memory (the major modes
    as given), fp32 accumulators set to accumulate: an M of 64 k is k instructions per K step."""
    major = cute.nvgpu.OperandMajorMode
    op = cute.nvgpu.warpgroup.MmaF16BF16Op(
        dtype,
        Float32,
        (64, n, 16),
        cute.nvgpu.warpgroup.OperandSource.SMEM,
        major.MN if a_mn_major else major.K,
        major.MN if b_mn_major else major.K,
    )
    tiled = cute.make_tiled_mma(cute.make_mma_atom(op), (1, 1, 1))
    tiled.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
    return tiled


def _wg_gemm(tiled_mma, tidx, acc, sA, sB):
    """Issue acc += sA (M, K) @ sB (N, K)^T as one wgmma group (the caller waits on it); the
    operands' shared layouts are the canonical swizzled ones `_row_major` builds, read in the
    major mode ``tiled_mma`` was made for."""
    thr = tiled_mma.get_slice(tidx)
    rA = tiled_mma.make_fragment_A(thr.partition_A(sA))
    rB = tiled_mma.make_fragment_B(thr.partition_B(sB))
    cute.nvgpu.warpgroup.fence()
    for kb in range(cute.size(rA, mode=[2])):
        cute.gemm(tiled_mma, acc, rA[None, None, kb], rB[None, None, kb], acc)
    cute.nvgpu.warpgroup.commit_group()


def _async_visible():
    """This thread's shared-memory writes (stores, completed cp.async) visible to wgmma's reads
    (the async proxy); a barrier after it makes every thread's so."""
    cute.arch.fence_proxy("async.shared", space="cta")


def _g2s(dtype, cols: int):
    """128 threads x 16-byte cp.async over a (rows, cols) row-major tile, threads along the row."""
    atom = cute.make_copy_atom(
        cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL), dtype, num_bits_per_copy=128
    )
    per_row = cols // _VEC
    thr = cute.make_layout((THREADS // per_row, per_row), stride=(per_row, 1))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, _VEC)))


def _s2g(dtype, cols: int):
    """128 threads x 16-byte stores over a (rows, cols) row-major tile, threads along the row."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=128)
    per_row = cols // _VEC
    thr = cute.make_layout((THREADS // per_row, per_row), stride=(per_row, 1))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, _VEC)))


# Trace-time helpers (plain Python; everything passed explicitly).
def _store_rows(s2g, tidx, s_tile, g_tile, rows_left):
    """The shared (C, D) tile into the global ``g_tile``, 16 bytes per store, rows before
    ``rows_left`` only: a few wide stores per thread where the accumulator's own layout would take
    one 2-byte store per element (their queue stalled the split scan's chunk step)."""
    thr = s2g.get_slice(tidx)
    src = thr.partition_S(s_tile)
    dst = thr.partition_D(g_tile)
    crd = thr.partition_D(cute.make_identity_tensor(g_tile.shape))
    pred = cute.make_rmem_tensor(
        (cute.size(dst, mode=[0]) // _VEC, cute.size(dst, mode=[1]), cute.size(dst, mode=[2])),
        cutlass.Boolean,
    )
    for r in range(cute.size(pred, mode=[0])):
        for i in range(cute.size(pred, mode=[1])):
            for j in range(cute.size(pred, mode=[2])):
                pred[r, i, j] = crd[(0, r), i, j][0] < rows_left
    cute.copy(s2g, src, dst, pred=pred)


def _row_pair(crd):
    """The two rows a thread's fragment of a 64-row wgmma accumulator holds (each warp 16 rows, a
    lane rows l/4 and l/4 + 8), from its coordinates: a per-row value is then computed twice per
    thread instead of once per element."""
    return crd[0][0], crd[cute.size(crd) - 1][0]


@cute.jit
def _tail(row, rows_left, last, sGamma):
    """exp(last - gamma[row]) for a row before ``rows_left``, else 0 (a row past the sequence)."""
    t = Float32(0.0)
    if row < rows_left:
        t = _exp(last - sGamma[row])
    return t


def _load_rows(g2s, tidx, g_tile, s_tile, rows_left):
    """cp.async ``g_tile`` (C, D) into ``s_tile``, rows at or past ``rows_left`` zero-filled (no commit)."""
    thr = g2s.get_slice(tidx)
    src = thr.partition_S(g_tile)
    dst = thr.partition_D(s_tile)
    crd = thr.partition_S(cute.make_identity_tensor(g_tile.shape))
    pred = cute.make_rmem_tensor(
        (cute.size(src, mode=[0]) // _VEC, cute.size(src, mode=[1]), cute.size(src, mode=[2])),
        cutlass.Boolean,
    )
    for r in range(cute.size(pred, mode=[0])):
        for i in range(cute.size(pred, mode=[1])):
            for j in range(cute.size(pred, mode=[2])):
                pred[r, i, j] = crd[(0, r), i, j][0] < rows_left
    cute.copy(g2s, src, dst, pred=pred)


def _chunk_rows(m, r0, head, width: int, block: int = 0):
    """The (CHUNK, width) tile of ``m`` [T, heads, dim] from token ``r0``, head ``head``, column block
    ``block`` (rows past the sequence are the caller's to predicate)."""
    return cute.local_tile(cute.domain_offset((r0, 0), m[None, head, None]), (CHUNK, width), (0, block))


def _load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, buffers, buf, with_q=True):
    """cp.async the chunk of rows from ``r0`` of q (unless not ``with_q``), k (head hk), w and u (head
    h, value block vb) into stage ``buf`` of the shared buffers, rows at or past ``rows_left``
    zero-filled (no commit)."""
    mQ, mK, mW, mU, hk, h, vb, K, BV = tiles
    sQ, sK, sW, sU = buffers

    if with_q:
        _load_rows(g2s_k, tidx, _chunk_rows(mQ, r0, hk, K), sQ[None, None, buf], rows_left)
    _load_rows(g2s_k, tidx, _chunk_rows(mK, r0, hk, K), sK[None, None, buf], rows_left)
    _load_rows(g2s_k, tidx, _chunk_rows(mW, r0, h, K), sW[None, None, buf], rows_left)
    _load_rows(g2s_v, tidx, _chunk_rows(mU, r0, h, BV, vb), sU[None, None, buf], rows_left)


@cute.jit
def _slot_chunk(mCu, slot, sequences, search_steps):
    """(first token, length, chunk) of the sequence whose chunk slots hold ``slot``: the last n with
    cu[n] // 64 + n <= slot (binary search); the chunk may lie past the sequence's end (idle slot)."""
    lo = Int32(0)
    hi = sequences
    for _ in cutlass.range(search_steps, unroll=1):
        mid = (lo + hi) // 2
        take = Int32(Int32(mCu[mid]) // CHUNK + mid <= slot)
        lo = lo + take * (mid - lo)
        hi = hi + (1 - take) * (mid - hi)
    bos = Int32(mCu[lo])
    length = Int32(mCu[lo + 1]) - bos
    return bos, length, slot - (bos // CHUNK + lo)


@cute.jit
def _gamma_row(mGamma, r0, rows_left, h, tidx):
    """gamma of the chunk's row ``tidx`` (from token ``r0``, head ``h``); 0 at or past ``rows_left``."""
    gam = Float32(0.0)
    if tidx < rows_left:
        gam = Float32(mGamma[r0 + tidx, h])
    return gam


def _gemm(tiled_mma, tidx, acc, sA, sB, a_mn_major: bool, b_mn_major: bool, dtype):
    """acc += sA (M, K) @ sB (N, K)^T, operands from shared memory by ldmatrix (transposed for an
    operand whose M / N mode is the contiguous one)."""
    thr = tiled_mma.get_slice(tidx)
    rA = tiled_mma.make_fragment_A(thr.partition_A(sA))
    rB = tiled_mma.make_fragment_B(thr.partition_B(sB))
    cp_a = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(a_mn_major, 4), dtype), tiled_mma
    )
    cp_b = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(b_mn_major, 4), dtype), tiled_mma
    )
    ta, tb = cp_a.get_slice(tidx), cp_b.get_slice(tidx)
    src_a, dst_a = ta.partition_S(sA), ta.retile(rA)
    src_b, dst_b = tb.partition_S(sB), tb.retile(rB)
    for kb in range(cute.size(rA, mode=[2])):
        cute.copy(cp_a, src_a[None, None, kb], dst_a[None, None, kb])
        cute.copy(cp_b, src_b[None, None, kb], dst_b[None, None, kb])
        cute.gemm(tiled_mma, acc, rA[None, None, kb], rB[None, None, kb], acc)


def _acc(tiled_mma, tidx, m: int, n: int):
    """A zeroed fp32 accumulator of an (m, n) product and its (row, col) coordinates."""
    thr = tiled_mma.get_slice(tidx)
    crd = thr.partition_C(cute.make_identity_tensor((m, n)))
    acc = cute.make_rmem_tensor(crd.shape, Float32)
    acc.fill(0.0)
    return acc, crd


def _to_smem(tiled_mma, tidx, acc, s_tile, dtype):
    """The accumulator, converted to ``dtype``, into the shared tile of its shape."""
    dst = tiled_mma.get_slice(tidx).partition_C(s_tile)
    for i in range(cute.size(acc)):
        dst[i] = acc[i].to(dtype)


@cute.jit
def _to_gmem(tiled_mma, tidx, acc, crd, g_tile, rows_left, dtype: cutlass.Constexpr):
    """The accumulator, converted, into the global tile of its shape: rows before ``rows_left`` only."""
    dst = tiled_mma.get_slice(tidx).partition_C(g_tile)
    for i in cutlass.range_constexpr(cute.size(acc)):
        if crd[i][0] < rows_left:
            dst[i] = acc[i].to(dtype)


class GdnSm90Fwd:
    """One static configuration of the forward: dims, value block, dtypes and options."""

    def __init__(
        self,
        *,
        key_dim: int,
        value_dim: int,
        block_v: int,
        io_dtype: str,
        beta_dtype: str,
        h0_dtype: str,
        ht_dtype: str,
        cu_dtype: str,
        scale: float,
        l2norm: bool,
        beta_sigmoid: bool,
        neg_eigval: bool,
        safe_gate: bool,
        has_dt_bias: bool,
        has_h0: bool,
        store_ht: bool,
        stages: int = 1,
        split: bool = False,
        store_t: bool = False,
        wgmma: int = 0,
    ) -> None:
        self.K, self.V, self.BV = key_dim, value_dim, block_v
        self.io = _DT[io_dtype]
        self.beta_t = _DT[beta_dtype]
        self.h0_t, self.ht_t = _DT[h0_dtype], _DT[ht_dtype]
        self.cu_t = cutlass.Int64 if cu_dtype == "int64" else Int32
        self.scale = scale
        self.l2norm, self.beta_sigmoid, self.neg_eigval = l2norm, beta_sigmoid, neg_eigval
        self.safe_gate, self.has_dt_bias = safe_gate, has_dt_bias
        self.has_h0, self.store_ht = has_h0, store_ht
        # split: the scan stores each chunk's entering state and v_new, and `output` computes every
        # chunk's output at once (two products per chunk step in the scan instead of five)
        self.split = split
        self.store_t = store_t  # prepare also stores each chunk's T = (I + A)^-1 (the backward reads it)
        self.stages = stages  # the scan's shared buffers of q, k, w, u and gamma: 2 prefetches the next chunk
        # 1: the split scan on warpgroup MMAs (`scan_wg`); 2: its output kernel too (`output_wg`)
        self.wgmma = wgmma >= 1
        self.wgmma_output = wgmma >= 2

    # ------------------------------------------------------------------ host side (traced once)
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        a_log_ptr: cute.Pointer,
        dt_bias_ptr: cute.Pointer,
        cu_ptr: cute.Pointer,
        h0_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        ht_ptr: cute.Pointer,
        gamma_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        hs_ptr: cute.Pointer,
        vnew_ptr: cute.Pointer,
        tokens: Int32,
        sequences: Int32,
        search_steps: Int32,  # ceil(log2(sequences + 1)): the slot search's halvings
        heads_qk: Int32,
        heads_v: Int32,
        heads_out: Int32,
        heads_g: Int32,
        heads_beta: Int32,
        heads_a_log: Int32,
        heads_dt_bias: Int32,
        stream: Any,
    ):
        K, V, C = self.K, self.V, CHUNK
        mQ = cute.make_tensor(
            q_ptr, cute.make_layout((tokens, heads_qk, K), stride=(_aligned(heads_qk * K), K, 1))
        )
        mK = cute.make_tensor(
            k_ptr, cute.make_layout((tokens, heads_qk, K), stride=(_aligned(heads_qk * K), K, 1))
        )
        mV = cute.make_tensor(
            v_ptr, cute.make_layout((tokens, heads_v, V), stride=(_aligned(heads_v * V), V, 1))
        )
        mG = cute.make_tensor(g_ptr, cute.make_layout((tokens, heads_g), stride=(heads_g, 1)))
        mBeta = cute.make_tensor(beta_ptr, cute.make_layout((tokens, heads_beta), stride=(heads_beta, 1)))
        mALog = cute.make_tensor(a_log_ptr, cute.make_layout((heads_a_log,)))
        mDtBias = cute.make_tensor(dt_bias_ptr, cute.make_layout((heads_dt_bias,)))
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((sequences + 1,)))
        state_shape = (sequences, heads_out, V, K)
        state_stride = (heads_out * V * K, V * K, K, 1)
        mH0 = cute.make_tensor(h0_ptr, cute.make_layout(state_shape, stride=state_stride))
        mHt = cute.make_tensor(ht_ptr, cute.make_layout(state_shape, stride=state_stride))
        mO = cute.make_tensor(
            o_ptr, cute.make_layout((tokens, heads_out, V), stride=(_aligned(heads_out * V), V, 1))
        )
        mGamma = cute.make_tensor(gamma_ptr, cute.make_layout((tokens, heads_out), stride=(heads_out, 1)))
        mW = cute.make_tensor(
            w_ptr, cute.make_layout((tokens, heads_out, K), stride=(_aligned(heads_out * K), K, 1))
        )
        mU = cute.make_tensor(
            u_ptr, cute.make_layout((tokens, heads_out, V), stride=(_aligned(heads_out * V), V, 1))
        )
        slots = tokens // C + sequences + 1
        mHs = cute.make_tensor(
            hs_ptr,
            cute.make_layout((slots, heads_out, V, K), stride=(_aligned(heads_out * V * K), V * K, K, 1)),
        )
        mVnew = cute.make_tensor(
            vnew_ptr, cute.make_layout((tokens, heads_out, V), stride=(_aligned(heads_out * V), V, 1))
        )
        groups = (
            heads_out // heads_qk, heads_out // heads_v, heads_out // heads_g, heads_out // heads_beta,
            heads_out // heads_a_log, heads_out // heads_dt_bias,
        )  # fmt: skip
        self.prepare(
            mK, mV, mG, mBeta, mALog, mDtBias, mCu, mGamma, mW, mU, mHs, sequences, search_steps, groups
        ).launch(grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream)
        self.launch_scan(
            mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, sequences, heads_out, groups[0], stream
        )
        if const_expr(self.split and self.wgmma_output):
            self.output_wg(mQ, mK, mGamma, mCu, mHs, mVnew, mO, sequences, search_steps, groups[0]).launch(
                grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream
            )
        elif const_expr(self.split):
            self.output(mQ, mK, mGamma, mCu, mHs, mVnew, mO, sequences, search_steps, groups[0]).launch(
                grid=[slots, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
            )

    def launch_scan(
        self, mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, sequences, heads_out, k_group, stream
    ):
        """The state scan's launch: `scan_wg` for the split scan with WGMMA, else `scan`."""
        grid = [sequences, heads_out, self.V // self.BV]
        if const_expr(self.split and self.wgmma):
            self.scan_wg(mK, mW, mU, mGamma, mCu, mH0, mHt, mHs, mVnew, k_group).launch(
                grid=grid, block=[THREADS, 1, 1], stream=stream
            )
        else:
            self.scan(mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, k_group).launch(
                grid=grid, block=[THREADS, 1, 1], stream=stream
            )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def prepare(
        self,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,
        mBeta: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        mCu: cute.Tensor,
        mGamma: cute.Tensor,
        mW: cute.Tensor,
        mU: cute.Tensor,
        mT: cute.Tensor,  # [slots, HO, C, C] io, written only with store_t
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
    ):
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group, g_group, b_group, a_group, d_group = groups
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()

        bos, length, c = _slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            k_layout, k_swz = _row_major(C, K)
            v_layout, v_swz = _row_major(C, V)
            t_layout, t_swz = _row_major(C, C)
            sK = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sV = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sT = smem.allocate_tensor(io, t_layout, 1024, t_swz)
            sA = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)
            sGamma = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            sBeta = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)

            gK = _chunk_rows(mK, r0, h // k_group, K)
            gV = _chunk_rows(mV, r0, h // v_group, V)
            _load_rows(_g2s(io, K), tidx, gK, sK, rows_left)
            _load_rows(_g2s(io, V), tidx, gV, sV, rows_left)
            cute.arch.cp_async_commit_group()

            # the gates (warps 0 and 1, one row each): options, then gamma = cumsum by warp scans
            if tidx < C:
                valid = tidx < rows_left
                gate = Float32(0.0)
                wr = Float32(0.0)
                if valid:
                    gate = Float32(mG[r0 + tidx, h // g_group])
                    wr = Float32(mBeta[r0 + tidx, h // b_group].to(Float32))
                if const_expr(self.safe_gate):
                    rate = _exp(Float32(mALog[h // a_group]))
                    x = gate
                    if const_expr(self.has_dt_bias):
                        x = x + Float32(mDtBias[h // d_group])
                    soft = cute.math.max(x, Float32(0.0)) + cute.math.log(
                        1.0 + _exp(-cute.math.abs(x)), fastmath=True
                    )
                    gate = Float32(0.0)
                    if valid:
                        gate = -rate * soft
                if const_expr(self.beta_sigmoid):
                    sig = 1.0 / (1.0 + _exp(-wr))
                    wr = Float32(0.0)
                    if valid:
                        wr = sig
                if const_expr(self.neg_eigval):
                    wr = wr * 2.0
                lane = tidx % 32
                for off in cutlass.range_constexpr(5):
                    up = cute.arch.shuffle_sync_up(gate, 1 << off, mask_and_clamp=0)
                    if lane >= (1 << off):
                        gate = gate + up
                sGamma[tidx] = gate
                sBeta[tidx] = wr
            cute.arch.sync_threads()
            if tidx >= 32 and tidx < C:
                sGamma[tidx] = sGamma[tidx] + sGamma[31]
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                _l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()

            # A = strictly lower (k k^T) * exp(gamma_i - gamma_j) * beta_i, fp32
            mma_cc = _tiled_mma(io, C, C)
            gram, crd = _acc(mma_cc, tidx, C, C)
            _gemm(mma_cc, tidx, gram, sK, sK, False, False, io)
            dst = mma_cc.get_slice(tidx).partition_C(sA)
            for i in cutlass.range_constexpr(cute.size(gram)):
                row, col = crd[i][0], crd[i][1]
                val = Float32(0.0)
                if row > col:
                    val = gram[i] * _exp(sGamma[row] - sGamma[col]) * sBeta[row]
                dst[i] = val
            cute.arch.sync_threads()

            if tidx < C:  # column tidx of (I + A)^-1 by forward substitution
                x = cute.make_rmem_tensor((C,), Float32)
                for i in cutlass.range_constexpr(C):
                    x[i] = Float32(tidx == i)
                for i in cutlass.range_constexpr(1, C):
                    s = x[i]
                    for m in cutlass.range_constexpr(i):
                        s = s - sA[i, m] * x[m]
                    x[i] = s
                for i in cutlass.range_constexpr(C):
                    sT[i, tidx] = x[i].to(io)
            else:  # meanwhile: k by beta exp(gamma) and v by beta, in place (k is not read again)
                t = tidx - C
                for e in cutlass.range_constexpr(C * K // C):
                    flat = t + e * C
                    row = flat // K
                    col = flat % K
                    sK[row, col] = (sK[row, col].to(Float32) * sBeta[row] * _exp(sGamma[row])).to(io)
                for e in cutlass.range_constexpr(C * V // C):
                    flat = t + e * C
                    row = flat // V
                    col = flat % V
                    sV[row, col] = (sV[row, col].to(Float32) * sBeta[row]).to(io)
            cute.arch.sync_threads()
            if const_expr(self.store_t):
                for e in cutlass.range_constexpr(C * C // THREADS):
                    flat = tidx + e * THREADS
                    mT[slot, h, flat // C, flat % C] = sT[flat // C, flat % C]

            # w = T kw, u = T vw: B is kw / vw read column-wise (N = K or V, K = the chunk)
            mma_ck = _tiled_mma(io, C, K)
            w, crd_w = _acc(mma_ck, tidx, C, K)
            _gemm(mma_ck, tidx, w, sT, _transposed(sK), False, True, io)
            gW = _chunk_rows(mW, r0, h, K)
            _to_gmem(mma_ck, tidx, w, crd_w, gW, rows_left, io)
            mma_cv = _tiled_mma(io, C, V)
            u, crd_u = _acc(mma_cv, tidx, C, V)
            _gemm(mma_cv, tidx, u, sT, _transposed(sV), False, True, io)
            gU = _chunk_rows(mU, r0, h, V)
            _to_gmem(mma_cv, tidx, u, crd_u, gU, rows_left, io)
            if tidx < rows_left and tidx < C:
                mGamma[r0 + tidx, h] = sGamma[tidx]

    @cute.kernel
    def scan(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mW: cute.Tensor,
        mU: cute.Tensor,
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mH0: cute.Tensor,
        mO: cute.Tensor,
        mHt: cute.Tensor,
        mHs: cute.Tensor,
        mVnew: cute.Tensor,
        k_group: Int32,
    ):
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos

        smem = utils.SmemAllocator()
        nbuf = self.stages  # 2: chunk c + 1's tiles and gamma load while chunk c computes
        k_layout, k_swz = _row_major(C, K, nbuf)
        u_layout, u_swz = _row_major(C, BV, nbuf)
        v_layout, v_swz = _row_major(C, BV)
        s_layout, s_swz = _row_major(BV, K)
        p_layout, p_swz = _row_major(C, C)
        sQs = None if const_expr(self.split) else smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sWs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sUs = smem.allocate_tensor(io, u_layout, 1024, u_swz)
        sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sCar = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        sP = None if const_expr(self.split) else smem.allocate_tensor(io, p_layout, 1024, p_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, nbuf), stride=(1, C)), 16)

        mma_state = _tiled_mma(io, BV, K)  # S [BV, K]
        mma_cv = _tiled_mma(io, C, BV)  # v_new, the output
        mma_cc = _tiled_mma(io, C, C)  # q k^T
        state, crd_s = _acc(mma_state, tidx, BV, K)
        thr_s = mma_state.get_slice(tidx)
        if const_expr(self.has_h0):
            src = thr_s.partition_C(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0)))
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = src[i].to(Float32)
        g2s_k, g2s_v = _g2s(io, K), _g2s(io, BV)
        tiles = (mQ, mK, mW, mU, hk, h, vb, K, BV)
        chunks = cute.ceil_div(length, C)
        if const_expr(nbuf == 2):  # the prologue: chunk 0 into buffer 0
            _load_chunk(g2s_k, g2s_v, tidx, tiles, bos, length, (sQs, sKs, sWs, sUs), 0, not self.split)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGammas[tidx, 0] = _gamma_row(mGamma, bos, length, h, tidx)

        for c in cutlass.range(chunks, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = c % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                if c + 1 < chunks:
                    _load_chunk(
                        g2s_k,
                        g2s_v,
                        tidx,
                        tiles,
                        r0 + C,
                        rows_left - C,
                        (sQs, sKs, sWs, sUs),
                        1 - buf,
                        not self.split,
                    )
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    g_next = _gamma_row(mGamma, r0 + C, rows_left - C, h, tidx)
            else:
                _load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, (sQs, sKs, sWs, sUs), 0, not self.split)
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    sGammas[tidx, 0] = _gamma_row(mGamma, r0, rows_left, h, tidx)
            sQ = None if const_expr(self.split) else sQs[None, None, buf]
            sK, sW = sKs[None, None, buf], sWs[None, None, buf]
            sU, sGamma = sUs[None, None, buf], sGammas[None, buf]
            _to_smem(mma_state, tidx, state, sS, io)
            cute.arch.cp_async_wait_group(nbuf - 1)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if const_expr(not self.split):
                    _l2_normalize_rows(sQ, tidx, K)
                _l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            if const_expr(self.split):  # the state entering this chunk, for the output kernel
                slot = bos // C + n + c
                gHs = cute.local_tile(mHs[slot, h, None, None], (BV, K), (vb, 0))
                _to_gmem(mma_state, tidx, state, crd_s, gHs, BV, io)

            # v_new = u - w S^T; the carried rows (v_new exp(last - gamma)) beside it
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]
            v_new, crd_v = _acc(mma_cv, tidx, C, BV)
            _gemm(mma_cv, tidx, v_new, sW, sS, False, False, io)
            u_part = mma_cv.get_slice(tidx).partition_C(sU)
            vn_part = mma_cv.get_slice(tidx).partition_C(sVn)
            car_part = mma_cv.get_slice(tidx).partition_C(sCar)
            for i in cutlass.range_constexpr(cute.size(v_new)):
                row = crd_v[i][0]
                val = u_part[i].to(Float32) - v_new[i]
                vn_part[i] = val.to(io)
                v_new[i] = val
                carried = Float32(0.0)
                if row < rows_left:
                    carried = val * _exp(last - sGamma[row])
                car_part[i] = carried.to(io)

            if const_expr(self.split):
                gVn = _chunk_rows(mVnew, r0, h, BV, vb)
                _to_gmem(mma_cv, tidx, v_new, crd_v, gVn, rows_left, io)
                cute.arch.sync_threads()  # sCar complete: the state update reads every warp's rows
            else:  # (its barrier before P v_new also completes sCar)
                gO = _chunk_rows(mO, r0, h, BV, vb)
                _chunk_output(
                    mma_cc, mma_cv, tidx, sQ, sK, sS, sVn, sP, sGamma, gO, rows_left, io, self.scale
                )

            # S = exp(last) S + carried^T k
            decay = _exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            _gemm(mma_state, tidx, state, _transposed(sCar), _transposed(sK), True, True, io)
            if const_expr(nbuf == 2):
                if tidx < C:
                    sGammas[tidx, 1 - buf] = g_next
            cute.arch.sync_threads()  # every read of this chunk's tiles is done

        if const_expr(self.store_ht):
            dst = thr_s.partition_C(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0)))
            for i in cutlass.range_constexpr(cute.size(state)):
                dst[i] = state[i].to(self.ht_t)

    @cute.kernel
    def scan_wg(
        self,
        mK: cute.Tensor,
        mW: cute.Tensor,
        mU: cute.Tensor,
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mH0: cute.Tensor,
        mHt: cute.Tensor,
        mHs: cute.Tensor,
        mVnew: cute.Tensor,
        k_group: Int32,
    ):
        """The split scan (SPLIT with WGMMA) on warpgroup MMAs: the state carried transposed, S^T
        [K, BV] in fp32 wgmma accumulators; per chunk ``v_new = w S^T`` (A = w, B = the state's io
        copy, both K-major) and ``S^T = exp(last) S^T + k^T carried`` (A = k and B = carried, both
        read MN-major from their row-major tiles). Stores each chunk's entering state and v_new, as
        `scan` does with split."""
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos

        smem = utils.SmemAllocator()
        nbuf = self.stages
        k_layout, k_swz = _row_major(C, K, nbuf)
        u_layout, u_swz = _row_major(C, BV, nbuf)
        v_layout, v_swz = _row_major(C, BV)
        s_layout, s_swz = _row_major(BV, K)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sWs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sUs = smem.allocate_tensor(io, u_layout, 1024, u_swz)
        sCar = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, nbuf), stride=(1, C)), 16)
        s2g_k, s2g_v = _s2g(io, K), _s2g(io, BV)

        mma_v = _wg_mma(io, BV, False, False)  # v_new [C, BV] = w [C, K] . S [BV, K]^T
        mma_s = _wg_mma(io, BV, True, True)  # S^T [K, BV] += k^T [K, C] . carried^T [BV, C]^T
        state, _ = _acc(mma_s, tidx, K, BV)
        thr_s = mma_s.get_slice(tidx)
        if const_expr(self.has_h0):
            src = thr_s.partition_C(_transposed(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0))))
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = src[i].to(Float32)
        g2s_k, g2s_v = _g2s(io, K), _g2s(io, BV)
        tiles = (None, mK, mW, mU, hk, h, vb, K, BV)
        chunks = cute.ceil_div(length, C)
        if const_expr(nbuf == 2):
            _load_chunk(g2s_k, g2s_v, tidx, tiles, bos, length, (None, sKs, sWs, sUs), 0, False)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGammas[tidx, 0] = _gamma_row(mGamma, bos, length, h, tidx)

        for c in cutlass.range(chunks, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = c % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                if c + 1 < chunks:
                    _load_chunk(
                        g2s_k,
                        g2s_v,
                        tidx,
                        tiles,
                        r0 + C,
                        rows_left - C,
                        (None, sKs, sWs, sUs),
                        1 - buf,
                        False,
                    )
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    g_next = _gamma_row(mGamma, r0 + C, rows_left - C, h, tidx)
            else:
                _load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, (None, sKs, sWs, sUs), 0, False)
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    sGammas[tidx, 0] = _gamma_row(mGamma, r0, rows_left, h, tidx)
            sK, sW = sKs[None, None, buf], sWs[None, None, buf]
            sU, sGamma = sUs[None, None, buf], sGammas[None, buf]
            # the entering state: its io copy for the product, and from it to the workspace (`output`)
            _to_smem(mma_s, tidx, state, _transposed(sS), io)
            cute.arch.cp_async_wait_group(nbuf - 1)
            _async_visible()
            cute.arch.sync_threads()
            slot = bos // C + n + c
            _store_rows(s2g_k, tidx, sS, cute.local_tile(mHs[slot, h, None, None], (BV, K), (vb, 0)), BV)
            if const_expr(self.l2norm):
                _l2_normalize_rows(sK, tidx, K)
                _async_visible()
                cute.arch.sync_threads()

            # v_new = u - w S^T; the carried rows (v_new exp(last - gamma)) beside it
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]
            v_new, crd_v = _acc(mma_v, tidx, C, BV)
            _wg_gemm(mma_v, tidx, v_new, sW, sS)
            cute.nvgpu.warpgroup.wait_group(0)
            u_part = mma_v.get_slice(tidx).partition_C(sU)
            car_part = mma_v.get_slice(tidx).partition_C(sCar)
            vn_part = mma_v.get_slice(tidx).partition_C(sVn)
            ra, rb = _row_pair(crd_v)
            ta, tb = _tail(ra, rows_left, last, sGamma), _tail(rb, rows_left, last, sGamma)
            for i in cutlass.range_constexpr(cute.size(v_new)):
                val = u_part[i].to(Float32) - v_new[i]
                vn_part[i] = val.to(io)
                tail = tb
                if crd_v[i][0] == ra:
                    tail = ta
                car_part[i] = (val * tail).to(io)
            _async_visible()
            cute.arch.sync_threads()  # sCar and sVn complete
            _store_rows(s2g_v, tidx, sVn, _chunk_rows(mVnew, r0, h, BV, vb), rows_left)

            # S^T = exp(last) S^T + k^T carried
            decay = _exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            _wg_gemm(mma_s, tidx, state, _transposed(sK), _transposed(sCar))
            cute.nvgpu.warpgroup.wait_group(0)
            if const_expr(nbuf == 2):
                if tidx < C:
                    sGammas[tidx, 1 - buf] = g_next
            cute.arch.sync_threads()  # every read of this chunk's tiles is done

        if const_expr(self.store_ht):
            dst = thr_s.partition_C(_transposed(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0))))
            for i in cutlass.range_constexpr(cute.size(state)):
                dst[i] = state[i].to(self.ht_t)

    @cute.kernel
    def output_wg(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mHs: cute.Tensor,
        mVnew: cute.Tensor,
        mO: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        k_group: Int32,
    ):
        """`output` (WGMMA 2) on warpgroup MMAs, one CTA per chunk slot and head over the whole value
        dim (grid: chunk slots x output heads): q k^T once per chunk instead of once per value block."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        hk = h // k_group
        bos, length, c = _slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            k_layout, k_swz = _row_major(C, K)
            v_layout, v_swz = _row_major(C, V)
            s_layout, s_swz = _row_major(V, K)
            p_layout, p_swz = _row_major(C, C)
            sQ = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sK = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
            sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sO = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)
            sGamma = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            g2s_k, g2s_v = _g2s(io, K), _g2s(io, V)

            _load_rows(g2s_k, tidx, _chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            _load_rows(g2s_k, tidx, _chunk_rows(mK, r0, hk, K), sK, rows_left)
            _load_rows(g2s_v, tidx, _chunk_rows(mVnew, r0, h, V), sVn, rows_left)
            _load_rows(g2s_k, tidx, cute.local_tile(mHs[slot, h, None, None], (V, K), (0, 0)), sS, V)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGamma[tidx] = _gamma_row(mGamma, r0, rows_left, h, tidx)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                _l2_normalize_rows(sQ, tidx, K)
                _l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            _async_visible()
            cute.arch.sync_threads()
            gO = _chunk_rows(mO, r0, h, V)
            _chunk_output_wg(tidx, sQ, sK, sS, sVn, sP, sO, sGamma, gO, rows_left, io, self.scale)

    @cute.kernel
    def output(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mHs: cute.Tensor,
        mVnew: cute.Tensor,
        mO: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        k_group: Int32,
    ):
        """SPLIT: every chunk's output at once, from the state entering it and its v_new (the scan's)."""
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos, length, c = _slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            k_layout, k_swz = _row_major(C, K)
            v_layout, v_swz = _row_major(C, BV)
            s_layout, s_swz = _row_major(BV, K)
            p_layout, p_swz = _row_major(C, C)
            sQ = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sK = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
            sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)
            sGamma = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            g2s_k, g2s_v = _g2s(io, K), _g2s(io, BV)

            _load_rows(g2s_k, tidx, _chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            _load_rows(g2s_k, tidx, _chunk_rows(mK, r0, hk, K), sK, rows_left)
            _load_rows(g2s_v, tidx, _chunk_rows(mVnew, r0, h, BV, vb), sVn, rows_left)
            _load_rows(g2s_k, tidx, cute.local_tile(mHs[slot, h, None, None], (BV, K), (vb, 0)), sS, BV)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGamma[tidx] = _gamma_row(mGamma, r0, rows_left, h, tidx)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                _l2_normalize_rows(sQ, tidx, K)
                _l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            gO = _chunk_rows(mO, r0, h, BV, vb)
            mma_cc, mma_cv = _tiled_mma(io, C, C), _tiled_mma(io, C, BV)
            _chunk_output(mma_cc, mma_cv, tidx, sQ, sK, sS, sVn, sP, sGamma, gO, rows_left, io, self.scale)


@cute.jit
def _chunk_output_wg(
    tidx, sQ, sK, sS, sVn, sP, sO, sGamma, gO, rows_left, io: cutlass.Constexpr, scale: cutlass.Constexpr
):
    """`_chunk_output` on warpgroup MMAs for the whole value dim: o = scale (exp(gamma) q S^T +
    P v_new), P = (q k^T) exp(gamma_i - gamma_j) on the causal, real part; q S^T and q k^T issue
    together, P v_new reads v_new MN-major; o leaves through ``sO``, 16 bytes per store. The tiles
    are complete and visible to the async proxy on entry."""
    C, V = CHUNK, cute.size(sVn, mode=[1])
    mma_cc = _wg_mma(io, C, False, False)  # q k^T
    mma_qs = _wg_mma(io, V, False, False)  # q S^T: S [V, K] K-major
    mma_pv = _wg_mma(io, V, False, True)  # P v_new: v_new [C, V] read MN-major
    scores, crd_p = _acc(mma_cc, tidx, C, C)
    _wg_gemm(mma_cc, tidx, scores, sQ, sK)
    out, crd_o = _acc(mma_qs, tidx, C, V)
    _wg_gemm(mma_qs, tidx, out, sQ, sS)
    cute.nvgpu.warpgroup.wait_group(0)
    pa, pb = _row_pair(crd_p)
    ga, gb = sGamma[pa], sGamma[pb]
    p_part = mma_cc.get_slice(tidx).partition_C(sP)
    for i in cutlass.range_constexpr(cute.size(scores)):
        row, col = crd_p[i][0], crd_p[i][1]
        g_row = gb
        if row == pa:
            g_row = ga
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = scores[i] * _exp(g_row - sGamma[col])
        p_part[i] = val.to(io)
    oa, ob = _row_pair(crd_o)
    ea, eb = _exp(sGamma[oa]), _exp(sGamma[ob])
    for i in cutlass.range_constexpr(cute.size(out)):
        e = eb
        if crd_o[i][0] == oa:
            e = ea
        out[i] = out[i] * e
    _async_visible()
    cute.arch.sync_threads()  # sP complete
    _wg_gemm(mma_pv, tidx, out, sP, _transposed(sVn))
    cute.nvgpu.warpgroup.wait_group(0)
    o_part = mma_qs.get_slice(tidx).partition_C(sO)
    for i in cutlass.range_constexpr(cute.size(out)):
        o_part[i] = (out[i] * scale).to(io)
    cute.arch.sync_threads()  # sO complete
    _store_rows(_s2g(io, V), tidx, sO, gO, rows_left)


@cute.jit
def _chunk_output(
    mma_cc,
    mma_cv,
    tidx,
    sQ,
    sK,
    sS,
    sVn,
    sP,
    sGamma,
    gO,
    rows_left,
    io: cutlass.Constexpr,
    scale: cutlass.Constexpr,
):
    """o = scale (exp(gamma) q S^T + P v_new) of one chunk into ``gO`` (rows before ``rows_left``),
    P = (q k^T) exp(gamma_i - gamma_j) on the causal, real part; sVn complete at the barrier inside."""
    C, BV = CHUNK, cute.size(sVn, mode=[1])
    scores, crd_p = _acc(mma_cc, tidx, C, C)
    _gemm(mma_cc, tidx, scores, sQ, sK, False, False, io)
    p_part = mma_cc.get_slice(tidx).partition_C(sP)
    for i in cutlass.range_constexpr(cute.size(scores)):
        row, col = crd_p[i][0], crd_p[i][1]
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = scores[i] * _exp(sGamma[row] - sGamma[col])
        p_part[i] = val.to(io)
    inter, crd_o = _acc(mma_cv, tidx, C, BV)
    _gemm(mma_cv, tidx, inter, sQ, sS, False, False, io)
    for i in cutlass.range_constexpr(cute.size(inter)):
        inter[i] = inter[i] * _exp(sGamma[crd_o[i][0]])
    cute.arch.sync_threads()  # sVn and sP complete
    _gemm(mma_cv, tidx, inter, sP, _transposed(sVn), False, True, io)
    for i in cutlass.range_constexpr(cute.size(inter)):
        inter[i] = inter[i] * scale
    _to_gmem(mma_cv, tidx, inter, crd_o, gO, rows_left, io)


def _l2_normalize_rows(s_tile, tidx, D: int):
    """Each row of the shared (C, D) tile over its L2 norm (floored at 1e-12, as torch's
    F.normalize), rounded back to the tile's dtype: each warp 16 rows, each lane D / 32 columns."""
    warp, lane = tidx // 32, tidx % 32
    per = D // 32
    for rr in range(CHUNK // 4):
        row = warp * (CHUNK // 4) + rr
        ss = Float32(0.0)
        for e in range(per):
            x = s_tile[row, lane * per + e].to(Float32)
            ss = ss + x * x
        for off in range(5):
            ss = ss + cute.arch.shuffle_sync_bfly(ss, 1 << off)
        inv = 1.0 / cute.math.max(cute.math.sqrt(ss), Float32(1e-12))
        for e in range(per):
            col = lane * per + e
            s_tile[row, col] = (s_tile[row, col].to(Float32) * inv).to(s_tile.element_type)
