"""The gdn_sm90 forward's fused scan (SPLIT 0 at WGMMA 1): the state kept on chip from the first
chunk to the last, every chunk's output computed in the step that carries the state across it.

Per chunk and value block, with S [BV, K] the state entering the chunk (carried as S^T in fp32
wgmma accumulators, copied to shared memory in the io dtype for the products that read it):

    x     = v - exp(gamma) (k S^T)                  [C, BV]
    v_new = Tb x,  Tb = (I + A)^-1 diag(beta)        [C, BV]   (prepare's only product per chunk)
    o     = scale (exp(gamma) (q S^T) + P v_new),  P = (q k^T) exp(gamma_i - gamma_j), causal
    S^T   = exp(last) S^T + k^T (v_new exp(last - gamma))

which is the WY form's ``v_new = u - w S^T`` with ``w = Tb diag(exp(gamma)) k`` and ``u = Tb v``
unfolded: the per-chunk w and u never exist, so prepare writes a 64 x 64 Tb per chunk and head
instead of w and u (K + V values a token), and nothing per chunk (the split scan's entering states
and v_new) goes through HBM between the scan and the output. Three rounds of warpgroup MMAs a
chunk: k S^T, q S^T and q k^T issued together; Tb x; P v_new and the state's update together.

A mixin of `gdn.sm90_fwd.GdnSm90Fwd` (its fields: dims, dtypes, options, stages).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    acc_to_smem,
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
    store_rows,
    tail_decay,
    transposed,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_output import decayed_scores


def _load_fused_chunk(copies, tidx, tiles, r0, rows_left, buffers, buf):
    """cp.async one chunk's q, k (head hk), v (head hv, value block vb) and Tb (head h) from token
    ``r0`` into stage ``buf``, rows at or past ``rows_left`` zero-filled (no commit)."""
    g2s_k, g2s_v, g2s_t = copies
    mQ, mK, mV, mTb, hk, hv, h, vb, K, BV = tiles
    sQs, sKs, sVs, sTbs = buffers
    load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQs[None, None, buf], rows_left)
    load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sKs[None, None, buf], rows_left)
    load_rows(g2s_v, tidx, chunk_rows(mV, r0, hv, BV, vb), sVs[None, None, buf], rows_left)
    load_rows(g2s_t, tidx, chunk_rows(mTb, r0, h, CHUNK), sTbs[None, None, buf], rows_left)


class FusedScanKernels:
    """The fused scan of `GdnSm90Fwd` (a mixin: it reads its configuration)."""

    @cute.kernel
    def scan_fused_wg(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mTb: cute.Tensor,
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mH0: cute.Tensor,
        mO: cute.Tensor,
        mHt: cute.Tensor,
        k_group: Int32,
        v_group: Int32,
    ):
        """Grid: sequences x output heads x value blocks of BV, one warpgroup each (the module's
        docstring has the step). STAGES 2 loads chunk c + 1's tiles while chunk c computes."""
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        hk, hv = h // k_group, h // v_group
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos

        smem = utils.SmemAllocator()
        nbuf = self.stages
        k_layout, k_swz = row_major(C, K, nbuf)
        v_layout, v_swz = row_major(C, BV, nbuf)
        t_layout, t_swz = row_major(C, C, nbuf)
        x_layout, x_swz = row_major(C, BV)
        s_layout, s_swz = row_major(BV, K)
        p_layout, p_swz = row_major(C, C)
        sQs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sVs = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sTbs = smem.allocate_tensor(io, t_layout, 1024, t_swz)
        sX = smem.allocate_tensor(io, x_layout, 1024, x_swz)  # x, then (once Tb x is done) the output
        sVn = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sCar = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, nbuf), stride=(1, C)), 16)
        copies = (cta_g2s(io, K), cta_g2s(io, BV), cta_g2s(io, C))
        s2g_v = cta_s2g(io, BV)

        mma_v = wg_mma(io, BV, False, False)  # [C, BV] = (k or q) [C, K] . S [BV, K]^T
        mma_cc = wg_mma(io, C, False, False)  # q k^T
        mma_tv = wg_mma(io, BV, False, True)  # [C, BV] = (Tb or P) [C, C] . (x or v_new) [C, BV]
        mma_s = wg_mma(io, BV, True, True)  # S^T [K, BV] += k^T [K, C] . carried [C, BV]
        state, crd_s = zeroed_acc(mma_s, tidx, K, BV)
        thr_s = mma_s.get_slice(tidx)
        if const_expr(self.has_h0):
            src = thr_s.partition_C(transposed(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0))))
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = src[i].to(Float32)
        tiles = (mQ, mK, mV, mTb, hk, hv, h, vb, K, BV)
        buffers = (sQs, sKs, sVs, sTbs)
        chunks = cute.ceil_div(length, C)
        if const_expr(nbuf == 2):  # the prologue: chunk 0 into buffer 0
            _load_fused_chunk(copies, tidx, tiles, bos, length, buffers, 0)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGammas[tidx, 0] = gamma_row(mGamma, bos, length, h, tidx)

        for c in cutlass.range(chunks, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = c % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                if c + 1 < chunks:
                    _load_fused_chunk(copies, tidx, tiles, r0 + C, rows_left - C, buffers, 1 - buf)
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    g_next = gamma_row(mGamma, r0 + C, rows_left - C, h, tidx)
            else:
                _load_fused_chunk(copies, tidx, tiles, r0, rows_left, buffers, 0)
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    sGammas[tidx, 0] = gamma_row(mGamma, r0, rows_left, h, tidx)
            sQ, sK = sQs[None, None, buf], sKs[None, None, buf]
            sV, sTb, sGamma = sVs[None, None, buf], sTbs[None, None, buf], sGammas[None, buf]
            acc_to_smem(mma_s, tidx, state, transposed(sS), io)  # the entering state, io copy
            cute.arch.cp_async_wait_group(nbuf - 1)
            async_visible()
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                async_visible()
                cute.arch.sync_threads()
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]

            # round 1: k S^T, q S^T, q k^T
            ks, crd_v = zeroed_acc(mma_v, tidx, C, BV)
            wg_gemm(mma_v, tidx, ks, sK, sS)
            out, crd_o = zeroed_acc(mma_v, tidx, C, BV)
            wg_gemm(mma_v, tidx, out, sQ, sS)
            scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            wg_gemm(mma_cc, tidx, scores, sQ, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            ra, rb = row_pair(crd_v)
            ea, eb = fast_exp(sGamma[ra]), fast_exp(sGamma[rb])
            v_part = mma_v.get_slice(tidx).partition_C(sV)
            x_part = mma_v.get_slice(tidx).partition_C(sX)
            for i in cutlass.range_constexpr(cute.size(ks)):
                e = eb
                if crd_v[i][0] == ra:
                    e = ea
                x_part[i] = (v_part[i].to(Float32) - e * ks[i]).to(io)
            decayed_scores(tidx, scores, crd_p, mma_cc, sP, sGamma, out, crd_o, rows_left, io)
            async_visible()
            cute.arch.sync_threads()  # sX and sP complete

            # round 2: v_new = Tb x; the carried rows v_new exp(last - gamma) beside it
            v_new, _ = zeroed_acc(mma_tv, tidx, C, BV)
            wg_gemm(mma_tv, tidx, v_new, sTb, transposed(sX))
            cute.nvgpu.warpgroup.wait_group(0)
            vn_part = mma_tv.get_slice(tidx).partition_C(sVn)
            car_part = mma_tv.get_slice(tidx).partition_C(sCar)
            ta, tb = tail_decay(ra, rows_left, last, sGamma), tail_decay(rb, rows_left, last, sGamma)
            for i in cutlass.range_constexpr(cute.size(v_new)):
                vn_part[i] = v_new[i].to(io)
                tail = tb
                if crd_v[i][0] == ra:
                    tail = ta
                car_part[i] = (v_new[i] * tail).to(io)
            async_visible()
            cute.arch.sync_threads()  # sVn and sCar complete

            # round 3: o += P v_new; S^T = exp(last) S^T + k^T carried
            wg_gemm(mma_tv, tidx, out, sP, transposed(sVn))
            decay = fast_exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            wg_gemm(mma_s, tidx, state, transposed(sK), transposed(sCar))
            cute.nvgpu.warpgroup.wait_group(0)
            o_part = mma_tv.get_slice(tidx).partition_C(sX)  # sX's last reader (Tb x) is done
            for i in cutlass.range_constexpr(cute.size(out)):
                o_part[i] = (out[i] * self.scale).to(io)
            if const_expr(nbuf == 2):
                if tidx < C:
                    sGammas[tidx, 1 - buf] = g_next
            cute.arch.sync_threads()  # the output tile complete; every read of this chunk's tiles done
            store_rows(s2g_v, tidx, sX, chunk_rows(mO, r0, h, BV, vb), rows_left)

        if const_expr(self.store_ht):
            dst = thr_s.partition_C(transposed(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0))))
            for i in cutlass.range_constexpr(cute.size(state)):
                dst[i] = state[i].to(self.ht_t)
