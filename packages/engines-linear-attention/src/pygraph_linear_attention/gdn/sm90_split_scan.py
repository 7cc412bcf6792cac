"""The gdn_sm90 forward's scans outside the fused warpgroup ones: `SplitScanKernels.scan` on
mma.sync, with each chunk's output or (with SPLIT) its entering state and v_new, and
`SplitScanKernels.scan_wg`, the split scan on warpgroup MMAs with the state carried transposed (also
KDA's and GDN-2's, ``channel_decay``). A mixin of `gdn.sm90_fwd.GdnSm90Fwd` (its fields: dims,
dtypes, options, stages)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    THREADS,
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
    row_major,
    row_pair,
    segment_span,
    smem_gemm,
    store_rows,
    tail_decay,
    transposed,
    warp_mma,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_output import chunk_output


class SplitScanKernels:
    """The scans of `GdnSm90Fwd` other than the fused warpgroup ones (a mixin: they read its
    configuration)."""

    def launch_scan(
        self, mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, sequences, heads_out, k_group, scale,
        stream,
    ):  # fmt: skip
        """The state scan's launch: `scan_wg` for the split scan with WGMMA, else `scan` (``scale``:
        the output's, which only the fused `scan` computes)."""
        grid = [sequences, heads_out, self.V // self.BV]
        if const_expr(self.split and self.wgmma):
            self.scan_wg(mK, mW, mU, mGamma, mCu, mH0, mHt, mHs, mVnew, k_group).launch(
                grid=grid, block=[THREADS, 1, 1], stream=stream
            )
        else:
            self.scan(mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, k_group, scale).launch(
                grid=grid, block=[THREADS, 1, 1], stream=stream
            )

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
        scale: Float32,
    ):
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        hk = h // k_group
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos

        smem = utils.SmemAllocator()
        nbuf = self.stages  # 2: chunk c + 1's tiles and gamma load while chunk c computes
        k_layout, k_swz = row_major(C, K, nbuf)
        u_layout, u_swz = row_major(C, BV, nbuf)
        v_layout, v_swz = row_major(C, BV)
        s_layout, s_swz = row_major(BV, K)
        p_layout, p_swz = row_major(C, C)
        sQs = None if const_expr(self.split) else smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sWs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sUs = smem.allocate_tensor(io, u_layout, 1024, u_swz)
        sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sCar = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        sP = None if const_expr(self.split) else smem.allocate_tensor(io, p_layout, 1024, p_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, nbuf), stride=(1, C)), 16)

        mma_state = warp_mma(io, BV, K)  # S [BV, K]
        mma_cv = warp_mma(io, C, BV)  # v_new, the output
        mma_cc = warp_mma(io, C, C)  # q k^T
        state, crd_s = zeroed_acc(mma_state, tidx, BV, K)
        thr_s = mma_state.get_slice(tidx)
        if const_expr(self.has_h0):
            src = thr_s.partition_C(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0)))
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = src[i].to(Float32)
        g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, BV)
        tiles = (mQ, mK, mW, mU, hk, h, vb, K, BV)
        chunks = cute.ceil_div(length, C)
        if const_expr(nbuf == 2):  # the prologue: chunk 0 into buffer 0
            load_chunk(g2s_k, g2s_v, tidx, tiles, bos, length, (sQs, sKs, sWs, sUs), 0, not self.split)
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
                    load_chunk(
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
                    g_next = gamma_row(mGamma, r0 + C, rows_left - C, h, tidx)
            else:
                load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, (sQs, sKs, sWs, sUs), 0, not self.split)
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    sGammas[tidx, 0] = gamma_row(mGamma, r0, rows_left, h, tidx)
            sQ = None if const_expr(self.split) else sQs[None, None, buf]
            sK, sW = sKs[None, None, buf], sWs[None, None, buf]
            sU, sGamma = sUs[None, None, buf], sGammas[None, buf]
            acc_to_smem(mma_state, tidx, state, sS, io)
            cute.arch.cp_async_wait_group(nbuf - 1)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if const_expr(not self.split):
                    l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            if const_expr(self.split):  # the state entering this chunk, for the output kernel
                slot = bos // C + n + c
                gHs = cute.local_tile(mHs[slot, h, None, None], (BV, K), (vb, 0))
                acc_to_gmem(mma_state, tidx, state, crd_s, gHs, BV, io)

            # v_new = u - w S^T; the carried rows (v_new exp(last - gamma)) beside it
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]
            v_new, crd_v = zeroed_acc(mma_cv, tidx, C, BV)
            smem_gemm(mma_cv, tidx, v_new, sW, sS, False, False, io)
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
                    carried = val * fast_exp(last - sGamma[row])
                car_part[i] = carried.to(io)

            if const_expr(self.split):
                gVn = chunk_rows(mVnew, r0, h, BV, vb)
                acc_to_gmem(mma_cv, tidx, v_new, crd_v, gVn, rows_left, io)
                cute.arch.sync_threads()  # sCar complete: the state update reads every warp's rows
            else:  # (its barrier before P v_new also completes sCar)
                gO = chunk_rows(mO, r0, h, BV, vb)
                chunk_output(mma_cc, mma_cv, tidx, sQ, sK, sS, sVn, sP, sGamma, gO, rows_left, io, scale)

            # S = exp(last) S + carried^T k
            decay = fast_exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            smem_gemm(mma_state, tidx, state, transposed(sCar), transposed(sK), True, True, io)
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
        mSegMB: cute.Tensor = None,
        mSegST: cute.Tensor = None,
        mCon: cute.Tensor = None,
        sequences=None,  # Int32 (phases 1 and 2; unannotated, so phase 0's launches may leave it out)
        search_steps=None,  # Int32 (phases 1 and 2)
        phase: cutlass.Constexpr = 0,
    ):
        """The split scan (SPLIT with WGMMA) on warpgroup MMAs: the state carried transposed, S^T
        [K, BV] in fp32 wgmma accumulators; per chunk ``v_new = w S^T`` (A = w, B = the state's io
        copy, both K-major) and ``S^T = exp(last) S^T + k^T carried`` (A = k and B = carried, both
        read MN-major from their row-major tiles). Stores each chunk's entering state and v_new, as
        `scan` does with split.

        With ``channel_decay`` (KDA, GDN-2): ``mK`` is prepare's ``k exp(last - gamma)`` per output
        head (``k_group`` 1) and ``mGamma`` the chunks' last gamma [slots, HO, K]; the update is
        ``S^T = diag(exp(last)) S^T + kd^T v_new`` (rows past the sequence: w, u and kd load as 0, so
        v_new is 0 there).

        ``phase`` (gdn's backward with SEGMENT, `gdn.sm90_bwd`): 0 as above, grid sequences x heads x
        value blocks; 1: segment slots x heads x (V + K) / BV blocks, each segment's B rows (value
        blocks, every segment but a sequence's last) and M rows (identity blocks, every segment: the
        gradient's combine reads the last one's too) into ``mSegMB``, over the warmup's chunks
        (`_warmup_start`); 2: segment slots x heads x value blocks, each segment from the state
        entering it (``mSegST``, or the initial state for the first), storing as phase 0 does."""
        V, BV, C = self.V, self.BV, CHUNK
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, vb = cute.arch.block_idx()
        if const_expr(phase == 0):
            n = slot
            bos = Int32(mCu[n])
            length = Int32(mCu[n + 1]) - bos
            self._split_chunks(
                mK, mW, mU, mGamma, mH0, mHt, mHs, mVnew, mSegMB, mSegST, tidx, slot, n, h, vb, k_group, bos,
                length, 0, 0, cute.ceil_div(length, C), 1, phase,
            )  # fmt: skip
        else:
            n, bos, length, seg, c_begin, c_end, is_last, starts = segment_span(
                mCu, slot, sequences, search_steps, self.segment
            )
            m_rows = Int32(vb >= V // BV)
            active = starts * (1 - is_last * (1 - m_rows))  # phase 1: no B rows for a sequence's last
            if const_expr(phase == 2):
                active = Int32(starts + Int32(seg == 0) > 0)  # an empty sequence: its final state
            if active > 0:
                truncated = Int32(0)
                if const_expr(phase == 1):
                    c_begin, truncated = self._warmup_start(
                        mGamma, mCon, tidx, n, h, bos, c_begin, c_end, length=length
                    )
                if truncated * m_rows > 0:
                    self._store_rows_mb(mSegMB, tidx, slot, h, vb)  # M's rows of a decayed segment: zeros
                else:
                    self._split_chunks(
                        mK, mW, mU, mGamma, mH0, mHt, mHs, mVnew, mSegMB, mSegST, tidx, slot, n, h, vb,
                        k_group, bos, length, seg, c_begin, c_end, is_last, phase,
                    )  # fmt: skip

    @cute.jit
    def _split_chunks(
        self, mK, mW, mU, mGamma, mH0, mHt, mHs, mVnew, mSegMB, mSegST, tidx, slot, n, h, vb, k_group, bos,
        length, seg, c_begin, c_end, is_last, phase: cutlass.Constexpr,
    ):  # fmt: skip
        """`scan_wg`'s work for one CTA with something to do: chunks ``c_begin`` to ``c_end`` of
        sequence ``n`` (from token ``bos``), segment ``seg``. Phase 0 (KDA's and GDN-2's scans too)
        passes ``seg``, ``c_begin`` and ``is_last`` as Python ints: its offsets fold at trace time."""
        K, V, BV, C, io = self.K, self.V, self.BV, CHUNK, self.io
        hk = h // k_group
        stores = phase != 1
        u_rows = 1  # phase 1's identity blocks: 0 (u = 0: u's rows load as zeros, from block 0)
        if const_expr(phase == 1):
            u_rows = Int32(vb < V // BV)

        smem = utils.SmemAllocator()
        nbuf = self.stages
        k_layout, k_swz = row_major(C, K, nbuf)
        u_layout, u_swz = row_major(C, BV, nbuf)
        v_layout, v_swz = row_major(C, BV)
        s_layout, s_swz = row_major(BV, K)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sWs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sUs = smem.allocate_tensor(io, u_layout, 1024, u_swz)
        sCar = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sVn = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sS = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        # gamma per row, or (channel_decay) exp(last gamma) per key channel
        gates = K if const_expr(self.channel_decay) else C
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((gates, nbuf), stride=(1, gates)), 16)
        s2g_k, s2g_v = cta_s2g(io, K), cta_s2g(io, BV)

        mma_v = wg_mma(io, BV, False, False)  # v_new [C, BV] = w [C, K] . S [BV, K]^T
        mma_s = wg_mma(io, BV, True, True)  # S^T [K, BV] += k^T [K, C] . carried^T [BV, C]^T
        state, crd_s = zeroed_acc(mma_s, tidx, K, BV)
        thr_s = mma_s.get_slice(tidx)
        self._entering_state(state, crd_s, thr_s, mSegST, mH0, slot, n, h, vb, seg, u_rows, phase)
        g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, BV)
        tiles = (None, mK, mW, mU, hk, h, vb * u_rows, K, BV)
        buffers = (None, sKs, sWs, sUs)
        # (channel_decay: chunk c's slot is bos // C + n + c, prepare's; reading the slot one past a
        # sequence's chunks, or an empty sequence's, stays inside the [slots, HO, K] gates and is unused)
        first_slot = bos // C + n  # chunk c's slot: first_slot + c
        if const_expr(nbuf == 2):
            r_first = bos + c_begin * C
            rows_first = length - c_begin * C
            load_chunk(g2s_k, g2s_v, tidx, tiles, r_first, rows_first, buffers, 0, False, rows_first * u_rows)
            cute.arch.cp_async_commit_group()
            if tidx < gates:
                sGammas[tidx, 0] = self._scan_gate(mGamma, r_first, rows_first, first_slot + c_begin, h, tidx)

        for c in cutlass.range(c_begin, c_end, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = (c - c_begin) % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                if c + 1 < c_end:
                    load_chunk(
                        g2s_k,
                        g2s_v,
                        tidx,
                        tiles,
                        r0 + C,
                        rows_left - C,
                        buffers,
                        1 - buf,
                        False,
                        (rows_left - C) * u_rows,
                    )
                cute.arch.cp_async_commit_group()
                if tidx < gates:
                    g_next = self._scan_gate(mGamma, r0 + C, rows_left - C, first_slot + c + 1, h, tidx)
            else:
                load_chunk(g2s_k, g2s_v, tidx, tiles, r0, rows_left, buffers, 0, False, rows_left * u_rows)
                cute.arch.cp_async_commit_group()
                if tidx < gates:
                    sGammas[tidx, 0] = self._scan_gate(mGamma, r0, rows_left, first_slot + c, h, tidx)
            sK, sW = sKs[None, None, buf], sWs[None, None, buf]
            sU, sGamma = sUs[None, None, buf], sGammas[None, buf]
            # the entering state: its io copy for the product, and from it to the workspace (`output`)
            acc_to_smem(mma_s, tidx, state, transposed(sS), io)
            cute.arch.cp_async_wait_group(nbuf - 1)
            async_visible()
            cute.arch.sync_threads()
            if const_expr(stores):
                store_rows(
                    s2g_k, tidx, sS, cute.local_tile(mHs[first_slot + c, h, None, None], (BV, K), (vb, 0)), BV
                )
            if const_expr(self.l2norm and not self.channel_decay):
                l2_normalize_rows(sK, tidx, K)
                async_visible()
                cute.arch.sync_threads()

            # v_new = u - w S^T; the carried rows (v_new exp(last - gamma)) beside it
            if const_expr(not self.channel_decay):
                last_row = rows_left - 1
                if rows_left > C:
                    last_row = C - 1
                last = sGamma[last_row]
            v_new, crd_v = zeroed_acc(mma_v, tidx, C, BV)
            wg_gemm(mma_v, tidx, v_new, sW, sS)
            cute.nvgpu.warpgroup.wait_group(0)
            u_part = mma_v.get_slice(tidx).partition_C(sU)
            if const_expr(self.channel_decay):
                vn_part = mma_v.get_slice(tidx).partition_C(sVn)
                for i in cutlass.range_constexpr(cute.size(v_new)):
                    vn_part[i] = (u_part[i].to(Float32) - v_new[i]).to(io)
                carried = sVn  # kd holds the decay to the chunk's end
            else:
                car_part = mma_v.get_slice(tidx).partition_C(sCar)
                vn_part = mma_v.get_slice(tidx).partition_C(sVn)
                ra, rb = row_pair(crd_v)
                ta, tb = tail_decay(ra, rows_left, last, sGamma), tail_decay(rb, rows_left, last, sGamma)
                for i in cutlass.range_constexpr(cute.size(v_new)):
                    val = u_part[i].to(Float32) - v_new[i]
                    if const_expr(stores):
                        vn_part[i] = val.to(io)
                    tail = tb
                    if crd_v[i][0] == ra:
                        tail = ta
                    car_part[i] = (val * tail).to(io)
                carried = sCar
            async_visible()
            cute.arch.sync_threads()  # sCar and sVn complete
            if const_expr(stores):
                store_rows(s2g_v, tidx, sVn, chunk_rows(mVnew, r0, h, BV, vb), rows_left)

            # S^T = exp(last) S^T + k^T carried (channel_decay: row by row, exp(last) per channel)
            if const_expr(self.channel_decay):
                for i in cutlass.range_constexpr(cute.size(state)):
                    state[i] = state[i] * sGamma[crd_s[i][0]]
            else:
                decay = fast_exp(last)
                for i in cutlass.range_constexpr(cute.size(state)):
                    state[i] = state[i] * decay
            wg_gemm(mma_s, tidx, state, transposed(sK), transposed(carried))
            cute.nvgpu.warpgroup.wait_group(0)
            if const_expr(nbuf == 2):
                if tidx < gates:
                    sGammas[tidx, 1 - buf] = g_next
            cute.arch.sync_threads()  # every read of this chunk's tiles is done

        if const_expr(phase != 0):
            # a CTA with no chunk (an empty sequence) leaves the prologue's prefetch pending: every
            # cp.async completes before the CTA exits
            cute.arch.cp_async_wait_group(0)
        if const_expr(phase == 1):  # the segment's B rows or M rows
            dst = thr_s.partition_C(
                transposed(cute.local_tile(mSegMB[slot, h, None, None], (BV, K), (vb, 0)))
            )
            for i in cutlass.range_constexpr(cute.size(state)):
                dst[i] = state[i]
        elif const_expr(self.store_ht):
            if is_last > 0:  # (phase 0: a Python 1, no branch)
                dst = thr_s.partition_C(transposed(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0))))
                for i in cutlass.range_constexpr(cute.size(state)):
                    dst[i] = state[i].to(self.ht_t)

    def _scan_gate(self, mGamma, r0, rows_left, slot, h, tidx):
        """What `scan_wg` keeps per chunk for thread ``tidx`` (trace time): gamma of the chunk's row
        ``tidx`` (0 past its rows), or with ``channel_decay`` exp(the chunk's last gamma) of key
        channel ``tidx``."""
        if self.channel_decay:
            return fast_exp(Float32(mGamma[slot, h, tidx]))
        return gamma_row(mGamma, r0, rows_left, h, tidx)
