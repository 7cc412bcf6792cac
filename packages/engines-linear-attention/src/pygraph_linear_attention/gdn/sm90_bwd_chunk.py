"""The gdn_sm90 backward's chunk-gradient steps that more than one kernel takes (`ChunkGradKernels`, a
mixin of `gdn.sm90_bwd.GdnSm90Bwd`: its fields, dims, dtypes, options): the WY terms' elementwise
steps (`decayed_cols`, `beta_cols`, `dv_rows`, `da_terms`), dP's decay, mask and d gamma terms
(`dp_terms`) and the gates' chain rules (`ChunkGradKernels.gate_chain_rules`, after d gamma's
reverse sum). `GdnSm90Bwd.grad_output` and `grad_wy` (WGMMA 0 and 1) and the fused chunk gradients
(`gdn.sm90_bwd_chunk_ws`, WGMMA 2) take them, and the gates' forms from the forward's prepare
(`GdnSm90Fwd.chunk_gates`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    fast_exp,
    row_sums,
)


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
