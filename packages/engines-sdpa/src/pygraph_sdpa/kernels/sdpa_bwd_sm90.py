"""The attention backward for Hopper in CuTe DSL (the ``sdpa_bwd_sm90`` engine): three kernels.

1. `SdpaBwdSm90.prepare` (grid: 128-row query blocks x query heads x batch, D / 8 threads a row):
   ``delta = rowsum(O * dO)`` (fp32, 0 past the sequence's length) and the fp32 dQ accumulator
   zeroed, both in the workspace.
2. `SdpaBwdSm90.main` (grid: 128-key blocks x K heads x batch, two warpgroups, each owning 64 of the
   block's keys): K and V of the block stay in shared memory while the query blocks of 64 rows that
   its masks leave, of every query head of the K head's group (GQA: dK and dV are summed in the
   CTA, so no atomics and no order to depend on), stream Q, dO, lse and delta through a two-stage
   ring. Per query block, on warpgroup MMAs: ``S^T = K Q^T`` and ``dP^T = V dO^T`` issued together;
   ``P^T = exp(scale S^T - lse)`` in registers while dP^T runs, then ``dV += P^T dO`` with P^T as
   the register A operand; ``dS^T = P^T (dP^T - delta)`` while dV runs, then ``dK += dS^T Q`` (A
   from registers) and, dS^T stored by stmatrix, the block's ``dQ = dS K``, added to the fp32
   accumulator by atomics. P is 0 where the masks or the lengths hide the pair (chosen rather than
   computed: a hidden row's lse may be -inf or unset; a block inside every mask skips the test).
3. `SdpaBwdSm90.finish` (the prepare's grid): dQ = scale * the accumulator, in the io dtype; or,
   deterministic, `SdpaBwdSm90.grad_q` (grid: 128-query blocks x query heads x batch) instead of
   the main kernel's dQ products and atomics: each CTA walks its key blocks (64 keys) in order,
   recomputing S, P, dP and dS, and sums ``dQ = dS K`` in registers (three products per block where
   the atomic path does one, so about 1.4x the backward's work, bitwise reproducible).

dK is scaled by ``attn_scale`` once at the end (``dS`` is the gradient of the scaled scores). Ragged
(THD) operands are read and written through their ragged offsets (`SdpaMasks.head_rows`).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph.engines.cute_tiles import VEC as _VEC
from pygraph.engines.cute_tiles import acc as _acc
from pygraph.engines.cute_tiles import load_rows as _load_rows
from pygraph.engines.cute_tiles import row_major as _row_major
from pygraph.engines.cute_tiles import store_rows as _store_rows
from pygraph.engines.cute_tiles import transposed as _transposed
from pygraph.engines.cute_tiles import wg_gemm as _wg_gemm
from pygraph_sdpa.kernels.sdpa_fwd_sm90 import (
    _LOG2E,
    DT,
    THREADS,
    _acc_as_operand_a,
    _copy_g2s,
    _copy_s2g,
    _offsets,
    _rows4,
    _rows_tile,
    _stage_landed,
    _wg_mma,
)
from pygraph_sdpa.kernels.sdpa_sm90_masks import SdpaMasks

__all__ = ["BLOCK_N", "BLOCK_Q", "DQ_KEYS", "DQ_ROWS", "SdpaBwdSm90"]

BLOCK_N = 128  # keys per CTA: two warpgroups of 64
BLOCK_Q = 64  # query rows per step
ROWS = 128  # query rows per CTA of prepare / finish (128 threads, D / 8 of them a row)
DQ_ROWS = 128  # query rows per CTA of grad_q: two warpgroups of 64
DQ_KEYS = 64  # keys per block of grad_q (144 KB of shared memory at D 128)


@cute.jit
def _red_rows(vals: cute.Tensor, crd: cute.Tensor, dst: cute.Tensor, rows_left: Int32):
    """dst[i] += vals[i] by fp32 atomic reductions (``dst`` a global partition like ``vals``), rows
    before ``rows_left`` only."""
    for i in cutlass.range_constexpr(cute.size(vals)):
        if crd[i][0] < rows_left:
            cute.arch.red(
                dst.iterator + cute.crd2idx(i, dst.layout),
                vals[i],
                op="add",
                dtype=Float32,
                sem="relaxed",
                scope="gpu",
            )


def _vec(m: cute.Tensor, row, c) -> cute.Tensor:
    """The ``c``-th 8 values of row ``row`` of ``m`` [S, D] (a head's rows)."""
    return cute.local_tile(m[row, None], (_VEC,), (c,))


def _upper_row(i: int) -> bool:
    """Whether value ``i`` of a warpgroup accumulator's thread fragment, ((2, 2, N / 8), M, N), sits on
    the thread's second row (r + 8) of its n8 block: its column is value ``i - 2``'s."""
    return i % 4 >= 2


@cute.jit
def _wg_gemm_rs(tiled_mma, thr, acc_: cute.Tensor, rA: cute.Tensor, sB: cute.Tensor):
    """Issue acc += rA @ sB^T as one wgmma group, A from registers (the caller waits on it)."""
    rB = tiled_mma.make_fragment_B(thr.partition_B(sB))
    cute.nvgpu.warpgroup.fence()
    for kb in cutlass.range_constexpr(cute.size(rA, mode=[2])):
        cute.gemm(tiled_mma, acc_, rA[None, None, kb], rB[None, None, kb], acc_)
    cute.nvgpu.warpgroup.commit_group()


class SdpaBwdSm90(SdpaMasks):
    """One static configuration: head dim, io dtype, masks, padding, ragged operands and whether dQ
    takes its own pass (deterministic)."""

    def __init__(
        self,
        *,
        head_dim: int,
        io_dtype: str,
        bottom_right: bool,
        window_left: int,
        window_right: int,
        padded: bool,
        deterministic: bool = False,
        ragged: bool = False,
    ) -> None:
        if head_dim not in (64, 128):  # prepare's butterfly spans head_dim / 8 lanes: a power of two
            raise ValueError(f"SdpaBwdSm90: head_dim={head_dim}: must be 64 or 128")
        self.D = head_dim
        # deterministic: dQ by its own pass (`grad_q`: a CTA per query block sums over the key blocks
        # in order) instead of the main kernel's atomics; the workspace's accumulator is then unused
        self.deterministic = deterministic
        self.io = DT[io_dtype]
        self.bottom_right = bottom_right
        self.window_left, self.window_right = window_left, window_right
        self.padded = padded
        self.ragged = ragged  # the operands' rows from their ragged offsets (THD)

    # ------------------------------------------------------------------ host side (traced once)
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        stats_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        seq_q_ptr: cute.Pointer,
        seq_kv_ptr: cute.Pointer,
        # ragged offsets ([B + 1] int32 each; unread unless ragged)
        q_off_ptr: cute.Pointer,
        k_off_ptr: cute.Pointer,
        v_off_ptr: cute.Pointer,
        o_off_ptr: cute.Pointer,
        do_off_ptr: cute.Pointer,
        dq_off_ptr: cute.Pointer,
        dk_off_ptr: cute.Pointer,
        dv_off_ptr: cute.Pointer,
        delta_ptr: cute.Pointer,  # workspace: [B, H, S_q] fp32
        dq_acc_ptr: cute.Pointer,  # workspace: [B, H, S_q, D] fp32
        batch: Int32,
        heads: Int32,
        heads_k: Int32,
        s_q: Int32,
        s_kv: Int32,
        # (batch, head, row) element strides; the head dim is contiguous. q's serve dO and dQ,
        # k's serve v, dK and dV, o's serve O (the engine checks they agree)
        q_sb: Int32, q_sh: Int32, q_ss: Int32,
        k_sb: Int32, k_sh: Int32, k_ss: Int32,
        o_sb: Int32, o_sh: Int32, o_ss: Int32,
        scale: Float32,
        stream: Any,
    ):  # fmt: skip
        D = self.D

        qs, ks, os_ = (q_sb, q_sh, q_ss), (k_sb, k_sh, k_ss), (o_sb, o_sh, o_ss)
        mQ, mdO, mdQ = (
            _rows4(q_ptr, batch, heads, s_q, D, qs),
            _rows4(do_ptr, batch, heads, s_q, D, qs),
            _rows4(dq_ptr, batch, heads, s_q, D, qs),
        )
        mO = _rows4(o_ptr, batch, heads, s_q, D, os_)
        mK, mV = _rows4(k_ptr, batch, heads_k, s_kv, D, ks), _rows4(v_ptr, batch, heads_k, s_kv, D, ks)
        mdK, mdV = _rows4(dk_ptr, batch, heads_k, s_kv, D, ks), _rows4(dv_ptr, batch, heads_k, s_kv, D, ks)
        per_row = cute.make_layout((batch, heads, s_q), stride=(heads * s_q, s_q, 1))
        mStats = cute.make_tensor(stats_ptr, per_row)
        mDelta = cute.make_tensor(delta_ptr, per_row)
        mAcc = cute.make_tensor(
            dq_acc_ptr,
            cute.make_layout(
                (batch, heads, s_q, D),
                stride=(cute.assume(heads * s_q * D, divby=D), cute.assume(s_q * D, divby=D), D, 1),
            ),
        )
        mSeqQ = cute.make_tensor(seq_q_ptr, cute.make_layout((batch,)))
        mSeqKv = cute.make_tensor(seq_kv_ptr, cute.make_layout((batch,)))
        oQ, oK, oV, oO, odO, odQ, odK, odV = (
            _offsets(p, batch)
            for p in (
                q_off_ptr,
                k_off_ptr,
                v_off_ptr,
                o_off_ptr,
                do_off_ptr,
                dq_off_ptr,
                dk_off_ptr,
                dv_off_ptr,
            )
        )
        rows_grid = [(s_q + ROWS - 1) // ROWS, heads, batch]
        self.prepare(mO, mdO, mDelta, mAcc, mSeqQ, oO, odO, s_q).launch(
            grid=rows_grid, block=[128, 1, 1], stream=stream
        )
        self.main(
            mQ,
            mK,
            mV,
            mdO,
            mStats,
            mDelta,
            mAcc,
            mdK,
            mdV,
            mSeqQ,
            mSeqKv,
            oQ,
            oK,
            oV,
            odO,
            odK,
            odV,
            s_q,
            s_kv,
            heads // heads_k,
            scale,
        ).launch(grid=[(s_kv + BLOCK_N - 1) // BLOCK_N, heads_k, batch], block=[THREADS, 1, 1], stream=stream)
        if const_expr(self.deterministic):
            self.grad_q(
                mQ,
                mK,
                mV,
                mdO,
                mStats,
                mDelta,
                mdQ,
                mSeqQ,
                mSeqKv,
                oQ,
                oK,
                oV,
                odO,
                odQ,
                s_q,
                s_kv,
                heads // heads_k,
                scale,
            ).launch(
                grid=[(s_q + DQ_ROWS - 1) // DQ_ROWS, heads, batch], block=[THREADS, 1, 1], stream=stream
            )
        else:
            self.finish(mAcc, mdQ, mSeqQ, odQ, s_q, scale).launch(
                grid=rows_grid, block=[128, 1, 1], stream=stream
            )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def prepare(
        self,
        mO: cute.Tensor,
        mdO: cute.Tensor,
        mDelta: cute.Tensor,
        mAcc: cute.Tensor,
        mSeqQ: cute.Tensor,
        mOffO: cute.Tensor,
        mOffdO: cute.Tensor,
        s_q: Int32,
    ):
        D, io = self.D, self.io
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        rows_q = self.length(mSeqQ, b, s_q)
        # D / 8 threads a row, 16 bytes of O and of dO each: the row's sum over a butterfly of them
        per_row = D // _VEC
        c = tidx % per_row
        o_v = cute.make_rmem_tensor((_VEC,), io)
        do_v = cute.make_rmem_tensor((_VEC,), io)
        zero = cute.make_rmem_tensor((_VEC,), Float32)
        zero.fill(0.0)
        gO, gdO, gAcc = (
            self.head_rows(mO, mOffO, b, h),
            self.head_rows(mdO, mOffdO, b, h),
            mAcc[b, h, None, None],
        )
        # every thread takes ROWS * per_row / 128 rows, so the butterfly's lanes stay converged
        for r in cutlass.range(tidx // per_row, ROWS, 128 // per_row, unroll=2):
            row = blk * ROWS + r
            part = Float32(0.0)
            if row < rows_q:
                cute.autovec_copy(_vec(gO, row, c), o_v)
                cute.autovec_copy(_vec(gdO, row, c), do_v)
                for e in cutlass.range_constexpr(_VEC):
                    part = part + o_v[e].to(Float32) * do_v[e].to(Float32)
            for off in cutlass.range_constexpr((D // _VEC).bit_length() - 1):
                part = part + cute.arch.shuffle_sync_bfly(part, offset=1 << off)
            if row < s_q:
                if c == 0:
                    mDelta[b, h, row] = part
                if const_expr(not self.deterministic):
                    cute.autovec_copy(zero, _vec(gAcc, row, c))

    @cute.kernel
    def finish(
        self,
        mAcc: cute.Tensor,
        mdQ: cute.Tensor,
        mSeqQ: cute.Tensor,
        mOffdQ: cute.Tensor,
        s_q: Int32,
        scale: Float32,
    ):
        D, io = self.D, self.io
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        rows_q = self.length(mSeqQ, b, s_q)
        per_row = D // _VEC  # threads a row, 8 values each (32 bytes in, 16 out)
        c = tidx % per_row
        acc_v = cute.make_rmem_tensor((_VEC,), Float32)
        dq_v = cute.make_rmem_tensor((_VEC,), io)
        gAcc, gdQ = mAcc[b, h, None, None], self.head_rows(mdQ, mOffdQ, b, h)
        bound = self.stored(rows_q, s_q)
        for r in cutlass.range(tidx // per_row, ROWS, 128 // per_row, unroll=2):
            row = blk * ROWS + r
            if row < bound:
                acc_v.fill(0.0)
                if row < rows_q:
                    cute.autovec_copy(_vec(gAcc, row, c), acc_v)
                dq_v.store((acc_v.load() * scale).to(io))
                cute.autovec_copy(dq_v, _vec(gdQ, row, c))

    @cute.kernel
    def grad_q(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mStats: cute.Tensor,
        mDelta: cute.Tensor,
        mdQ: cute.Tensor,
        mSeqQ: cute.Tensor,
        mSeqKv: cute.Tensor,
        mOffQ: cute.Tensor,
        mOffK: cute.Tensor,
        mOffV: cute.Tensor,
        mOffdO: cute.Tensor,
        mOffdQ: cute.Tensor,
        s_q: Int32,
        s_kv: Int32,
        group: Int32,
        scale: Float32,
    ):
        """The deterministic dQ: a CTA per (128 queries, query head, batch) walks the key blocks its
        masks leave in order, recomputing S, P, dP and dS, and sums dQ = dS K in registers."""
        D, BM, BN, io = self.D, DQ_ROWS, DQ_KEYS, self.io
        tidx, _, _ = cute.arch.thread_idx()
        m_block, h, b = cute.arch.block_idx()
        m_block = self.query_block(m_block)
        rows_q, rows_kv = self.lengths(mSeqQ, mSeqKv, b, s_q, s_kv)
        row0 = m_block * BM
        if row0 < s_q:
            offset = self.offset(rows_q, rows_kv)
            first, last = self.key_blocks(row0, BM, offset, rows_q, rows_kv, BN)

            smem = utils.SmemAllocator()
            q_layout, q_swz = _row_major(BM, D)
            kv_layout, kv_swz = _row_major(BN, D, 2)
            ds_layout, ds_swz = _row_major(BM, BN)
            sQ = smem.allocate_tensor(io, q_layout, 1024, q_swz)
            sdO = smem.allocate_tensor(io, q_layout, 1024, q_swz)
            sK = smem.allocate_tensor(io, kv_layout, 1024, kv_swz)
            sV = smem.allocate_tensor(io, kv_layout, 1024, kv_swz)
            sdS = smem.allocate_tensor(io, ds_layout, 1024, ds_swz)

            g2s = _copy_g2s(io, D)
            hk = h // group
            gK, gV = self.head_rows(mK, mOffK, b, hk), self.head_rows(mV, mOffV, b, hk)
            _load_rows(g2s, tidx, _rows_tile(self.head_rows(mQ, mOffQ, b, h), row0, BM, D), sQ, rows_q - row0)
            _load_rows(
                g2s, tidx, _rows_tile(self.head_rows(mdO, mOffdO, b, h), row0, BM, D), sdO, rows_q - row0
            )
            if first < last:
                n0 = first * BN
                _load_rows(g2s, tidx, _rows_tile(gK, n0, BN, D), sK[None, None, 0], rows_kv - n0)
                _load_rows(g2s, tidx, _rows_tile(gV, n0, BN, D), sV[None, None, 0], rows_kv - n0)
            cute.arch.cp_async_commit_group()

            mma_s = _wg_mma(io, BN, False)  # S, dP: (queries, keys)
            mma_dq = _wg_mma(io, D, True)  # dQ: (queries, D), K read MN-major
            d_q, crd_q = _acc(mma_dq, tidx, BM, D)
            crd_s = mma_s.get_slice(tidx).partition_C(cute.make_identity_tensor((BM, BN)))
            ra, rb = crd_s[0][0], crd_s[cute.size(crd_s) - 1][0]  # the thread's two rows
            lse_a, lse_b, dlt_a, dlt_b = Float32(0.0), Float32(0.0), Float32(0.0), Float32(0.0)
            if row0 + ra < rows_q:
                lse_a = mStats[b, h, row0 + ra] * _LOG2E
                dlt_a = mDelta[b, h, row0 + ra]
            if row0 + rb < rows_q:
                lse_b = mStats[b, h, row0 + rb] * _LOG2E
                dlt_b = mDelta[b, h, row0 + rb]
            ds_part = mma_s.get_slice(tidx).partition_C(sdS)
            scale_log2 = scale * _LOG2E

            for j in cutlass.range(first, last, unroll=1):
                stage = (j - first) % 2
                if j + 1 < last:
                    n1 = (j + 1) * BN
                    _load_rows(g2s, tidx, _rows_tile(gK, n1, BN, D), sK[None, None, 1 - stage], rows_kv - n1)
                    _load_rows(g2s, tidx, _rows_tile(gV, n1, BN, D), sV[None, None, 1 - stage], rows_kv - n1)
                _stage_landed()

                s_acc, _ = _acc(mma_s, tidx, BM, BN)
                dp_acc, _ = _acc(mma_s, tidx, BM, BN)
                _wg_gemm(mma_s, tidx, s_acc, sQ, sK[None, None, stage])
                _wg_gemm(mma_s, tidx, dp_acc, sdO, sV[None, None, stage])
                cute.nvgpu.warpgroup.wait_group(0)
                n0 = j * BN
                for i in cutlass.range_constexpr(cute.size(s_acc)):
                    seen = self.seen(row0 + crd_s[i][0], n0 + crd_s[i][1], offset, rows_q, rows_kv)
                    lse, dlt = lse_b, dlt_b
                    if crd_s[i][0] == ra:
                        lse, dlt = lse_a, dlt_a
                    ds = Float32(0.0)
                    if seen != 0:
                        p = cute.math.exp2(s_acc[i] * scale_log2 - lse, fastmath=True)
                        ds = p * (dp_acc[i] - dlt)
                    ds_part[i] = ds.to(io)
                cute.arch.fence_proxy("async.shared", space="cta")
                # this warpgroup's rows of dS complete: its dQ product reads no other rows
                cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
                _wg_gemm(mma_dq, tidx, d_q, sdS, _transposed(sK[None, None, stage]))
                cute.nvgpu.warpgroup.wait_group(0)
                cute.arch.sync_threads()  # this stage and dS read
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()

            # dQ (scaled; rows past the sequence 0) through Q's tile, 16 bytes per store
            dq_part = mma_dq.get_slice(tidx).partition_C(sQ)
            for i in cutlass.range_constexpr(cute.size(d_q)):
                val = Float32(0.0)
                if row0 + crd_q[i][0] < rows_q:
                    val = d_q[i] * scale
                dq_part[i] = val.to(io)
            cute.arch.sync_threads()
            _store_rows(
                _copy_s2g(io, D),
                tidx,
                sQ,
                _rows_tile(self.head_rows(mdQ, mOffdQ, b, h), row0, BM, D),
                self.stored(rows_q, s_q) - row0,
            )

    @cute.kernel
    def main(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mStats: cute.Tensor,
        mDelta: cute.Tensor,
        mAcc: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mSeqQ: cute.Tensor,
        mSeqKv: cute.Tensor,
        mOffQ: cute.Tensor,
        mOffK: cute.Tensor,
        mOffV: cute.Tensor,
        mOffdO: cute.Tensor,
        mOffdK: cute.Tensor,
        mOffdV: cute.Tensor,
        s_q: Int32,
        s_kv: Int32,
        group: Int32,
        scale: Float32,
    ):
        D, BN, BQ, io = self.D, BLOCK_N, BLOCK_Q, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n_block, hk, b = cute.arch.block_idx()
        rows_q, rows_kv = self.lengths(mSeqQ, mSeqKv, b, s_q, s_kv)
        n0 = n_block * BN
        if n0 < s_kv:  # a block past the sequence's length still writes its rows (dK, dV 0), unless ragged
            offset = self.offset(rows_q, rows_kv)
            first, blocks = self.query_blocks(n0, BN, offset, rows_q, rows_kv, BQ)
            steps = blocks * group  # (query head of the group, query block) pairs

            smem = utils.SmemAllocator()
            kv_layout, kv_swz = _row_major(BN, D)
            q_layout, q_swz = _row_major(BQ, D, 2)
            p_layout, p_swz = _row_major(BN, BQ)
            sK = smem.allocate_tensor(io, kv_layout, 1024, kv_swz)
            sV = smem.allocate_tensor(io, kv_layout, 1024, kv_swz)
            sQ = smem.allocate_tensor(io, q_layout, 1024, q_swz)
            sdO = smem.allocate_tensor(io, q_layout, 1024, q_swz)
            sdSt = smem.allocate_tensor(io, p_layout, 1024, p_swz)
            sLse = smem.allocate_tensor(Float32, cute.make_layout((BQ, 2), stride=(1, BQ)), 16)
            sDelta = smem.allocate_tensor(Float32, cute.make_layout((BQ, 2), stride=(1, BQ)), 16)

            g2s = _copy_g2s(io, D)
            gK, gV = self.head_rows(mK, mOffK, b, hk), self.head_rows(mV, mOffV, b, hk)
            _load_rows(g2s, tidx, _rows_tile(gK, n0, BN, D), sK, rows_kv - n0)
            _load_rows(g2s, tidx, _rows_tile(gV, n0, BN, D), sV, rows_kv - n0)
            if steps > 0:
                h0 = hk * group
                i0 = first * BQ
                _load_rows(
                    g2s,
                    tidx,
                    _rows_tile(self.head_rows(mQ, mOffQ, b, h0), i0, BQ, D),
                    sQ[None, None, 0],
                    rows_q - i0,
                )
                _load_rows(
                    g2s,
                    tidx,
                    _rows_tile(self.head_rows(mdO, mOffdO, b, h0), i0, BQ, D),
                    sdO[None, None, 0],
                    rows_q - i0,
                )
                if tidx < BQ:
                    lse, dlt = Float32(0.0), Float32(0.0)
                    if i0 + tidx < rows_q:
                        lse = mStats[b, h0, i0 + tidx] * _LOG2E
                        dlt = mDelta[b, h0, i0 + tidx]
                    sLse[tidx, 0] = lse
                    sDelta[tidx, 0] = dlt
            cute.arch.cp_async_commit_group()

            mma_s = _wg_mma(io, BQ, False)  # S^T, dP^T: (keys, queries), both operands K-major
            # dV += P^T dO and dK += dS^T Q: (keys, D), A the step's P^T / dS^T straight from the
            # registers S^T / dP^T were accumulated in (a warpgroup's own 64 keys: no exchange), B
            # (dO / Q) read MN-major
            mma_kv = _wg_mma(io, D, True, a_in_registers=True)
            mma_q = _wg_mma(io, D // 2, True, a_mn_major=True, tiling=(1, 2, 1))  # dQ: (queries, D)
            d_v, _ = _acc(mma_kv, tidx, BN, D)
            d_k, _ = _acc(mma_kv, tidx, BN, D)
            thr_kv = mma_kv.get_slice(tidx)
            r_p = mma_kv.make_fragment_A(thr_kv.partition_shape_A((BN, BQ)))
            r_ds = mma_kv.make_fragment_A(thr_kv.partition_shape_A((BN, BQ)))
            crd_s = mma_s.get_slice(tidx).partition_C(cute.make_identity_tensor((BN, BQ)))
            # dS^T into shared memory for dQ (which reads every key row) by stmatrix: 16 bytes per
            # thread per instruction where the accumulator's own layout takes one 2-byte store each
            r2s = cute.make_tiled_copy_C(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), io), mma_s
            )
            thr_r2s = r2s.get_slice(tidx)
            dst_part = thr_r2s.partition_D(sdSt)
            scale_log2 = scale * _LOG2E

            for t in cutlass.range(0, steps, unroll=1):
                stage = t % 2
                qh = hk * group + t // blocks
                i0 = (first + t % blocks) * BQ
                lse_next, dlt_next = Float32(0.0), Float32(0.0)
                if t + 1 < steps:  # the next step's Q, dO by cp.async, its lse and delta into registers
                    qh1 = hk * group + (t + 1) // blocks
                    i1 = (first + (t + 1) % blocks) * BQ
                    _load_rows(
                        g2s,
                        tidx,
                        _rows_tile(self.head_rows(mQ, mOffQ, b, qh1), i1, BQ, D),
                        sQ[None, None, 1 - stage],
                        rows_q - i1,
                    )
                    _load_rows(
                        g2s,
                        tidx,
                        _rows_tile(self.head_rows(mdO, mOffdO, b, qh1), i1, BQ, D),
                        sdO[None, None, 1 - stage],
                        rows_q - i1,
                    )
                    if tidx < BQ:
                        if i1 + tidx < rows_q:
                            lse_next = mStats[b, qh1, i1 + tidx] * _LOG2E
                            dlt_next = mDelta[b, qh1, i1 + tidx]
                _stage_landed()

                s_t, _ = _acc(mma_s, tidx, BN, BQ)
                dp_t, _ = _acc(mma_s, tidx, BN, BQ)
                _wg_gemm(mma_s, tidx, s_t, sK, sQ[None, None, stage])
                _wg_gemm(mma_s, tidx, dp_t, sV, sdO[None, None, stage])
                cute.nvgpu.warpgroup.wait_group(1)  # S^T landed; dP^T still on the tensor cores

                # P^T = exp2(scale S^T - lse): a thread's values pair up by column (rows r and r + 8),
                # so each column's lse is read once for two of them
                for i in cutlass.range_constexpr(cute.size(s_t)):
                    if const_expr(not _upper_row(i)):
                        lse = sLse[crd_s[i][1], stage]
                        s_t[i] = cute.math.exp2(s_t[i] * scale_log2 - lse, fastmath=True)
                        s_t[i + 2] = cute.math.exp2(s_t[i + 2] * scale_log2 - lse, fastmath=True)
                # P where the masks or the lengths hide the pair: chosen, not computed (a hidden row's
                # lse may be -inf or unset); a block inside every mask and both lengths skips the
                # test per element
                if self.cuts(i0, BQ, n0, BN, offset, rows_kv) != 0 or i0 + BQ > rows_q:
                    for i in cutlass.range_constexpr(cute.size(s_t)):
                        if self.seen(i0 + crd_s[i][1], n0 + crd_s[i][0], offset, rows_q, rows_kv) == 0:
                            s_t[i] = Float32(0.0)
                r_p.store(_acc_as_operand_a(s_t).load().to(io))
                _wg_gemm_rs(mma_kv, thr_kv, d_v, r_p, _transposed(sdO[None, None, stage]))
                cute.nvgpu.warpgroup.wait_group(1)  # dP^T landed; dV still on the tensor cores

                # dS^T = P^T (dP^T - delta): 0 wherever P is (the padding rows of Q, dO, K and V
                # are zero-filled, so dP^T is finite there)
                for i in cutlass.range_constexpr(cute.size(dp_t)):
                    if const_expr(not _upper_row(i)):
                        dlt = sDelta[crd_s[i][1], stage]
                        dp_t[i] = s_t[i] * (dp_t[i] - dlt)
                        dp_t[i + 2] = s_t[i + 2] * (dp_t[i + 2] - dlt)
                ds_io = cute.make_rmem_tensor_like(dp_t, io)
                ds_io.store(dp_t.load().to(io))
                r_ds.store(_acc_as_operand_a(ds_io).load())
                _wg_gemm_rs(mma_kv, thr_kv, d_k, r_ds, _transposed(sQ[None, None, stage]))
                if const_expr(not self.deterministic):
                    cute.copy(r2s, thr_r2s.retile(ds_io), dst_part)
                    cute.arch.fence_proxy("async.shared", space="cta")
                    cute.arch.sync_threads()  # dS^T complete (dQ reads every key row)
                    d_q, crd_q = _acc(mma_q, tidx, BQ, D)
                    _wg_gemm(mma_q, tidx, d_q, _transposed(sdSt), _transposed(sK))
                cute.nvgpu.warpgroup.wait_group(0)
                if const_expr(not self.deterministic):
                    g_acc = cute.local_tile(
                        cute.domain_offset((i0, 0), mAcc[b, qh, None, None]), (BQ, D), (0, 0)
                    )
                    acc_part = mma_q.get_slice(tidx).partition_C(g_acc)
                    _red_rows(d_q, crd_q, acc_part, rows_q - i0)
                if tidx < BQ:
                    sLse[tidx, 1 - stage] = lse_next
                    sDelta[tidx, 1 - stage] = dlt_next
                cute.arch.sync_threads()  # this stage read: free for the step after next
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()

            # dK (scaled) and dV through K's and V's tiles, 16 bytes per store
            dk_part = mma_kv.get_slice(tidx).partition_C(sK)
            dv_part = mma_kv.get_slice(tidx).partition_C(sV)
            for i in cutlass.range_constexpr(cute.size(d_k)):
                dk_part[i] = (d_k[i] * scale).to(io)
                dv_part[i] = d_v[i].to(io)
            cute.arch.sync_threads()
            s2g = _copy_s2g(io, D)
            _store_rows(
                s2g,
                tidx,
                sK,
                _rows_tile(self.head_rows(mdK, mOffdK, b, hk), n0, BN, D),
                self.stored(rows_kv, s_kv) - n0,
            )
            _store_rows(
                s2g,
                tidx,
                sV,
                _rows_tile(self.head_rows(mdV, mOffdV, b, hk), n0, BN, D),
                self.stored(rows_kv, s_kv) - n0,
            )
