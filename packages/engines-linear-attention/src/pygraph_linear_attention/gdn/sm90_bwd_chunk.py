"""The gdn_sm90 backward's chunk-gradient steps that more than one kernel takes (`ChunkGradKernels`, a
mixin of `gdn.sm90_bwd.GdnSm90Bwd`: its fields, dims, dtypes, options): the WY terms' elementwise
steps (`decayed_cols`, `beta_cols`, `dv_rows`, `da_terms`), column sums over a wgmma accumulator's
row pairs (`col_sums_sub_paired`), sum(dh * h) by 16-byte loads (`tile_dot`), the gates' chain rules
(`ChunkGradKernels.gate_chain_rules`, after d gamma's reverse sum) and the fused kernel's last steps
(`ChunkGradKernels.chunk_gate_grads`). `GdnSm90Bwd.grad_wy` (WGMMA 0 and 1) and the fused chunk
gradients (`gdn.sm90_bwd_chunk_ws`, WGMMA 2) both take them, and the gates' forms from the
forward's prepare (`GdnSm90Fwd.chunk_gates`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    THREADS,
    VEC,
    fast_exp,
    row_sums,
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
def dp_terms(dp, qk, crd, dp_part, sGamma, rows_left, scale, io: cutlass.Constexpr):
    """dP = scale dO v_new^T on the causal, real part with the decay, in place on ``dp`` (its io copy
    into ``dp_part``, the tile dq's and dk's products read), then d gamma's terms dP * (q k^T)."""
    for e in cutlass.range_constexpr(cute.size(dp)):
        row, col = crd[e][0], crd[e][1]
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = dp[e] * scale * fast_exp(sGamma[row] - sGamma[col])
        dp_part[e] = val.to(io)
        dp[e] = val * qk[e]


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
