"""The gdn_sm90 backward's chunk gradients as one kernel on two warpgroups (`ChunkGradKernels.
grad_chunk_wg`, WGMMA 2): the output's and passed state's terms (`GdnSm90Bwd.grad_output`) and the
WY transform's (`GdnSm90Bwd.grad_wy`) of one chunk and head in one CTA, so dk's first terms stay in
registers and dw in shared memory instead of a round trip through HBM each (fp32 dk, io dw, d
gamma's output terms), and the chunk's rows are read once, not twice. A mixin of
`gdn.sm90_bwd.GdnSm90Bwd` (its fields: dims, dtypes, options); `grad_wy` takes the gates' chain rules
(`ChunkGradKernels.gate_chain_rules`) and the WY terms' elementwise steps (`decayed_cols`,
`beta_cols`, `dv_rows`, `da_terms`) from here too, and both take the gates' forms from the forward's
prepare (`GdnSm90Fwd.chunk_gates`). Measured on an H100 (docs/
linear-attention.md, The CuTe DSL backward): the backward at B4 T4096 0.17 ms faster than with the
two kernels (forward+backward 1.570 against 1.744 ms).

The products are ``wgmma.m64nNk16`` over the whole key and value dims, the two warpgroups side by
side along N (each N / 2 columns of every product: a [64, 128] fp32 accumulator is 32 registers a
thread); operands from shared memory in the major mode each product reads them, the transposes by
MN-major reads rather than copies. Every tile of the chunk is resident (about 200 KB at K = V = 128,
one CTA per SM); the loads go as four cp.async groups in the order the products need them (dO,
v_new, q, k; the entering state and dv_new; dh; v and T), so the later ones arrive under the first
products.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph.engines.cute_tiles import g2s_copy
from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    THREADS,
    VEC,
    acc_to_smem,
    aliased_smem_tiles,
    async_visible,
    chunk_rows,
    fast_exp,
    grad_rows_to_gmem,
    l2_normalize_rows,
    load_rows,
    row_pair,
    row_sums,
    scale_row_pair,
    slot_chunk,
    smem_tile,
    smem_vector,
    transposed,
    wg_gemm,
    wg_mma,
    zero_vector,
    zeroed_acc,
)

WG2_THREADS = 2 * THREADS  # two warpgroups


@cute.jit
def col_sums_sub_paired(vals, crd, dst, tidx):
    """`sm90_tiles.col_sums_sub` for a wgmma (or mma.sync) accumulator, its two rows of each column
    added in the thread first: a fragment's values go (2 columns, 2 rows 8 apart, the column
    blocks), so values i and i + 2 share a column; half the shuffles."""
    lane = tidx % 32
    for i in cutlass.range_constexpr(cute.size(vals)):
        if const_expr(i % 4 < 2):
            s = vals[i] + vals[i + 2]
            for off in cutlass.range_constexpr(2, 5):
                s = s + cute.arch.shuffle_sync_bfly(s, 1 << off)
            if lane < 4:
                cute.arch.atomic_add(dst.iterator + crd[i][1], -s)


@cute.jit
def tile_dot(sA, sB, tidx, rows: cutlass.Constexpr, cols: cutlass.Constexpr, threads: cutlass.Constexpr):
    """This thread's part of sum(sA * sB) over two shared tiles of one swizzled layout, 16 bytes of
    each per load (the sum's order is free, so any common order of the elements serves)."""
    per_row = cols // VEC
    part = Float32(0.0)
    for e in cutlass.range_constexpr(rows * per_row // threads):
        flat = tidx + e * threads
        r, c8 = flat // per_row, flat % per_row
        a = cute.make_rmem_tensor((VEC,), sA.element_type)
        b = cute.make_rmem_tensor((VEC,), sB.element_type)
        cute.autovec_copy(cute.local_tile(sA[r, None], (VEC,), (c8,)), a)
        cute.autovec_copy(cute.local_tile(sB[r, None], (VEC,), (c8,)), b)
        for j in cutlass.range_constexpr(VEC):
            part = part + a[j].to(Float32) * b[j].to(Float32)
    return part


@cute.jit
def decayed_cols(acc, crd, sGamma):
    """dT's first product's column scales, in place: acc[i, j] exp(gamma_j) (dw k^T to dw (exp(gamma)
    k)^T)."""
    for e in cutlass.range_constexpr(cute.size(acc)):
        acc[e] = acc[e] * fast_exp(sGamma[crd[e][1]])


@cute.jit
def beta_cols(acc, crd, sWr):
    """dT's column scales by the write strength, in place: acc[i, j] beta_j."""
    for e in cutlass.range_constexpr(cute.size(acc)):
        acc[e] = acc[e] * sWr[crd[e][1]]


@cute.jit
def dv_rows(dvw, crd, v_part, sWr, sDwrite):
    """u = T (beta v)'s terms, in place on dvw = T^T dv_new: beta's term (dvw . v, row sums into
    ``sDwrite``), then dv = beta dvw row by row."""
    terms = cute.make_rmem_tensor(dvw.shape, Float32)
    for e in cutlass.range_constexpr(cute.size(dvw)):
        terms[e] = dvw[e] * v_part[e].to(Float32)
        dvw[e] = dvw[e] * sWr[crd[e][0]]
    row_sums(terms, crd, sDwrite)


@cute.jit
def da_terms(da, gram, crd, dg_part, sGamma, sWr, sDwrite, sDgam, io: cutlass.Constexpr):
    """The inverse's terms, in place on da = T^T dT T^T (A = beta (k k^T) exp(gamma_i - gamma_j),
    strictly lower): dA' = -da exp(gamma_i - gamma_j) below the diagonal; beta's term dA' . gram (row
    sums into ``sDwrite``); dA' beta into ``dg_part`` (the io tile k's products read); da becomes
    d gamma's terms dA' beta . gram, row sums into ``sDgam`` (the caller subtracts the column sums)."""
    terms = cute.make_rmem_tensor(da.shape, Float32)
    for e in cutlass.range_constexpr(cute.size(da)):
        row, col = crd[e][0], crd[e][1]
        att = Float32(0.0)
        if row > col:
            att = -da[e] * fast_exp(sGamma[row] - sGamma[col])
        terms[e] = att * gram[e]  # beta's term
        dgram = att * sWr[row]
        dg_part[e] = dgram.to(io)
        da[e] = dgram * gram[e]  # d gamma's: row sums minus column sums
    row_sums(terms, crd, sDwrite)
    row_sums(da, crd, sDgam)


class ChunkGradKernels:
    """The fused chunk gradients of `GdnSm90Bwd` (a mixin: they read its configuration)."""

    @cute.jit
    def gate_chain_rules(
        self, tidx, rows_left, r0, h, sDgamma, sDwrite, sRow, raw_b, gate, biased, rate, mDg, mDb, mDa
    ):
        """d gamma's reverse cumulative sum (gamma_r = g_0 + ... + g_r: the decay's gradient) and the
        gates' chain rules of the chunk's rows (threads 0-63, a row each): dg, dbeta and the a_log
        terms into the per-output-head rows."""
        d_decay = Float32(0.0)
        if tidx < CHUNK:  # warps 0 and 1: the reverse sum by shuffles, warp 0 adding warp 1's total
            lane = tidx % 32
            d_decay = sDgamma[tidx]
            for off in cutlass.range_constexpr(5):
                down = cute.arch.shuffle_sync_down(d_decay, 1 << off)
                if lane + (1 << off) < 32:
                    d_decay = d_decay + down
            later = sDgamma[32 + lane]
            for off in cutlass.range_constexpr(5):
                later = later + cute.arch.shuffle_sync_bfly(later, 1 << off)
            if tidx < 32:
                d_decay = d_decay + later
        if tidx < rows_left and tidx < CHUNK:
            d_write = sDwrite[tidx] + sRow[tidx]
            if const_expr(self.neg_eigval):
                d_write = d_write * 2.0
            if const_expr(self.beta_sigmoid):
                s = 1.0 / (1.0 + fast_exp(-raw_b))
                d_write = d_write * s * (1.0 - s)
            d_raw_g = d_decay
            if const_expr(self.safe_gate):
                d_raw_g = d_decay * -rate / (1.0 + fast_exp(-biased))
                mDa[r0 + tidx, h] = d_decay * gate
            mDg[r0 + tidx, h] = d_raw_g
            mDb[r0 + tidx, h] = d_write

    @cute.jit
    def chunk_gate_grads(self, tidx, rows_left, last_row, last, r0, h, sums, sPart, gates, mDg, mDb, mDa):
        """The fused chunk kernels' last steps, after a barrier of the CTA once every row and column sum
        is in: d gamma from the output's and passed state's terms (the last row's take the sum of
        sKd, by warps 0 and 1, and sum(dh * h) exp(last) from ``sPart[0]``) and the WY terms, then
        the gates' chain rules (`gate_chain_rules`). ``sums``: the shared vectors (sDg, sKd, sDgam,
        sRow, sDwrite, sDgamma); ``gates``: this thread's values from `GdnSm90Fwd.chunk_gates`."""
        C = CHUNK
        sDg, sKd, sDgam, sRow, sDwrite, sDgamma = sums
        raw_b, gate, wr, biased, rate = gates
        if tidx < C:
            kd = sKd[tidx]
            for off in cutlass.range_constexpr(5):
                kd = kd + cute.arch.shuffle_sync_bfly(kd, 1 << off)
            if tidx % 32 == 0:
                sPart[1 + tidx // 32] = kd
        cute.arch.sync_threads()
        if tidx < C:
            dgamma = sDgam[tidx] + sRow[tidx] * wr
            if tidx < rows_left:
                dgamma = dgamma + sDg[tidx] - sKd[tidx]
                if tidx == last_row:
                    dgamma = dgamma + sPart[0] * fast_exp(last) + sPart[1] + sPart[2]
            sDgamma[tidx] = dgamma
        cute.arch.sync_threads()
        self.gate_chain_rules(
            tidx, rows_left, r0, h, sDgamma, sDwrite, sRow, raw_b, gate, biased, rate, mDg, mDb, mDa
        )

    @cute.kernel
    def grad_chunk_wg(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,
        mBeta: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        mCu: cute.Tensor,
        mDo: cute.Tensor,
        mT: cute.Tensor,
        mHs: cute.Tensor,
        mDh: cute.Tensor,
        mVnew: cute.Tensor,
        mDvnew: cute.Tensor,
        mDq: cute.Tensor,
        mDQ: cute.Tensor,
        mDk: cute.Tensor,
        mDK: cute.Tensor,
        mDv: cute.Tensor,
        mDV: cute.Tensor,
        mDg: cute.Tensor,
        mDb: cute.Tensor,
        mDa: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
        scale: Float32,
    ):
        """One chunk's gradients but the scans' (grid: chunk slots x output heads, 256 threads): with
        P the decayed causal scores and o = scale (exp(gamma) q h^T + P v_new), S' = exp(last) h +
        (v_new exp(last - gamma))^T k, w = T (beta exp(gamma) k), u = T (beta v), T = (I + A)^-1:

        dP = scale dO v_new^T (causal, decayed); dq = scale exp(gamma) dO h + dP k; dk = exp(last -
        gamma) v_new dh + dP^T q + beta exp(gamma) T^T dw + (dA' + dA'^T) k; dw = -dv_new h; dT =
        (dw k^T exp(gamma_j) + dv_new v^T) beta_j; dv = beta T^T dv_new; dA = -T^T dT T^T; then d
        gamma (the output's, the passed state's and the WY terms') and the gates' chain rules, as
        `grad_output` and `grad_wy` take them."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group = groups[0], groups[1]
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            hk, hv = h // k_group, h // v_group
            smem = utils.SmemAllocator()
            sQ, sK = smem_tile(smem, io, C, K), smem_tile(smem, io, C, K)
            sV, sVn, sDvn = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V), smem_tile(smem, io, C, V)
            # dO is dead once dq's products are read (a barrier between): dw's io copy takes its memory
            sDo, sDw = aliased_smem_tiles(smem, io, (C, V), (C, K))
            sH, sDh = smem_tile(smem, io, V, K), smem_tile(smem, io, V, K)
            sT, sDp, sDt = smem_tile(smem, io, C, C), smem_tile(smem, io, C, C), smem_tile(smem, io, C, C)
            sTmp, sDgram = smem_tile(smem, io, C, C), smem_tile(smem, io, C, C)
            sGamma, sWr, sDg, sKd = smem_vector(smem), smem_vector(smem), smem_vector(smem), smem_vector(smem)
            sDwrite, sDgam, sRow, sDgamma = (
                smem_vector(smem),
                smem_vector(smem),
                smem_vector(smem),
                smem_vector(smem),
            )
            sPart = smem_vector(smem, 4)
            g2s_k, g2s_v, g2s_c = (
                g2s_copy(io, K, WG2_THREADS),
                g2s_copy(io, V, WG2_THREADS),
                g2s_copy(io, C, WG2_THREADS),
            )
            # four groups in the order the products read them
            load_rows(g2s_v, tidx, chunk_rows(mDo, r0, h, V), sDo, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mVnew, r0, h, V), sVn, rows_left)
            load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sK, rows_left)
            cute.arch.cp_async_commit_group()
            load_rows(g2s_k, tidx, mHs[slot, h, None, None], sH, V)
            load_rows(g2s_v, tidx, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
            cute.arch.cp_async_commit_group()
            load_rows(g2s_k, tidx, mDh[slot, h, None, None], sDh, V)
            cute.arch.cp_async_commit_group()
            load_rows(g2s_v, tidx, chunk_rows(mV, r0, hv, V), sV, rows_left)
            load_rows(g2s_c, tidx, mT[slot, h, None, None], sT, C)
            cute.arch.cp_async_commit_group()

            raw_b, gate, wr, biased, rate = self.fwd.chunk_gates(
                mG, mBeta, mALog, mDtBias, groups, r0, rows_left, h, tidx, sGamma, sWr
            )
            zero_vector(sDg, tidx)
            zero_vector(sKd, tidx)
            zero_vector(sDwrite, tidx)
            zero_vector(sDgam, tidx)
            zero_vector(sRow, tidx)
            if tidx == 0:
                sPart[0] = Float32(0.0)
            cute.arch.sync_threads()
            if tidx >= 32 and tidx < C:
                sGamma[tidx] = sGamma[tidx] + sGamma[31]
            cute.arch.cp_async_wait_group(3)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):  # warps 0-3 normalize q's rows, warps 4-7 k's
                if tidx < THREADS:
                    l2_normalize_rows(sQ, tidx, K)
                else:
                    l2_normalize_rows(sK, tidx - THREADS, K)
            async_visible()
            cute.arch.sync_threads()
            last_row = cutlass.min(rows_left, C) - 1  # the chunk's last real row
            last = sGamma[last_row]
            tiling = (1, 2, 1)
            mma_cc = wg_mma(io, C // 2, False, False, tiling=tiling)  # x y^T
            mma_cc_t = wg_mma(io, C // 2, True, True, tiling=tiling)  # x^T y
            mma_ck = wg_mma(io, K // 2, False, True, tiling=tiling)  # x y
            mma_ck_t = wg_mma(io, K // 2, True, True, tiling=tiling)  # x^T y
            mma_cv_t = wg_mma(io, V // 2, True, True, tiling=tiling)

            # dP = scale dO v_new^T on the causal, real part, with the decay; d gamma's terms dP * (q k^T)
            dp, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, dp, sDo, sVn)
            qk, _ = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, qk, sQ, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            dp_part = mma_cc.get_slice(tidx).partition_C(sDp)
            for e in cutlass.range_constexpr(cute.size(dp)):
                row, col = crd_p[e][0], crd_p[e][1]
                val = Float32(0.0)
                if row >= col and row < rows_left:
                    val = dp[e] * scale * fast_exp(sGamma[row] - sGamma[col])
                dp_part[e] = val.to(io)
                dp[e] = val * qk[e]
            row_sums(dp, crd_p, sDg)
            col_sums_sub_paired(dp, crd_p, sDg, tidx)
            cute.arch.cp_async_wait_group(2)  # the entering state, dv_new
            async_visible()
            cute.arch.sync_threads()  # sDp complete

            # dq = scale exp(gamma) dO h + dP k; d gamma's terms dq_h * q. dw = -dv_new h
            dq, crd = zeroed_acc(mma_ck, tidx, C, K)
            wg_gemm(mma_ck, tidx, dq, sDo, transposed(sH))
            dw, _ = zeroed_acc(mma_ck, tidx, C, K)
            wg_gemm(mma_ck, tidx, dw, sDvn, transposed(sH))
            cute.nvgpu.warpgroup.wait_group(0)
            row_a, row_b = row_pair(crd)  # the thread's two rows: per-row factors once each
            scale_row_pair(dq, crd, row_a, scale * fast_exp(sGamma[row_a]), scale * fast_exp(sGamma[row_b]))
            q_part = mma_ck.get_slice(tidx).partition_C(sQ)
            terms, _ = zeroed_acc(mma_ck, tidx, C, K)
            for e in cutlass.range_constexpr(cute.size(dq)):
                terms[e] = dq[e] * q_part[e].to(Float32)
            row_sums(terms, crd, sDg)
            wg_gemm(mma_ck, tidx, dq, sDp, transposed(sK))
            cute.arch.sync_threads()  # every warpgroup's reads of dO done: dw takes its memory
            dw_part = mma_ck.get_slice(tidx).partition_C(sDw)
            for e in cutlass.range_constexpr(cute.size(dw)):
                dw_part[e] = (-dw[e]).to(io)
            cute.nvgpu.warpgroup.wait_group(0)
            grad_rows_to_gmem(mma_ck, tidx, dq, crd, self.direct_qk, mDQ, mDq, r0, h, K, rows_left, io)
            cute.arch.cp_async_wait_group(1)  # dh
            async_visible()
            cute.arch.sync_threads()  # sDw complete

            # dk = exp(last - gamma) (v_new dh) + dP^T q, kept for the WY terms; d gamma's terms -k *
            # the passed part
            dk, _ = zeroed_acc(mma_ck, tidx, C, K)
            wg_gemm(mma_ck, tidx, dk, sVn, transposed(sDh))
            cute.nvgpu.warpgroup.wait_group(0)
            tail_a = Float32(0.0)
            tail_b = Float32(0.0)
            if row_a < rows_left:
                tail_a = fast_exp(last - sGamma[row_a])
            if row_b < rows_left:
                tail_b = fast_exp(last - sGamma[row_b])
            scale_row_pair(dk, crd, row_a, tail_a, tail_b)
            k_part = mma_ck.get_slice(tidx).partition_C(sK)
            for e in cutlass.range_constexpr(cute.size(dk)):
                terms[e] = dk[e] * k_part[e].to(Float32)
            row_sums(terms, crd, sKd)
            wg_gemm(mma_ck_t, tidx, dk, transposed(sDp), transposed(sQ))
            # the last row's d gamma: the state leaving is exp(last) h + ...: sum(dh * h) exp(last)
            part = tile_dot(sDh, sH, tidx, V, K, WG2_THREADS)
            for off in cutlass.range_constexpr(5):
                part = part + cute.arch.shuffle_sync_bfly(part, 1 << off)
            if tidx % 32 == 0:
                cute.arch.atomic_add(sPart.iterator, part)
            cute.nvgpu.warpgroup.wait_group(0)
            cute.arch.cp_async_wait_group(0)  # v, T
            async_visible()
            cute.arch.sync_threads()

            # T's gradient: dT = dw (beta exp(gamma) k)^T + dv_new (beta v)^T, the gates as column
            # scales of the fp32 accumulator: ((dw k^T) exp(gamma_j) + dv_new v^T) beta_j
            dt, _ = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, dt, sDw, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            decayed_cols(dt, crd_p, sGamma)
            wg_gemm(mma_cc, tidx, dt, sDvn, sV)
            cute.nvgpu.warpgroup.wait_group(0)
            beta_cols(dt, crd_p, sWr)
            acc_to_smem(mma_cc, tidx, dt, sDt, io)

            # u = T (beta v): dv = beta T^T dv_new, and beta's term (T^T dv_new) . v
            dvw, crd_v = zeroed_acc(mma_cv_t, tidx, C, V)
            wg_gemm(mma_cv_t, tidx, dvw, transposed(sT), transposed(sDvn))
            cute.nvgpu.warpgroup.wait_group(0)
            dv_rows(dvw, crd_v, mma_cv_t.get_slice(tidx).partition_C(sV), sWr, sDwrite)
            grad_rows_to_gmem(mma_cv_t, tidx, dvw, crd_v, self.direct_v, mDV, mDv, r0, h, V, rows_left, io)
            async_visible()
            cute.arch.sync_threads()  # sDt complete

            # T = (I + A)^-1: dA = -T^T dT T^T; A = beta (k k^T) exp(gamma_i - gamma_j), strictly lower
            tmp, _ = zeroed_acc(mma_cc_t, tidx, C, C)
            wg_gemm(mma_cc_t, tidx, tmp, transposed(sT), transposed(sDt))
            cute.nvgpu.warpgroup.wait_group(0)
            acc_to_smem(mma_cc_t, tidx, tmp, sTmp, io)
            async_visible()
            cute.arch.sync_threads()
            da, _ = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, da, sTmp, sT)
            gram, _ = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, gram, sK, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            dg_part = mma_cc.get_slice(tidx).partition_C(sDgram)
            da_terms(da, gram, crd_p, dg_part, sGamma, sWr, sDwrite, sDgam, io)
            col_sums_sub_paired(da, crd_p, sDgam, tidx)
            async_visible()
            cute.arch.sync_threads()  # sDgram complete

            # w = T (beta exp(gamma) k): dk += beta exp(gamma) T^T dw + (dA' + dA'^T) k
            dkw, _ = zeroed_acc(mma_ck_t, tidx, C, K)
            wg_gemm(mma_ck_t, tidx, dkw, transposed(sT), transposed(sDw))
            cute.nvgpu.warpgroup.wait_group(0)
            e_a, e_b = fast_exp(sGamma[row_a]), fast_exp(sGamma[row_b])
            wr_a, wr_b = sWr[row_a] * e_a, sWr[row_b] * e_b
            for e in cutlass.range_constexpr(cute.size(dkw)):
                e_row = e_b
                w_row = wr_b
                if crd[e][0] == row_a:
                    e_row = e_a
                    w_row = wr_a
                terms[e] = dkw[e] * k_part[e].to(Float32) * e_row
                dkw[e] = dk[e] + dkw[e] * w_row
            row_sums(terms, crd, sRow)
            wg_gemm(mma_ck, tidx, dkw, sDgram, transposed(sK))
            wg_gemm(mma_ck_t, tidx, dkw, transposed(sDgram), transposed(sK))
            cute.nvgpu.warpgroup.wait_group(0)
            grad_rows_to_gmem(mma_ck, tidx, dkw, crd, self.direct_qk, mDK, mDk, r0, h, K, rows_left, io)
            cute.arch.sync_threads()  # every row and column sum is in
            self.chunk_gate_grads(
                tidx, rows_left, last_row, last, r0, h, (sDg, sKd, sDgam, sRow, sDwrite, sDgamma), sPart,
                (raw_b, gate, wr, biased, rate), mDg, mDb, mDa,
            )  # fmt: skip
