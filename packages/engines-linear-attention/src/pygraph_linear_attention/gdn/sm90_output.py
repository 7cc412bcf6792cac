"""The gdn_sm90 forward's output with SPLIT: every chunk's output at once from the state entering it
and its v_new (the split scan's), on mma.sync per value block or, with WGMMA 2, on warpgroup MMAs over
the whole value dim (`OutputKernels.output`); `chunk_output` is
also the fused scan's per-chunk output. A mixin of `gdn.sm90_fwd.GdnSm90Fwd` (its fields: dims,
dtypes, options)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    acc_to_gmem,
    async_visible,
    chunk_rows,
    cta_g2s,
    cta_s2g,
    fast_exp,
    gamma_row,
    l2_normalize_rows,
    load_rows,
    row_major,
    row_pair,
    slot_chunk,
    smem_gemm,
    store_rows,
    transposed,
    warp_mma,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)


class OutputKernels:
    """The output kernels of `GdnSm90Fwd` (a mixin: they read its configuration)."""

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
        scale: Float32,
    ):
        """SPLIT: every chunk's output at once, from the state entering it and its v_new (the scan's).
        Grid: chunk slots x output heads x value blocks of BLOCK_V, on mma.sync; with WGMMA 2
        (``wgmma_output``) one CTA per chunk slot and head over the whole value dim, on warpgroup MMAs,
        so q k^T is computed once per chunk instead of once per value block.

        With ``channel_decay`` (KDA, GDN-2; WGMMA 2 only) prepare has done the per-channel decays:
        ``mQ`` is ``q exp(gamma)`` per output head (``k_group`` 1) and ``mK`` the chunk's scores P
        [T, HO, 64] (decay-weighted, causal, 0 past the sequence), so o = scale (mQ S^T + P v_new)
        and ``mGamma`` is not read."""
        K, C, io, whole = self.K, CHUNK, self.io, self.wgmma_output
        BV = self.V if const_expr(whole) else self.BV  # the value columns one CTA computes
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            k_layout, k_swz = row_major(C, K)
            v_layout, v_swz = row_major(C, BV)
            s_layout, s_swz = row_major(BV, K)
            p_layout, p_swz = row_major(C, C)
            kda = self.channel_decay
            sQ = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sK = None if const_expr(kda) else smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
            sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
            sO = smem.allocate_tensor(io, v_layout, 1024, v_swz) if const_expr(whole) else None
            sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)
            sGamma = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, BV)

            load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            if const_expr(kda):
                load_rows(cta_g2s(io, C), tidx, chunk_rows(mK, r0, h, C), sP, rows_left)
            else:
                load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sK, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mVnew, r0, h, BV, vb), sVn, rows_left)
            load_rows(g2s_k, tidx, cute.local_tile(mHs[slot, h, None, None], (BV, K), (vb, 0)), sS, BV)
            cute.arch.cp_async_commit_group()
            if const_expr(not kda):
                if tidx < C:
                    sGamma[tidx] = gamma_row(mGamma, r0, rows_left, h, tidx)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm and not kda):
                l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            gO = chunk_rows(mO, r0, h, BV, vb)
            if const_expr(whole):
                async_visible()
                cute.arch.sync_threads()
                _chunk_output_wg(tidx, sQ, sK, sS, sVn, sP, sO, sGamma, gO, rows_left, io, scale, kda)
            else:
                mma_cc, mma_cv = warp_mma(io, C, C), warp_mma(io, C, BV)
                chunk_output(mma_cc, mma_cv, tidx, sQ, sK, sS, sVn, sP, sGamma, gO, rows_left, io, scale)


@cute.jit
def _chunk_output_wg(
    tidx,
    sQ,
    sK,
    sS,
    sVn,
    sP,
    sO,
    sGamma,
    gO,
    rows_left,
    io: cutlass.Constexpr,
    scale: Float32,
    given_scores: cutlass.Constexpr = False,
):
    """`chunk_output` on warpgroup MMAs for the whole value dim: o = scale (exp(gamma) q S^T +
    P v_new), P = (q k^T) exp(gamma_i - gamma_j) on the causal, real part; q S^T and q k^T issue
    together, P v_new reads v_new MN-major; o leaves through ``sO``, 16 bytes per store. The tiles
    are complete and visible to the async proxy on entry. ``given_scores``: ``sP`` already holds P
    and ``sQ`` the decayed q (KDA, GDN-2), so o = scale (sQ S^T + P v_new)."""
    C, V = CHUNK, cute.size(sVn, mode=[1])
    mma_cc = wg_mma(io, C, False, False)  # q k^T
    mma_qs = wg_mma(io, V, False, False)  # q S^T: S [V, K] K-major
    mma_pv = wg_mma(io, V, False, True)  # P v_new: v_new [C, V] read MN-major
    if const_expr(given_scores):
        out, crd_o = zeroed_acc(mma_qs, tidx, C, V)
        wg_gemm(mma_qs, tidx, out, sQ, sS)
        cute.nvgpu.warpgroup.wait_group(0)
    else:
        scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
        wg_gemm(mma_cc, tidx, scores, sQ, sK)
        out, crd_o = zeroed_acc(mma_qs, tidx, C, V)
        wg_gemm(mma_qs, tidx, out, sQ, sS)
        cute.nvgpu.warpgroup.wait_group(0)
        decayed_scores(tidx, scores, crd_p, mma_cc, sP, sGamma, out, crd_o, rows_left, io)
        async_visible()
        cute.arch.sync_threads()  # sP complete
    wg_gemm(mma_pv, tidx, out, sP, transposed(sVn))
    cute.nvgpu.warpgroup.wait_group(0)
    o_part = mma_qs.get_slice(tidx).partition_C(sO)
    for i in cutlass.range_constexpr(cute.size(out)):
        o_part[i] = (out[i] * scale).to(io)
    cute.arch.sync_threads()  # sO complete
    store_rows(cta_s2g(io, V), tidx, sO, gO, rows_left)


@cute.jit
def causal_decay(scores, crd, sGamma, rows_left):
    """In place, a q k^T accumulator (coordinates ``crd``) into P = (q k^T) exp(gamma_i - gamma_j)
    on the causal part of the real rows, 0 elsewhere (a row past the sequence: 0, not 0 exp(-gamma))."""
    for i in cutlass.range_constexpr(cute.size(scores)):
        row, col = crd[i][0], crd[i][1]
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = scores[i] * fast_exp(sGamma[row] - sGamma[col])
        scores[i] = val


@cute.jit
def decayed_scores(tidx, scores, crd_p, mma_cc, sP, sGamma, out, crd_o, rows_left, io: cutlass.Constexpr):
    """GDN's part of `_chunk_output_wg`, from q k^T and q S^T: P (the decayed causal scores of the real
    rows) into ``sP`` and ``out`` = exp(gamma) q S^T."""
    pa, pb = row_pair(crd_p)
    ga, gb = sGamma[pa], sGamma[pb]
    p_part = mma_cc.get_slice(tidx).partition_C(sP)
    for i in cutlass.range_constexpr(cute.size(scores)):
        row, col = crd_p[i][0], crd_p[i][1]
        g_row = gb
        if row == pa:
            g_row = ga
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = scores[i] * fast_exp(g_row - sGamma[col])
        p_part[i] = val.to(io)
    oa, ob = row_pair(crd_o)
    ea, eb = fast_exp(sGamma[oa]), fast_exp(sGamma[ob])
    for i in cutlass.range_constexpr(cute.size(out)):
        e = eb
        if crd_o[i][0] == oa:
            e = ea
        out[i] = out[i] * e


@cute.jit
def chunk_output(
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
    scale: Float32,
):
    """o = scale (exp(gamma) q S^T + P v_new) of one chunk into ``gO`` (rows before ``rows_left``),
    P = (q k^T) exp(gamma_i - gamma_j) on the causal, real part; sVn complete at the barrier inside."""
    C, BV = CHUNK, cute.size(sVn, mode=[1])
    scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
    smem_gemm(mma_cc, tidx, scores, sQ, sK, False, False, io)
    p_part = mma_cc.get_slice(tidx).partition_C(sP)
    for i in cutlass.range_constexpr(cute.size(scores)):
        row, col = crd_p[i][0], crd_p[i][1]
        val = Float32(0.0)
        if row >= col and row < rows_left:
            val = scores[i] * fast_exp(sGamma[row] - sGamma[col])
        p_part[i] = val.to(io)
    inter, crd_o = zeroed_acc(mma_cv, tidx, C, BV)
    smem_gemm(mma_cv, tidx, inter, sQ, sS, False, False, io)
    for i in cutlass.range_constexpr(cute.size(inter)):
        inter[i] = inter[i] * fast_exp(sGamma[crd_o[i][0]])
    cute.arch.sync_threads()  # sVn and sP complete
    smem_gemm(mma_cv, tidx, inter, sP, transposed(sVn), False, True, io)
    for i in cutlass.range_constexpr(cute.size(inter)):
        inter[i] = inter[i] * scale
    acc_to_gmem(mma_cv, tidx, inter, crd_o, gO, rows_left, io)
