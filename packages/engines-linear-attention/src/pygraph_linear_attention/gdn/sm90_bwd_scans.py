"""The gdn_sm90 backward's gradient scans: chunks in reverse from d_final_state, the gradient of the
state in fp32 registers, on mma.sync (`GradScanKernels.grad_scan`) or on warpgroup MMAs with the
gradient carried transposed (`GradScanKernels.grad_scan_wg`, WGMMA 1; STAGES 2 prefetches the next
chunk). A mixin of `gdn.sm90_bwd.GdnSm90Bwd` (its fields: dims, dtypes, options)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    acc_to_gmem,
    acc_to_smem,
    async_visible,
    chunk_rows,
    cta_g2s,
    cta_s2g,
    fast_exp,
    gamma_row,
    l2_normalize_rows,
    load_chunk,
    load_rows,
    matmul,
    row_major,
    row_pair,
    scaled_rows,
    segment_span,
    smem_tile,
    smem_vector,
    store_rows,
    tail_decay,
    trans,
    transposed,
    warp_mma,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)


class GradScanKernels:
    """The gradient scans of `GdnSm90Bwd` (a mixin: they read its configuration)."""

    channel_decay = False  # KDA and GDN-2 (`kda.sm90_bwd`): `grad_scan_wg` on prepare's decayed operands

    @cute.kernel
    def grad_scan(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mW: cute.Tensor,
        mGamma: cute.Tensor,
        mDo: cute.Tensor,
        mCu: cute.Tensor,
        mDht: cute.Tensor,
        mDh: cute.Tensor,
        mDvnew: cute.Tensor,
        mDh0: cute.Tensor,
        k_group: Int32,
        scale: Float32,
    ):
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos

        smem = utils.SmemAllocator()
        sQ, sK, sW = smem_tile(smem, io, C, K), smem_tile(smem, io, C, K), smem_tile(smem, io, C, K)
        sDo, sNdv, sDd = smem_tile(smem, io, C, BV), smem_tile(smem, io, C, BV), smem_tile(smem, io, C, BV)
        sP, sDs = smem_tile(smem, io, C, C), smem_tile(smem, io, BV, K)
        sGamma = smem_vector(smem)

        mma_state = warp_mma(io, BV, K)
        mma_cv, mma_cc = warp_mma(io, C, BV), warp_mma(io, C, C)
        d_state, crd_s = zeroed_acc(mma_state, tidx, BV, K)
        thr_s = mma_state.get_slice(tidx)
        if const_expr(self.has_dht):
            src = thr_s.partition_C(cute.local_tile(mDht[n, h, None, None], (BV, K), (vb, 0)))
            for i in cutlass.range_constexpr(cute.size(d_state)):
                d_state[i] = src[i].to(Float32)
        g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, BV)
        chunks = cute.ceil_div(length, C)
        for i in cutlass.range(chunks, unroll=1):
            c = chunks - 1 - i
            r0 = bos + c * C
            rows_left = length - c * C
            load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sK, rows_left)
            load_rows(g2s_k, tidx, chunk_rows(mW, r0, h, K), sW, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mDo, r0, h, BV, vb), sDo, rows_left)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGamma[tidx] = gamma_row(mGamma, r0, rows_left, h, tidx)
            acc_to_smem(mma_state, tidx, d_state, sDs, io)
            slot = bos // C + n + c  # the gradient of the state leaving chunk c
            acc_to_gmem(
                mma_state,
                tidx,
                d_state,
                crd_s,
                cute.local_tile(mDh[slot, h, None, None], (BV, K), (vb, 0)),
                BV,
                io,
            )
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]

            # P = (q k^T) exp(gamma_i - gamma_j) on the causal, real part; dO scale exp(gamma) beside it
            scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, scores, sQ, trans(sK), io)
            p_part = mma_cc.get_slice(tidx).partition_C(sP)
            for e in cutlass.range_constexpr(cute.size(scores)):
                row, col = crd_p[e][0], crd_p[e][1]
                val = Float32(0.0)
                if row >= col and row < rows_left:
                    val = scores[e] * fast_exp(sGamma[row] - sGamma[col])
                p_part[e] = val.to(io)
            scaled_rows(sDo, sDd, lambda r: scale * fast_exp(sGamma[r]), tidx, C, BV)
            cute.arch.sync_threads()

            # dv_new = scale P^T dO + exp(last - gamma) (k dS^T)
            through, crd_v = zeroed_acc(mma_cv, tidx, C, BV)
            matmul(mma_cv, tidx, through, trans(sP), sDo, io)
            passed, _ = zeroed_acc(mma_cv, tidx, C, BV)
            matmul(mma_cv, tidx, passed, sK, trans(sDs), io)
            ndv_part = mma_cv.get_slice(tidx).partition_C(sNdv)
            for e in cutlass.range_constexpr(cute.size(through)):
                val = through[e] * scale + tail_decay(crd_v[e][0], rows_left, last, sGamma) * passed[e]
                through[e] = val
                ndv_part[e] = (-val).to(io)
            acc_to_gmem(mma_cv, tidx, through, crd_v, chunk_rows(mDvnew, r0, h, BV, vb), rows_left, io)
            cute.arch.sync_threads()

            # dS = exp(last) dS - dv_new^T w + (scale exp(gamma) dO)^T q
            decay = fast_exp(last)
            for e in cutlass.range_constexpr(cute.size(d_state)):
                d_state[e] = d_state[e] * decay
            matmul(mma_state, tidx, d_state, trans(sNdv), sW, io)
            matmul(mma_state, tidx, d_state, trans(sDd), sQ, io)
            cute.arch.sync_threads()  # every read of this chunk's tiles is done

        if const_expr(self.has_h0):
            dst = thr_s.partition_C(cute.local_tile(mDh0[n, h, None, None], (BV, K), (vb, 0)))
            for e in cutlass.range_constexpr(cute.size(d_state)):
                dst[e] = d_state[e].to(mDh0.element_type)

    @cute.kernel
    def grad_scan_wg(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mW: cute.Tensor,
        mGamma: cute.Tensor,
        mDo: cute.Tensor,
        mCu: cute.Tensor,
        mDht: cute.Tensor,
        mDh: cute.Tensor,
        mDvnew: cute.Tensor,
        mDh0: cute.Tensor,
        k_group: Int32,
        scale: Float32,
        mP: cute.Tensor = None,
        mSegMB: cute.Tensor = None,
        mSegST: cute.Tensor = None,
        mCon: cute.Tensor = None,
        sequences=None,  # Int32 (phases 1 and 2; unannotated, so phase 0's launches may leave it out)
        search_steps=None,  # Int32 (phases 1 and 2)
        phase: cutlass.Constexpr = 0,
    ):
        """`grad_scan` (WGMMA) on warpgroup MMAs: the gradient carried transposed, dS^T [K, BV] in
        fp32 wgmma accumulators; ``k dS^T`` reads dS's io copy K-major, ``P^T dO`` and the update's
        ``w^T (-dv_new)`` and ``q^T (scale exp(gamma) dO)`` read their row-major tiles MN-major.

        With ``channel_decay`` (KDA, GDN-2) every decay is in prepare's operands (per output head,
        ``k_group`` 1): ``mQ`` is ``q exp(gamma)``, ``mK`` ``k exp(last - gamma)``, ``mP`` the
        chunk's scores [T, HO, 64] and ``mGamma`` the chunks' last gamma [slots, HO, K]; so
        ``dv_new = scale P^T dO + kd dS^T`` and ``dS^T = diag(exp(last)) dS^T - w^T dv_new + qd^T
        (scale dO)``, the decay a scale of the accumulator's rows (one per key channel).

        ``phase`` (gdn with SEGMENT, `gdn.sm90_bwd`): 0 as above, grid sequences x heads x value
        blocks; 1: segment slots x heads x value blocks, every segment but a sequence's first: the
        gradient leaving the segment's start from zero at its end (its G, over the warmup's chunks
        from its start: `_warmup_start` with ``from_start``) into ``mSegMB``'s B rows; 2: the same
        grid, each segment from the gradient at its end (``mSegST``, from `segment_combine` reversed, or
        d_final_state for a sequence's last), storing as phase 0 does, d_initial_state from the
        first."""
        C = CHUNK
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, vb = cute.arch.block_idx()
        if const_expr(phase == 0):
            bos = Int32(mCu[slot])
            length = Int32(mCu[slot + 1]) - bos
            self._grad_chunks(
                mQ, mK, mW, mGamma, mDo, mCu, mDht, mDh, mDvnew, mDh0, k_group, scale, mP, mSegMB, mSegST,
                tidx, slot, slot, h, vb, bos, length, 0, 0, cute.ceil_div(length, C), 1, phase,
            )  # fmt: skip
        else:
            n, bos, length, seg, c_begin, c_end, is_last, starts = segment_span(
                mCu, slot, sequences, search_steps, self.segment
            )
            active = starts * Int32(seg > 0)  # phase 1: every segment but the sequence's first
            if const_expr(phase == 2):
                active = Int32(starts + Int32(seg == 0) > 0)  # an empty sequence: d_initial_state
            if active > 0:
                if const_expr(phase == 1):
                    c_end, _ = self.fwd._warmup_start(
                        mGamma, mCon, tidx, n, h, bos, c_begin, c_end, length=length, from_start=True
                    )
                self._grad_chunks(
                    mQ, mK, mW, mGamma, mDo, mCu, mDht, mDh, mDvnew, mDh0, k_group, scale, mP, mSegMB, mSegST,
                    tidx, slot, n, h, vb, bos, length, seg, c_begin, c_end, is_last, phase,
                )  # fmt: skip

    @cute.jit
    def _grad_chunks(
        self, mQ, mK, mW, mGamma, mDo, mCu, mDht, mDh, mDvnew, mDh0, k_group, scale, mP, mSegMB, mSegST, tidx,
        slot, n, h, vb, bos, length, seg, c_begin, c_end, is_last, phase: cutlass.Constexpr,
    ):  # fmt: skip
        """`grad_scan_wg`'s work for one CTA with something to do: chunks ``c_end - 1`` down to
        ``c_begin`` of sequence ``n`` (from token ``bos``), segment ``seg``. Phase 0 (KDA's and GDN-2's
        gradient scans too) passes ``seg``, ``c_begin`` and ``is_last`` as Python ints: its offsets
        fold at trace time."""
        kda = self.channel_decay
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        hk = h // k_group
        stores = phase != 1

        smem = utils.SmemAllocator()
        nbuf = self.stages  # 2: chunk c - 1's q, k, w, dO and gamma load while chunk c computes
        k_layout, k_swz = row_major(C, K, nbuf)
        v_layout, v_swz = row_major(C, BV, nbuf)
        sQs, sKs, sWs = (smem.allocate_tensor(io, k_layout, 1024, k_swz) for _ in range(3))
        sDos = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sNdv, sDd = smem_tile(smem, io, C, BV), smem_tile(smem, io, C, BV)
        if const_expr(kda):  # prepare's scores, loaded with the chunk's other tiles
            p_layout, p_swz = row_major(C, C, nbuf)
            sPs = smem.allocate_tensor(io, p_layout, 1024, p_swz)
            g2s_p = cta_g2s(io, C)
            sDs, sDvn = smem_tile(smem, io, BV, K), smem_tile(smem, io, C, BV)
        else:
            sP, sDs, sDvn = smem_tile(smem, io, C, C), smem_tile(smem, io, BV, K), smem_tile(smem, io, C, BV)
        # gamma per row, or (channel_decay) exp(last gamma) per key channel
        gates = K if const_expr(kda) else C
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((gates, nbuf), stride=(1, gates)), 16)
        s2g_k, s2g_v = cta_s2g(io, K), cta_s2g(io, BV)

        mma_s = wg_mma(io, BV, True, True)  # dS^T [K, BV] += x^T [K, C] . y^T [BV, C]^T
        mma_v = wg_mma(io, BV, False, False)  # k dS^T: [C, BV] = k [C, K] . dS [BV, K]^T
        mma_t = wg_mma(io, BV, True, True)  # P^T dO: [C, BV] = P^T [C, C] . dO^T [BV, C]^T
        mma_cc = wg_mma(io, C, False, False)  # q k^T
        d_state, crd_s = zeroed_acc(mma_s, tidx, K, BV)
        thr_s = mma_s.get_slice(tidx)
        if const_expr(phase == 2):
            if is_last == 0:  # the gradient at the segment's end, from the combine
                src = thr_s.partition_C(
                    transposed(cute.local_tile(mSegST[slot, h, None, None], (BV, K), (vb, 0)))
                )
                for e in cutlass.range_constexpr(cute.size(d_state)):
                    d_state[e] = src[e]
        if const_expr(self.has_dht and phase != 1):
            if is_last > 0:
                src = thr_s.partition_C(transposed(cute.local_tile(mDht[n, h, None, None], (BV, K), (vb, 0))))
                for e in cutlass.range_constexpr(cute.size(d_state)):
                    d_state[e] = src[e].to(Float32)
        g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, BV)
        tiles = (mQ, mK, mW, mDo, hk, h, vb, K, BV)
        buffers = (sQs, sKs, sWs, sDos)
        chunks = c_end - c_begin
        if const_expr(nbuf == 2):  # the prologue: the last chunk into buffer 0 (none of an empty sequence)
            last_chunk = cutlass.max(c_end - 1, c_begin)
            r_last = bos + last_chunk * C
            last_rows = Int32(0)
            if chunks > 0:
                last_rows = length - last_chunk * C
            load_chunk(g2s_k, g2s_v, tidx, tiles, r_last, last_rows, buffers, 0)
            if const_expr(kda):
                load_rows(g2s_p, tidx, chunk_rows(mP, r_last, h, C), sPs[None, None, 0], last_rows)
            cute.arch.cp_async_commit_group()
            if const_expr(kda):
                if tidx < K:
                    sGammas[tidx, 0] = fast_exp(Float32(mGamma[bos // C + n + last_chunk, h, tidx]))
            else:
                if tidx < C:
                    sGammas[tidx, 0] = gamma_row(mGamma, r_last, last_rows, h, tidx)
        for i in cutlass.range(chunks, unroll=1):
            c = c_end - 1 - i
            r0 = bos + c * C
            rows_left = length - c * C
            buf = i % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                # chunk c - 1 exists only while i + 1 < chunks: at c == 0 its rows would lie before
                # the sequence (before the tensor, for the first one)
                if i + 1 < chunks:
                    load_chunk(g2s_k, g2s_v, tidx, tiles, r0 - C, rows_left + C, buffers, 1 - buf)
                    if const_expr(kda):
                        load_rows(g2s_p, tidx, chunk_rows(mP, r0 - C, h, C), sPs[None, None, 1 - buf], C)
                        if tidx < K:
                            g_next = fast_exp(Float32(mGamma[bos // C + n + c - 1, h, tidx]))
                    else:
                        if tidx < C:
                            g_next = gamma_row(mGamma, r0 - C, rows_left + C, h, tidx)
                cute.arch.cp_async_commit_group()
            else:
                load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, buffers, 0)
                if const_expr(kda):
                    load_rows(g2s_p, tidx, chunk_rows(mP, r0, h, C), sPs[None, None, 0], rows_left)
                cute.arch.cp_async_commit_group()
                if const_expr(kda):
                    if tidx < K:
                        sGammas[tidx, 0] = fast_exp(Float32(mGamma[bos // C + n + c, h, tidx]))
                else:
                    if tidx < C:
                        sGammas[tidx, 0] = gamma_row(mGamma, r0, rows_left, h, tidx)
            sQ, sK, sW = sQs[None, None, buf], sKs[None, None, buf], sWs[None, None, buf]
            sDo, sGamma = sDos[None, None, buf], sGammas[None, buf]
            acc_to_smem(mma_s, tidx, d_state, transposed(sDs), io)
            cute.arch.cp_async_wait_group(nbuf - 1)
            async_visible()
            cute.arch.sync_threads()
            if const_expr(stores):  # the gradient of the state leaving chunk c, from its io copy
                chunk_slot = bos // C + n + c
                store_rows(
                    s2g_k, tidx, sDs, cute.local_tile(mDh[chunk_slot, h, None, None], (BV, K), (vb, 0)), BV
                )
            if const_expr(self.l2norm and not kda):
                l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                async_visible()
                cute.arch.sync_threads()
            if const_expr(kda):
                # dv_new = scale P^T dO + kd dS^T (kd = k exp(last - gamma)), dO scaled beside it
                passed, crd_v = zeroed_acc(mma_v, tidx, C, BV)
                wg_gemm(mma_v, tidx, passed, sK, sDs)
                scaled_rows(sDo, sDd, lambda r: scale, tidx, C, BV)
                async_visible()
                cute.arch.sync_threads()
                through, _ = zeroed_acc(mma_t, tidx, C, BV)
                wg_gemm(mma_t, tidx, through, transposed(sPs[None, None, buf]), transposed(sDo))
                cute.nvgpu.warpgroup.wait_group(0)
                ndv_part = mma_v.get_slice(tidx).partition_C(sNdv)
                dvn_part = mma_v.get_slice(tidx).partition_C(sDvn)
                for e in cutlass.range_constexpr(cute.size(through)):
                    val = through[e] * scale + passed[e]
                    dvn_part[e] = val.to(io)
                    ndv_part[e] = (-val).to(io)
                async_visible()
                cute.arch.sync_threads()
                store_rows(s2g_v, tidx, sDvn, chunk_rows(mDvnew, r0, h, BV, vb), rows_left)

                # dS^T = diag(exp(last)) dS^T - w^T dv_new + qd^T (scale dO)
                for e in cutlass.range_constexpr(cute.size(d_state)):
                    d_state[e] = d_state[e] * sGamma[crd_s[e][0]]
                wg_gemm(mma_s, tidx, d_state, transposed(sW), transposed(sNdv))
                wg_gemm(mma_s, tidx, d_state, transposed(sQ), transposed(sDd))
                cute.nvgpu.warpgroup.wait_group(0)
                if const_expr(nbuf == 2):
                    if tidx < K:
                        sGammas[tidx, 1 - buf] = g_next
                cute.arch.sync_threads()  # every read of this chunk's tiles is done
            else:
                last_row = rows_left - 1
                if rows_left > C:
                    last_row = C - 1
                last = sGamma[last_row]

                # q k^T and k dS^T at once; then P = (q k^T) exp(gamma_i - gamma_j) on the causal, real
                # part, and dO scaled by scale exp(gamma) beside it
                scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
                wg_gemm(mma_cc, tidx, scores, sQ, sK)
                passed, crd_v = zeroed_acc(mma_v, tidx, C, BV)
                wg_gemm(mma_v, tidx, passed, sK, sDs)
                cute.nvgpu.warpgroup.wait_group(0)
                p_part = mma_cc.get_slice(tidx).partition_C(sP)
                pa, pb = row_pair(crd_p)
                ga, gb = sGamma[pa], sGamma[pb]
                for e in cutlass.range_constexpr(cute.size(scores)):
                    row, col = crd_p[e][0], crd_p[e][1]
                    g_row = gb
                    if row == pa:
                        g_row = ga
                    val = Float32(0.0)
                    if row >= col and row < rows_left:
                        val = scores[e] * fast_exp(g_row - sGamma[col])
                    p_part[e] = val.to(io)
                scaled_rows(sDo, sDd, lambda r, gam=sGamma: scale * fast_exp(gam[r]), tidx, C, BV)
                async_visible()
                cute.arch.sync_threads()

                # dv_new = scale P^T dO + exp(last - gamma) (k dS^T)
                through, _ = zeroed_acc(mma_t, tidx, C, BV)
                wg_gemm(mma_t, tidx, through, transposed(sP), transposed(sDo))
                cute.nvgpu.warpgroup.wait_group(0)
                ndv_part = mma_v.get_slice(tidx).partition_C(sNdv)
                dvn_part = mma_v.get_slice(tidx).partition_C(sDvn)
                va, vb_row = row_pair(crd_v)
                ta, tb = tail_decay(va, rows_left, last, sGamma), tail_decay(vb_row, rows_left, last, sGamma)
                for e in cutlass.range_constexpr(cute.size(through)):
                    tail = tb
                    if crd_v[e][0] == va:
                        tail = ta
                    val = through[e] * scale + tail * passed[e]
                    if const_expr(stores):
                        dvn_part[e] = val.to(io)
                    ndv_part[e] = (-val).to(io)
                async_visible()
                cute.arch.sync_threads()
                if const_expr(stores):
                    store_rows(s2g_v, tidx, sDvn, chunk_rows(mDvnew, r0, h, BV, vb), rows_left)

                # dS^T = exp(last) dS^T - w^T dv_new + q^T (scale exp(gamma) dO)
                decay = fast_exp(last)
                for e in cutlass.range_constexpr(cute.size(d_state)):
                    d_state[e] = d_state[e] * decay
                wg_gemm(mma_s, tidx, d_state, transposed(sW), transposed(sNdv))
                wg_gemm(mma_s, tidx, d_state, transposed(sQ), transposed(sDd))
                cute.nvgpu.warpgroup.wait_group(0)
                if const_expr(nbuf == 2):
                    if tidx < C:
                        sGammas[tidx, 1 - buf] = g_next
                cute.arch.sync_threads()  # every read of this chunk's tiles is done

        if const_expr(phase != 0):
            # a CTA with no chunk (an empty sequence) leaves the prologue's prefetch pending: every
            # cp.async completes before the CTA exits
            cute.arch.cp_async_wait_group(0)
        if const_expr(phase == 1):  # the segment's G
            dst = thr_s.partition_C(
                transposed(cute.local_tile(mSegMB[slot, h, None, None], (BV, K), (vb, 0)))
            )
            for e in cutlass.range_constexpr(cute.size(d_state)):
                dst[e] = d_state[e]
        elif const_expr(self.has_h0):
            if seg == 0:
                dst = thr_s.partition_C(transposed(cute.local_tile(mDh0[n, h, None, None], (BV, K), (vb, 0))))
                for e in cutlass.range_constexpr(cute.size(d_state)):
                    dst[e] = d_state[e].to(mDh0.element_type)
