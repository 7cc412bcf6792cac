"""The attention forward for Hopper in CuTe DSL (the ``sdpa_fwd_sm90`` engine).

One CTA per (128-query block, query head, batch), two warpgroups (256 threads), each owning 64 of
the block's query rows. Q's tile is loaded once; K and V tiles of 128 keys (64 at head dim 256) stream through a
two-stage shared ring by 16-byte ``cp.async`` (the next block's copies in flight while the current
one computes). Per key block:

1. ``S = Q K^T`` on warpgroup MMAs (``wgmma.m64n128k16``, both operands K-major in shared memory);
2. the masks (causal in either alignment, the window's left and right bounds, the keys past the
   sequence's length) on the blocks they cut, then the online softmax in fp32 registers in the
   log2 domain: each row's running maximum and sum, the output accumulator rescaled by
   ``exp2(m_old - m_new)`` (a row's values sit on the 4 lanes of a quad: two shuffles reduce them);
3. ``P`` (the io dtype) into shared memory, then ``O += P V`` (V read MN-major); or, with
   ``p_in_registers`` (knob P_REGS), P converted in registers as that product's A operand.

At the end ``O / l`` leaves through shared memory, 16 bytes per store (rows past the sequence's
length, and every row of a block past it, as 0), and the log-sum-exp ``m ln 2 + ln l`` (natural log; ``-inf`` for a row that sees no key,
whose O is 0) goes to the stats. The key blocks a query block visits are those its masks leave
(the causal bound ends the loop, the left window bound starts it), so a causal forward does about
half the work of a full one. Ragged (THD) operands are read and written through their ragged
offsets (`SdpaMasks.head_rows`), and only the sequence's own rows of O are stored.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph.engines.cute_tiles import VEC as _VEC
from pygraph.engines.cute_tiles import acc as _acc
from pygraph.engines.cute_tiles import g2s_copy, s2g_copy, wg_mma
from pygraph.engines.cute_tiles import load_rows as _load_rows
from pygraph.engines.cute_tiles import row_major as _row_major
from pygraph.engines.cute_tiles import store_rows as _store_rows
from pygraph.engines.cute_tiles import transposed as _transposed
from pygraph.engines.cute_tiles import wg_gemm as _wg_gemm
from pygraph_sdpa.kernels.sdpa_sm90_masks import SdpaMasks

BLOCK_M = 128  # query rows per CTA: two warpgroups of 64
BLOCK_N = 128  # keys per block (64 at head dim 256: its tiles would not fit in shared memory)


def block_n(head_dim: int) -> int:
    """Keys per block at ``head_dim``: Q, two stages of K and V and P take 208 KB at 256 with 64."""
    return BLOCK_N if head_dim <= 128 else 64


THREADS = 256
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_NEG_INF = float("-inf")
DT = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}


def _wg_mma(
    dtype, n: int, b_mn_major: bool, *, a_mn_major: bool = False, tiling=(2, 1, 1), a_in_registers=False
):
    """`cute_tiles.wg_mma` over this family's two warpgroups by default: a (128, n) product."""
    return wg_mma(dtype, n, a_mn_major, b_mn_major, tiling=tiling, a_in_registers=a_in_registers)


def _copy_g2s(dtype, cols: int):
    """The CTA's 256 threads x 16-byte cp.async over a row-major tile (`cute_tiles.g2s_copy`)."""
    return g2s_copy(dtype, cols, THREADS)


def _copy_s2g(dtype, cols: int):
    """The CTA's 256 threads x 16-byte stores over a row-major tile (`cute_tiles.s2g_copy`)."""
    return s2g_copy(dtype, cols, THREADS)


def _acc_as_operand_a(acc: cute.Tensor) -> cute.Tensor:
    """The fp32 accumulator of a warpgroup product, ((2, 2, N / 8), M, N) per thread, seen as the
    register A operand of a following one over K = N: a k16 block of A holds, per thread, the same
    (row, column) pairs as two adjacent n8 blocks of the accumulator (rows r and r + 8, columns
    2t, 2t + 1 and 8 + 2t, 9 + 2t), so the view only regroups the n8 blocks in pairs:
    ((2, 2, 2), M, (N / 16, N))."""
    split = cute.logical_divide(acc.layout, ((None, None, 2), None, None))  # ((2, 2, (2, N/16)), M, N)
    shape, stride = split.shape, split.stride
    layout = cute.make_layout(
        ((shape[0][0], shape[0][1], shape[0][2][0]), shape[1], (shape[0][2][1], shape[2])),
        stride=((stride[0][0], stride[0][1], stride[0][2][0]), stride[1], (stride[0][2][1], stride[2])),
    )
    return cute.make_tensor(acc.iterator, layout)


def _rows4(ptr, batch, heads, rows, cols: int, strides):
    """A [batch, heads, rows, cols] view of ``ptr`` with the given (batch, head, row) element strides,
    each a multiple of 8 (16-byte rows: the engines check it), the last dim contiguous."""
    sb, sh, ss = strides
    stride = (cute.assume(sb, divby=_VEC), cute.assume(sh, divby=_VEC), cute.assume(ss, divby=_VEC), 1)
    return cute.make_tensor(ptr, cute.make_layout((batch, heads, rows, cols), stride=stride))


def _offsets(ptr, batch):
    """A ragged offsets pointer as its [batch + 1] tensor."""
    return cute.make_tensor(ptr, cute.make_layout((batch + 1,)))


def _stage_landed():
    """Commit this thread's copies of the next stage, wait for every older group (the current
    stage's), make them visible to wgmma's reads, then to every thread."""
    cute.arch.cp_async_commit_group()
    cute.arch.cp_async_wait_group(1)
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.sync_threads()


def _rows_tile(m, r0, rows: int, cols: int):
    """The (rows, cols) tile of ``m`` [S, D] (a head's rows: `SdpaMasks.head_rows`) from row ``r0``."""
    return cute.local_tile(cute.domain_offset((r0, 0), m), (rows, cols), (0, 0))


@cute.jit
def _quad_max(x: Float32) -> Float32:
    x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1))
    return cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=2))


@cute.jit
def _quad_sum(x: Float32) -> Float32:
    x = x + cute.arch.shuffle_sync_bfly(x, offset=1)
    return x + cute.arch.shuffle_sync_bfly(x, offset=2)


class SdpaFwdSm90(SdpaMasks):
    """One static configuration: head dims, io dtype, masks, padding and whether stats are stored."""

    def __init__(
        self,
        *,
        head_dim: int,
        head_dim_v: int,
        io_dtype: str,
        bottom_right: bool,
        window_left: int,
        window_right: int,
        padded: bool,
        store_stats: bool,
        p_in_registers: bool = False,
        ragged: bool = False,
    ) -> None:
        # P as the register A operand of O += P V (no round trip through shared memory)
        self.p_in_registers = p_in_registers
        self.D, self.DV = head_dim, head_dim_v
        self.io = DT[io_dtype]
        self.bottom_right = bottom_right
        self.window_left, self.window_right = window_left, window_right
        self.padded, self.store_stats = padded, store_stats
        self.ragged = ragged  # the operands' rows from their ragged offsets (THD)

    # ------------------------------------------------------------------ host side (traced once)
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        stats_ptr: cute.Pointer,
        seq_q_ptr: cute.Pointer,
        seq_kv_ptr: cute.Pointer,
        # ragged offsets ([B + 1] int32 each) of Q, K, V and O (unread unless ragged)
        q_off_ptr: cute.Pointer,
        k_off_ptr: cute.Pointer,
        v_off_ptr: cute.Pointer,
        o_off_ptr: cute.Pointer,
        batch: Int32,
        heads: Int32,
        heads_k: Int32,
        heads_v: Int32,
        s_q: Int32,
        s_kv: Int32,
        # (batch, head, row) element strides of Q, K, V and O; the head dim is contiguous
        q_sb: Int32, q_sh: Int32, q_ss: Int32,
        k_sb: Int32, k_sh: Int32, k_ss: Int32,
        v_sb: Int32, v_sh: Int32, v_ss: Int32,
        o_sb: Int32, o_sh: Int32, o_ss: Int32,
        scale_log2: Float32,  # attn_scale * log2(e)
        stream: Any,
    ):  # fmt: skip
        D, DV = self.D, self.DV

        mQ = _rows4(q_ptr, batch, heads, s_q, D, (q_sb, q_sh, q_ss))
        mK = _rows4(k_ptr, batch, heads_k, s_kv, D, (k_sb, k_sh, k_ss))
        mV = _rows4(v_ptr, batch, heads_v, s_kv, DV, (v_sb, v_sh, v_ss))
        mO = _rows4(o_ptr, batch, heads, s_q, DV, (o_sb, o_sh, o_ss))
        mStats = cute.make_tensor(
            stats_ptr, cute.make_layout((batch, heads, s_q), stride=(heads * s_q, s_q, 1))
        )
        mSeqQ = cute.make_tensor(seq_q_ptr, cute.make_layout((batch,)))
        mSeqKv = cute.make_tensor(seq_kv_ptr, cute.make_layout((batch,)))
        offs = [_offsets(p, batch) for p in (q_off_ptr, k_off_ptr, v_off_ptr, o_off_ptr)]
        grid = [(s_q + BLOCK_M - 1) // BLOCK_M, heads, batch]
        self.kernel(
            mQ,
            mK,
            mV,
            mO,
            mStats,
            mSeqQ,
            mSeqKv,
            *offs,
            s_q,
            s_kv,
            heads // heads_k,
            heads // heads_v,
            scale_log2,
        ).launch(grid=grid, block=[THREADS, 1, 1], stream=stream)

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mStats: cute.Tensor,
        mSeqQ: cute.Tensor,
        mSeqKv: cute.Tensor,
        mOffQ: cute.Tensor,
        mOffK: cute.Tensor,
        mOffV: cute.Tensor,
        mOffO: cute.Tensor,
        s_q: Int32,
        s_kv: Int32,
        k_group: Int32,
        v_group: Int32,
        scale_log2: Float32,
    ):
        D, DV, BM, BN, io = self.D, self.DV, BLOCK_M, block_n(self.D), self.io
        tidx, _, _ = cute.arch.thread_idx()
        m_block, h, b = cute.arch.block_idx()
        m_block = self.query_block(m_block)
        rows_q, rows_kv = self.lengths(mSeqQ, mSeqKv, b, s_q, s_kv)
        row0 = m_block * BM
        if row0 < s_q:  # a block past the sequence's length still writes lse -inf and (unless ragged) O 0
            offset = self.offset(rows_q, rows_kv)
            first, last = self.key_blocks(row0, BM, offset, rows_q, rows_kv, BN)

            smem = utils.SmemAllocator()
            q_layout, q_swz = _row_major(BM, D)
            k_layout, k_swz = _row_major(BN, D, 2)
            v_layout, v_swz = _row_major(BN, DV, 2)
            p_layout, p_swz = _row_major(BM, BN)
            sQ = smem.allocate_tensor(io, q_layout, 1024, q_swz)
            sK = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sV = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sP = None
            if const_expr(not self.p_in_registers):
                sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)

            g2s_k, g2s_v = _copy_g2s(io, D), _copy_g2s(io, DV)
            hk, hv = h // k_group, h // v_group
            gQ = self.head_rows(mQ, mOffQ, b, h)
            gK, gV = self.head_rows(mK, mOffK, b, hk), self.head_rows(mV, mOffV, b, hv)
            _load_rows(g2s_k, tidx, _rows_tile(gQ, row0, BM, D), sQ, rows_q - row0)
            if first < last:
                n0 = first * BN
                _load_rows(g2s_k, tidx, _rows_tile(gK, n0, BN, D), sK[None, None, 0], rows_kv - n0)
                _load_rows(g2s_v, tidx, _rows_tile(gV, n0, BN, DV), sV[None, None, 0], rows_kv - n0)
            cute.arch.cp_async_commit_group()

            mma_qk = _wg_mma(io, BN, False)
            mma_pv = _wg_mma(io, DV, True, a_in_registers=self.p_in_registers)  # V [keys, DV] read MN-major
            out, crd_o = _acc(mma_pv, tidx, BM, DV)
            thr_pv = mma_pv.get_slice(tidx)
            r_p = None
            if const_expr(self.p_in_registers):
                r_p = mma_pv.make_fragment_A(thr_pv.partition_shape_A((BM, BN)))
            crd_s = mma_qk.get_slice(tidx).partition_C(cute.make_identity_tensor((BM, BN)))
            ra, rb = crd_s[0][0], crd_s[cute.size(crd_s) - 1][0]  # the thread's two rows
            m_a, m_b = Float32(_NEG_INF), Float32(_NEG_INF)
            l_a, l_b = Float32(0.0), Float32(0.0)
            p_part = None
            if const_expr(not self.p_in_registers):
                p_part = mma_qk.get_slice(tidx).partition_C(sP)

            for j in cutlass.range(first, last, unroll=1):
                stage = (j - first) % 2
                if j + 1 < last:  # the next block into the other stage (free since the last barrier)
                    n1 = (j + 1) * BN
                    _load_rows(
                        g2s_k, tidx, _rows_tile(gK, n1, BN, D), sK[None, None, 1 - stage], rows_kv - n1
                    )
                    _load_rows(
                        g2s_v,
                        tidx,
                        _rows_tile(gV, n1, BN, DV),
                        sV[None, None, 1 - stage],
                        rows_kv - n1,
                    )
                _stage_landed()  # this block's (and Q's) copies

                scores, _ = _acc(mma_qk, tidx, BM, BN)
                _wg_gemm(mma_qk, tidx, scores, sQ, sK[None, None, stage])
                cute.nvgpu.warpgroup.wait_group(0)

                n0 = j * BN
                if self.cuts(row0, BM, n0, BN, offset, rows_kv) != 0:  # the masks hide some pair here
                    for i in cutlass.range_constexpr(cute.size(scores)):
                        if self.seen(row0 + crd_s[i][0], n0 + crd_s[i][1], offset, rows_q, rows_kv) == 0:
                            scores[i] = Float32(_NEG_INF)

                # the online softmax, log2 domain: each row's max over this block and the earlier ones
                top_a, top_b = m_a, m_b
                for i in cutlass.range_constexpr(cute.size(scores)):
                    s = scores[i] * scale_log2
                    scores[i] = s
                    if crd_s[i][0] == ra:
                        top_a = cute.arch.fmax(top_a, s)
                    else:
                        top_b = cute.arch.fmax(top_b, s)
                top_a, top_b = _quad_max(top_a), _quad_max(top_b)
                # a row that has seen no key yet keeps its maximum at -inf and shifts by 0
                base_a, base_b = top_a, top_b
                if top_a == Float32(_NEG_INF):
                    base_a = Float32(0.0)
                if top_b == Float32(_NEG_INF):
                    base_b = Float32(0.0)
                corr_a = cute.math.exp2(m_a - base_a, fastmath=True)
                corr_b = cute.math.exp2(m_b - base_b, fastmath=True)
                m_a, m_b = top_a, top_b
                sum_a, sum_b = Float32(0.0), Float32(0.0)
                for i in cutlass.range_constexpr(cute.size(scores)):
                    base = base_b
                    if crd_s[i][0] == ra:
                        base = base_a
                    p = cute.math.exp2(scores[i] - base, fastmath=True)
                    if crd_s[i][0] == ra:
                        sum_a = sum_a + p
                    else:
                        sum_b = sum_b + p
                    if const_expr(self.p_in_registers):
                        scores[i] = p
                    else:
                        p_part[i] = p.to(io)
                l_a = l_a * corr_a + sum_a
                l_b = l_b * corr_b + sum_b
                for i in cutlass.range_constexpr(cute.size(out)):
                    if crd_o[i][0] == ra:
                        out[i] = out[i] * corr_a
                    else:
                        out[i] = out[i] * corr_b
                if const_expr(self.p_in_registers):
                    r_p.store(_acc_as_operand_a(scores).load().to(io))
                    r_v = mma_pv.make_fragment_B(thr_pv.partition_B(_transposed(sV[None, None, stage])))
                    cute.nvgpu.warpgroup.fence()
                    for kb in cutlass.range_constexpr(cute.size(r_p, mode=[2])):
                        cute.gemm(mma_pv, out, r_p[None, None, kb], r_v[None, None, kb], out)
                    cute.nvgpu.warpgroup.commit_group()
                else:
                    cute.arch.fence_proxy("async.shared", space="cta")
                    # this warpgroup's rows of P complete (its product reads no other rows), so one
                    # warpgroup's P V may run while the other's softmax still does
                    cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
                    _wg_gemm(mma_pv, tidx, out, sP, _transposed(sV[None, None, stage]))
                cute.nvgpu.warpgroup.wait_group(0)
                cute.arch.sync_threads()  # this stage's K, V and P read: free for the next copies
            cute.arch.cp_async_wait_group(0)  # (with no key block, Q's copies: O reuses its tile)
            cute.arch.sync_threads()

            l_a, l_b = _quad_sum(l_a), _quad_sum(l_b)
            inv_a = Float32(0.0)
            inv_b = Float32(0.0)
            if l_a > Float32(0.0):
                inv_a = 1.0 / l_a
            if l_b > Float32(0.0):
                inv_b = 1.0 / l_b
            # O through shared memory (Q's tile: no wgmma reads it any more), 16 bytes per store
            sO = sQ  # the engine serves DV == D
            o_part = mma_pv.get_slice(tidx).partition_C(sO)
            if row0 + ra >= rows_q:  # a row past the sequence: O 0 (its Q rows were zero-filled)
                inv_a = Float32(0.0)
                l_a = Float32(0.0)
            if row0 + rb >= rows_q:
                inv_b = Float32(0.0)
                l_b = Float32(0.0)
            for i in cutlass.range_constexpr(cute.size(out)):
                if crd_o[i][0] == ra:
                    o_part[i] = (out[i] * inv_a).to(io)
                else:
                    o_part[i] = (out[i] * inv_b).to(io)
            cute.arch.sync_threads()
            _store_rows(
                _copy_s2g(io, DV),
                tidx,
                sO,
                _rows_tile(self.head_rows(mO, mOffO, b, h), row0, BM, DV),
                self.stored(rows_q, s_q) - row0,
            )
            if const_expr(self.store_stats):
                if tidx % 4 == 0:
                    if row0 + ra < s_q:
                        lse = Float32(_NEG_INF)
                        if l_a > Float32(0.0):
                            lse = m_a * _LN2 + cute.math.log(l_a, fastmath=True)
                        mStats[b, h, row0 + ra] = lse
                    if row0 + rb < s_q:
                        lse = Float32(_NEG_INF)
                        if l_b > Float32(0.0):
                            lse = m_b * _LN2 + cute.math.log(l_b, fastmath=True)
                        mStats[b, h, row0 + rb] = lse
