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

With SEGMENT (``segment`` chunks a segment) a long sequence's chunks are split into segments scanned
at once, exactly: the chunk step is affine in S (``S' = S M_c + B_c``, each row of S on its own), so
a segment maps its entering state S to ``S M + B``. Phase 1 (`scan_fused_wg` at ``phase`` 1, every
segment but each sequence's last) runs the step over the segment from zero rows with the chunks' v
(B's rows) and from the identity's rows with v = 0 (M's rows: K virtual value rows); the
`segment_combine` kernel walks each sequence's segments, ``S_next = S M + B`` in fp32 (one step a
segment, not one a chunk), to the state entering each; phase 2 runs the fused step over every
segment from its entering state. About twice the state arithmetic of one pass (V + K rows for
phase 1, then V), spread over segments x heads x blocks CTAs instead of sequences x heads x blocks.

The warmup: a segment's M shrinks with its decay. Where ``beta ||k||^2`` lies in [0, 2] (unit keys
and betas in [0, 2]), a token's step ``S -> S exp(g) (I - beta k k^T)`` has spectral norm at most
exp(g), so the last W chunks' M has norm at most exp(their summed log decay). Prepare stores each
chunk's largest ``beta ||k||^2``; phase 1 walks each segment back from its end (`_warmup_start`).
Where the summed log decay falls below ``WARMUP_LOG_DECAY`` (-16: exp(-16) = 1.1e-7, under twice
fp32's unit roundoff) within the segment, every chunk walked having its ``beta ||k||^2`` in range
and no positive log decay, the segment's M is taken as zero (its identity blocks store zeros at
once) and its B is scanned from zero over those last W chunks only: the state entering the next
segment is then within exp(-16) of the exact one relative to the state W chunks before, which the
state's own fp32 arithmetic does not resolve. Otherwise (weak decay, a chunk out of range) phase 1
runs the whole segment from the identity as before. With decaying gates (logsigmoid gates: W of 1
to about 14 chunks) phase 1 costs W chunks of V rows instead of the segment's chunks of V + K rows.

A mixin of `gdn.sm90_fwd.GdnSm90Fwd` (its fields: dims, dtypes, options, stages, segment).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.host import WARMUP_LOG_DECAY
from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    THREADS,
    acc_to_smem_packed,
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
    scale_row_pair,
    segment_span,
    store_rows,
    tail_decay,
    transposed,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_output import decayed_scores


def _load_fused_chunk(copies, tidx, tiles, r0, rows_left, buffers, buf, with_q, v_rows, mP=None, sPs=None):
    """cp.async one chunk's q (unless not ``with_q``), k (head hk), v (head hv, value block vb) and Tb
    (head h) from token ``r0`` into stage ``buf``, rows at or past ``rows_left`` zero-filled (v's
    rows at or past ``rows_left * v_rows``: all of them for phase 1's identity rows; no commit)."""
    g2s_k, g2s_v, g2s_t = copies
    mQ, mK, mV, mTb, hk, hv, h, vb, K, BV = tiles
    sQs, sKs, sVs, sTbs = buffers
    if with_q:
        load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQs[None, None, buf], rows_left)
    load_rows(g2s_k, tidx, chunk_rows(mK, r0, hk, K), sKs[None, None, buf], rows_left)
    load_rows(g2s_v, tidx, chunk_rows(mV, r0, hv, BV, vb * v_rows), sVs[None, None, buf], rows_left * v_rows)
    load_rows(g2s_t, tidx, chunk_rows(mTb, r0, h, CHUNK), sTbs[None, None, buf], rows_left)
    if mP is not None:  # prepare's P (stored_p)
        load_rows(g2s_t, tidx, chunk_rows(mP, r0, h, CHUNK), sPs[None, None, buf], rows_left)


class FusedScanKernels:
    """The fused scan of `GdnSm90Fwd` and its segments' combine (a mixin: they read its configuration)."""

    @cute.kernel
    def scan_fused_wg(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mTb: cute.Tensor,
        mP: cute.Tensor,  # [T, HO, 64] io: prepare's P (read with stored_p)
        mGamma: cute.Tensor,
        mCu: cute.Tensor,
        mH0: cute.Tensor,
        mO: cute.Tensor,
        mHt: cute.Tensor,
        mSegMB: cute.Tensor,  # [segment slots, HO, V + K, K] fp32: each segment's B rows, then M's
        mSegST: cute.Tensor,  # [segment slots, HO, V, K] fp32: the state entering each segment
        mCon: cute.Tensor,  # [slots, HO] fp32: each chunk's largest beta ||k||^2, from prepare
        k_group: Int32,
        v_group: Int32,
        sequences: Int32,
        search_steps: Int32,
        scale: Float32,  # the output's (phase 1 has none)
        phase: cutlass.Constexpr,
    ):
        """One warpgroup a CTA (the module's docstring has the step). ``phase`` 0: grid sequences x
        output heads x value blocks of BV, every chunk of the sequence; 1: segment slots x heads x
        (V + K) / BV blocks, a segment's B (value blocks) or M (identity blocks) into ``mSegMB``; 2:
        segment slots x heads x value blocks, a segment from the state entering it (``mSegST``, or
        the initial state for the first), its output and, for the last, the final state. STAGES 2
        loads chunk c + 1's tiles while chunk c computes."""
        C = CHUNK
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, vb = cute.arch.block_idx()
        if const_expr(phase == 0):
            bos = Int32(mCu[slot])
            length = Int32(mCu[slot + 1]) - bos
            self._fused_chunks(
                mQ, mK, mV, mTb, mP, mGamma, mH0, mO, mHt, mSegMB, mSegST, tidx, slot, slot, h, vb, k_group,
                v_group, bos, length, Int32(0), Int32(0), cute.ceil_div(length, C), Int32(1), scale, phase,
            )  # fmt: skip
        else:
            n, bos, length, seg, c_begin, c_end, is_last, starts = segment_span(
                mCu, slot, sequences, search_steps, self.segment
            )
            active = starts * (1 - is_last)  # phase 1: every segment but the sequence's last
            if const_expr(phase == 2):
                active = Int32(starts + Int32(seg == 0) > 0)  # an empty sequence: its final state
            if active > 0:
                truncated = Int32(0)
                if const_expr(phase == 1):
                    c_start, truncated = self._warmup_start(mGamma, mCon, tidx, n, h, bos, c_begin, c_end)
                    c_begin = c_start
                if truncated * Int32(vb >= self.V // self.BV) > 0:
                    # M's rows of a segment whose decay dropped it: zeros, no scan
                    self._store_rows_mb(mSegMB, tidx, slot, h, vb)
                else:
                    self._fused_chunks(
                        mQ, mK, mV, mTb, mP, mGamma, mH0, mO, mHt, mSegMB, mSegST, tidx, slot, n, h, vb,
                        k_group, v_group, bos, length, seg, c_begin, c_end, is_last, scale, phase,
                    )  # fmt: skip

    def segment_tensors(self, seg_mb_ptr, seg_st_ptr, con_ptr, tokens, sequences, heads_out):
        """(segment slots, mSegMB, mSegST, mCon) over the workspace's segment rows (host side, traced
        by the forward's and the backward's calls): each segment's B and M rows [slots, HO, V + K, K]
        and entering state [slots, HO, V, K], fp32, and each chunk's largest beta ||k||^2 [chunk
        slots, HO] (the warmup's test); the slots as `gdn.sm90_host.segment_slots` counts them."""
        K, V, C = self.K, self.V, CHUNK
        seg_slots = tokens // (C * max(self.segment, 1)) + sequences + 1
        mSegMB = cute.make_tensor(
            seg_mb_ptr,
            cute.make_layout(
                (seg_slots, heads_out, V + K, K),
                stride=(cute.assume(heads_out * (V + K) * K, divby=4), (V + K) * K, K, 1),  # 16-byte rows
            ),
        )
        mSegST = cute.make_tensor(
            seg_st_ptr,
            cute.make_layout((seg_slots, heads_out, V, K), stride=(heads_out * V * K, V * K, K, 1)),
        )
        slots = tokens // C + sequences + 1
        mCon = cute.make_tensor(con_ptr, cute.make_layout((slots, heads_out), stride=(heads_out, 1)))
        return seg_slots, mSegMB, mSegST, mCon

    @cute.jit
    def _warmup_start(
        self,
        mGamma,
        mCon,
        tidx,
        n,
        h,
        bos,
        c_begin,
        c_end,
        length=None,
        from_start: cutlass.Constexpr = False,
    ):
        """(first chunk, truncated) of phase 1's scan of sequence ``n``'s segment of chunks
        ``c_begin`` to ``c_end`` (all full, or with ``length`` the sequence's, the last one may be
        partial): thread t takes chunk ``c_end - 1 - t`` (a segment has at most 64, the CTA 128
        threads), its summed log decay (gamma of its last row) and whether its largest beta ||k||^2
        (prepare's) is at most 2 and its log decay at most 0; a CTA-wide scan over t accumulates both
        from the segment's end. The first t whose running sum is below `WARMUP_LOG_DECAY`, every chunk
        up to it in range, gives the warmup's first chunk and ``truncated`` 1; none: (``c_begin``, 0).

        With ``from_start`` (the backward's gradient, which decays toward the segment's start) thread t
        takes chunk ``c_begin + t`` and the answer is (the chunk past the warmup's last, truncated):
        the gradient leaving the segment is scanned over ``c_begin`` up to it; none: (``c_end``, 0)."""
        C = CHUNK
        count = c_end - c_begin
        c = c_end - 1 - tidx
        if const_expr(from_start):
            c = c_begin + tidx
        decay = Float32(0.0)
        ok = Int32(1)
        if tidx < count:
            row = Int32(C - 1)
            if const_expr(length is not None):
                if length - c * C < C:
                    row = length - c * C - 1
            decay = Float32(mGamma[bos + c * C + row, h])
            if Float32(mCon[bos // C + n + c, h]) > 2.0:
                ok = Int32(0)
            if decay > 0.0:  # a growing gate: the bound fails (and the running sum would not fall)
                ok = Int32(0)
        # inclusive scans over the CTA: the summed decay, and the count of out-of-range chunks so far
        bad = 1 - ok
        lane, warp = tidx % 32, tidx // 32
        for off in cutlass.range_constexpr(5):
            up_d = cute.arch.shuffle_sync_up(decay, 1 << off, mask_and_clamp=0)
            up_b = cute.arch.shuffle_sync_up(bad, 1 << off, mask_and_clamp=0)
            if lane >= (1 << off):
                decay = decay + up_d
                bad = bad + up_b
        smem = utils.SmemAllocator()
        sWarp = smem.allocate_tensor(Float32, cute.make_layout((8,)), 16)
        sFirst = smem.allocate_tensor(Int32, cute.make_layout((4,)), 16)
        if lane == 31:
            sWarp[warp] = decay
            sWarp[4 + warp] = Float32(bad)
        if tidx == 0:
            sFirst[0] = Int32(0)
            sFirst[1] = Int32(1)
        cute.arch.sync_threads()
        for w in cutlass.range_constexpr(3):
            if warp > w:
                decay = decay + sWarp[w]
                bad = bad + Int32(sWarp[4 + w])
        # up to the first chunk out of range the running sum only falls (its log decays are <= 0), so
        # the first t below the threshold there is the count of those in range and not below it
        above = Int32(tidx < count) * Int32(bad == 0) * Int32(decay >= WARMUP_LOG_DECAY)
        for off in cutlass.range_constexpr(5):
            above = above + cute.arch.shuffle_sync_bfly(above, 1 << off)
        if lane == 0:
            cute.arch.atomic_add(sFirst.iterator, above)
        cute.arch.sync_threads()
        first = sFirst[0]
        if tidx == first:
            sFirst[1] = Int32(bad > 0)
        cute.arch.sync_threads()
        truncated = Int32(first < count) * Int32(sFirst[1] == 0)
        # one return statement: with a second (under a const_expr branch) the compile of this kernel
        # succeeded but later compiles of other configurations in the same process failed in the DSL's
        # preprocessing (8 gdn_sm90_bwd configurations in a row, CuTe DSL 4.8.1)
        c_start = c_end if const_expr(from_start) else c_begin  # (with from_start: the chunk past the last)
        if truncated > 0:
            if const_expr(from_start):
                c_start = c_begin + first + 1
            else:
                c_start = c_end - 1 - first
        return c_start, truncated

    @cute.jit
    def _entering_state(
        self, state, crd_s, thr_s, mSegST, mH0, slot, n, h, vb, seg, value_rows, phase: cutlass.Constexpr
    ):
        """A scan's first state, in place in ``state`` (S^T [K, BV] in fp32 accumulators, zero): phase
        1's identity rows where ``value_rows`` is 0 (virtual value row vb BV - V + col is e_row; B's
        rows stay zero); phase 2's state entering the segment (from the combine) past a sequence's
        first; the initial state of a sequence's first segment (phases 0 and 2)."""
        K, V, BV = self.K, self.V, self.BV
        if const_expr(phase == 1):
            if value_rows == 0:
                for i in cutlass.range_constexpr(cute.size(state)):
                    state[i] = Float32(crd_s[i][0] == crd_s[i][1] + vb * BV - V)
        else:
            if const_expr(phase == 2):
                if seg > 0:
                    src = thr_s.partition_C(
                        transposed(cute.local_tile(mSegST[slot, h, None, None], (BV, K), (vb, 0)))
                    )
                    for i in cutlass.range_constexpr(cute.size(state)):
                        state[i] = src[i]
            if const_expr(self.has_h0):
                if seg == 0:
                    src = thr_s.partition_C(
                        transposed(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0)))
                    )
                    for i in cutlass.range_constexpr(cute.size(state)):
                        state[i] = src[i].to(Float32)

    @cute.jit
    def _store_rows_mb(self, mSegMB, tidx, slot, h, vb):
        """Zeros into the segment's rows of ``mSegMB`` of value block ``vb`` (BV rows of K)."""
        K, BV = self.K, self.BV
        dst = cute.local_tile(mSegMB[slot, h, None, None], (BV, K), (vb, 0))
        for e in cutlass.range(BV * K // THREADS, unroll=8):
            flat = tidx + e * THREADS
            dst[flat // K, flat % K] = Float32(0.0)

    @cute.jit
    def _fused_chunks(
        self, mQ, mK, mV, mTb, mP, mGamma, mH0, mO, mHt, mSegMB, mSegST, tidx, slot, n, h, vb, k_group,
        v_group, bos, length, seg, c_begin, c_end, is_last, scale, phase: cutlass.Constexpr,
    ):  # fmt: skip
        """`scan_fused_wg`'s work for one CTA with something to do: chunks ``c_begin`` to ``c_end``
        of sequence ``n`` (from token ``bos``), segment ``seg``."""
        K, V, BV, C, io = self.K, self.V, self.BV, CHUNK, self.io
        with_out = phase != 1
        hk, hv = h // k_group, h // v_group
        value_rows = Int32(1)  # phase 1's identity blocks: 0 (v = 0)
        if const_expr(phase == 1):
            value_rows = Int32(vb < V // BV)

        smem = utils.SmemAllocator()
        nbuf = self.stages
        k_layout, k_swz = row_major(C, K, nbuf)
        v_layout, v_swz = row_major(C, BV, nbuf)
        t_layout, t_swz = row_major(C, C, nbuf)
        x_layout, x_swz = row_major(C, BV)
        s_layout, s_swz = row_major(K, BV)  # S^T, as the accumulators hold it: packed stores
        p_layout, p_swz = row_major(C, C)
        sQs = smem.allocate_tensor(io, k_layout, 1024, k_swz) if const_expr(with_out) else None
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sVs = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sTbs = smem.allocate_tensor(io, t_layout, 1024, t_swz)
        sX = smem.allocate_tensor(io, x_layout, 1024, x_swz)  # x, then (once Tb x is done) the output
        sVn = smem.allocate_tensor(io, x_layout, 1024, x_swz) if const_expr(with_out) else None
        sCar = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sST = smem.allocate_tensor(io, s_layout, 1024, s_swz)
        sS = transposed(sST)  # S [BV, K], read MN-major (BV contiguous) as the products' B
        stored = self.stored_p and with_out  # P from prepare, a stage per buffer
        sP = None
        sPs = None
        if const_expr(stored):
            sPs = smem.allocate_tensor(io, t_layout, 1024, t_swz)
        elif const_expr(with_out):
            sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, nbuf), stride=(1, C)), 16)
        copies = (cta_g2s(io, K), cta_g2s(io, BV), cta_g2s(io, C))
        s2g_v = cta_s2g(io, BV)

        mma_v = wg_mma(io, BV, False, True)  # [C, BV] = (k or q) [C, K] . S [BV, K]^T (S read MN-major)
        mma_cc = wg_mma(io, C, False, False)  # q k^T
        mma_tv = wg_mma(io, BV, False, True)  # [C, BV] = (Tb or P) [C, C] . (x or v_new) [C, BV]
        mma_s = wg_mma(io, BV, True, True)  # S^T [K, BV] += k^T [K, C] . carried [C, BV]
        state, crd_s = zeroed_acc(mma_s, tidx, K, BV)
        thr_s = mma_s.get_slice(tidx)
        self._entering_state(state, crd_s, thr_s, mSegST, mH0, slot, n, h, vb, seg, value_rows, phase)
        tiles = (mQ, mK, mV, mTb, hk, hv, h, vb, K, BV)
        buffers = (sQs, sKs, sVs, sTbs)
        p_tiles = (mP, sPs) if const_expr(stored) else (None, None)
        if const_expr(nbuf == 2):  # the prologue: the first chunk into buffer 0
            r_first = bos + c_begin * C
            _load_fused_chunk(
                copies, tidx, tiles, r_first, length - c_begin * C, buffers, 0, with_out, value_rows, *p_tiles
            )
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGammas[tidx, 0] = gamma_row(mGamma, r_first, length - c_begin * C, h, tidx)

        for c in cutlass.range(c_begin, c_end, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = (c - c_begin) % nbuf
            g_next = Float32(0.0)
            if const_expr(nbuf == 2):
                if c + 1 < c_end:
                    _load_fused_chunk(
                        copies,
                        tidx,
                        tiles,
                        r0 + C,
                        rows_left - C,
                        buffers,
                        1 - buf,
                        with_out,
                        value_rows,
                        *p_tiles,
                    )
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    if c + 1 < c_end:  # (the next segment's first chunk belongs to another CTA)
                        g_next = gamma_row(mGamma, r0 + C, rows_left - C, h, tidx)
            else:
                _load_fused_chunk(
                    copies, tidx, tiles, r0, rows_left, buffers, 0, with_out, value_rows, *p_tiles
                )
                cute.arch.cp_async_commit_group()
                if tidx < C:
                    sGammas[tidx, 0] = gamma_row(mGamma, r0, rows_left, h, tidx)
            sK = sKs[None, None, buf]
            sV, sTb, sGamma = sVs[None, None, buf], sTbs[None, None, buf], sGammas[None, buf]
            sQ = sQs[None, None, buf] if const_expr(with_out) else None
            sPc = sPs[None, None, buf] if const_expr(stored) else sP  # this chunk's P tile
            acc_to_smem_packed(mma_s, tidx, state, sST, io)  # the entering state, io copy
            cute.arch.cp_async_wait_group(nbuf - 1)
            async_visible()
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if const_expr(with_out):
                    l2_normalize_rows(sQ, tidx, K)
                l2_normalize_rows(sK, tidx, K)
                async_visible()
                cute.arch.sync_threads()
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]

            # round 1: k S^T, and (with the output) q S^T and q k^T
            ks, crd_v = zeroed_acc(mma_v, tidx, C, BV)
            wg_gemm(mma_v, tidx, ks, sK, sS)
            out, crd_o = zeroed_acc(mma_v, tidx, C, BV)
            scores, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            if const_expr(with_out):
                wg_gemm(mma_v, tidx, out, sQ, sS)
                if const_expr(not stored):
                    wg_gemm(mma_cc, tidx, scores, sQ, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            ra, rb = row_pair(crd_v)
            ea, eb = fast_exp(sGamma[ra]), fast_exp(sGamma[rb])
            v_frag = cute.make_rmem_tensor_like(ks, io)  # v's pairs read 32 bits at a time
            cute.autovec_copy(mma_v.get_slice(tidx).partition_C(sV), v_frag)
            for i in cutlass.range_constexpr(cute.size(ks)):
                e = eb
                if crd_v[i][0] == ra:
                    e = ea
                ks[i] = v_frag[i].to(Float32) - e * ks[i]
            acc_to_smem_packed(mma_v, tidx, ks, sX, io)  # x
            if const_expr(stored):  # P came from prepare: only exp(gamma) q S^T here
                scale_row_pair(out, crd_o, ra, ea, eb)
            elif const_expr(with_out):
                decayed_scores(tidx, scores, crd_p, mma_cc, sPc, sGamma, out, crd_o, rows_left, io)
            async_visible()
            cute.arch.sync_threads()  # sX (and sP) complete

            # round 2: v_new = Tb x; the carried rows v_new exp(last - gamma) beside it
            v_new, _ = zeroed_acc(mma_tv, tidx, C, BV)
            wg_gemm(mma_tv, tidx, v_new, sTb, transposed(sX))
            cute.nvgpu.warpgroup.wait_group(0)
            if const_expr(with_out):
                acc_to_smem_packed(mma_tv, tidx, v_new, sVn, io)
            ta, tb = tail_decay(ra, rows_left, last, sGamma), tail_decay(rb, rows_left, last, sGamma)
            scale_row_pair(v_new, crd_v, ra, ta, tb)
            acc_to_smem_packed(mma_tv, tidx, v_new, sCar, io)  # the carried rows
            async_visible()
            cute.arch.sync_threads()  # sCar (and sVn) complete

            # round 3: S^T = exp(last) S^T + k^T carried; (with the output) o += P v_new
            if const_expr(with_out):
                wg_gemm(mma_tv, tidx, out, sPc, transposed(sVn))
            decay = fast_exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            wg_gemm(mma_s, tidx, state, transposed(sK), transposed(sCar))
            cute.nvgpu.warpgroup.wait_group(0)
            if const_expr(with_out):
                for i in cutlass.range_constexpr(cute.size(out)):
                    out[i] = out[i] * scale
                acc_to_smem_packed(mma_tv, tidx, out, sX, io)  # sX's last reader (Tb x) is done
            if const_expr(nbuf == 2):
                if tidx < C:
                    sGammas[tidx, 1 - buf] = g_next
            cute.arch.sync_threads()  # the output tile complete; every read of this chunk's tiles done
            if const_expr(with_out):
                store_rows(s2g_v, tidx, sX, chunk_rows(mO, r0, h, BV, vb), rows_left)

        # a CTA with no chunk (an empty sequence, phase 0 or 2) leaves the prologue's prefetch pending:
        # every cp.async completes before the CTA exits
        cute.arch.cp_async_wait_group(0)
        if const_expr(phase == 1):  # the segment's B rows or M rows
            dst = thr_s.partition_C(
                transposed(cute.local_tile(mSegMB[slot, h, None, None], (BV, K), (vb, 0)))
            )
            for i in cutlass.range_constexpr(cute.size(state)):
                dst[i] = state[i]
        elif const_expr(self.store_ht):
            if is_last > 0:
                dst = thr_s.partition_C(transposed(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0))))
                for i in cutlass.range_constexpr(cute.size(state)):
                    dst[i] = state[i].to(self.ht_t)

    @cute.kernel
    def segment_combine(
        self,
        mSegMB: cute.Tensor,
        mSegST: cute.Tensor,
        mCu: cute.Tensor,
        mH0: cute.Tensor,
        has_init: cutlass.Constexpr,
        reverse: cutlass.Constexpr = False,
    ):
        """Grid: sequences x output heads x value blocks of BV. Walks the sequence's segments: S = the
        initial state (or 0), then per segment p but the last ``S = S M_p + B_p`` in fp32, stored as
        the state entering segment p + 1. Thread t carries column t % K of the block's rows
        t // K, t // K + 128 / K, ...; S goes through shared memory (as S^T, so a thread's rows of one
        column are contiguous) for each step's products, and so does M ([K, K] fp32, by 16-byte
        cp.async copies at the step's start): read element by element from L2 each step took 16-23 us
        (H100, the combine of SEGMENT 16 at B1 T32768: 0.50-0.72 ms for 31 steps). A step whose M is
        all zero (a segment the warmup dropped) skips the product: each thread tests its own copies,
        a vote and a word a warp make the CTA's answer.

        ``has_init``: whether ``mH0`` holds a start (the initial state; reversed, d_final_state).
        ``reverse`` (the backward's gradient, `gdn.sm90_bwd`): ``mH0`` is d_final_state, and the walk
        runs from the last segment down to the second, ``D = D M_p^T + G_p`` (G_p in the B rows, from
        `grad_scan_wg` phase 1), stored as the gradient at the end of segment p - 1; a nonzero M is
        transposed from its loaded rows into a [K, K + 1] fp32 tile (the padding keeps both the
        transposing writes and the step's reads free of bank conflicts)."""
        K, V, BV, C = self.K, self.V, self.BV, CHUNK
        tokens_per = C * self.segment
        tidx, _, _ = cute.arch.thread_idx()
        n, h, vb = cute.arch.block_idx()
        bos = Int32(mCu[n])
        length = Int32(mCu[n + 1]) - bos
        segments = cute.ceil_div(length, tokens_per)
        first_slot = bos // tokens_per + n
        col = tidx % K
        step = THREADS // K
        rows = BV // step  # a thread's rows
        row0 = tidx // K
        smem = utils.SmemAllocator()
        sST = smem.allocate_tensor(Float32, cute.make_layout((K, BV), stride=(BV, 1)), 16)
        # M as loaded (row-major); reversed, the product reads M^T from a [K, K + 1] tile (a column of
        # M^T a thread, conflict-free), written from the loaded rows only for a nonzero M
        sM = smem.allocate_tensor(Float32, cute.make_layout((K, K), stride=(K, 1)), 16)
        sMt = sM
        if const_expr(reverse):
            sMt = smem.allocate_tensor(Float32, cute.make_layout((K, K), stride=(K + 1, 1)), 16)
        sAny = smem.allocate_tensor(Int32, cute.make_layout((THREADS // 32,)), 16)  # a word a warp
        atom = cute.make_copy_atom(
            cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
            Float32,
            num_bits_per_copy=128,
        )
        per_row = K // 4  # 16-byte copies along a row of M
        g2s_m = cute.make_tiled_copy_tv(
            atom,
            cute.make_layout((THREADS // per_row, per_row), stride=(per_row, 1)),
            cute.make_layout((1, 4)),
        )
        thr_m = g2s_m.get_slice(tidx)
        mine = thr_m.partition_D(sM)  # the thread's own copies of M: complete for it after its wait
        acc = cute.make_rmem_tensor((rows,), Float32)
        for j in cutlass.range_constexpr(rows):
            acc[j] = Float32(0.0)
            if const_expr(has_init):
                acc[j] = Float32(mH0[n, h, vb * BV + row0 + j * step, col].to(Float32))
        for p in cutlass.range(segments - 1, unroll=1):
            s_slot = first_slot + p
            if const_expr(reverse):
                s_slot = first_slot + segments - 1 - p
            gM = cute.local_tile(cute.domain_offset((V, 0), mSegMB[s_slot, h, None, None]), (K, K), (0, 0))
            cute.copy(g2s_m, thr_m.partition_S(gM), thr_m.partition_D(sM))
            cute.arch.cp_async_commit_group()
            for j in cutlass.range_constexpr(rows):
                sST[col, row0 + j * step] = acc[j]
            for j in cutlass.range_constexpr(rows):
                acc[j] = mSegMB[s_slot, h, vb * BV + row0 + j * step, col]
            cute.arch.cp_async_wait_group(0)
            nonzero = Int32(0)
            for e in cutlass.range(cute.size(mine), unroll=8):
                nonzero = nonzero | Int32(mine[e] != Float32(0.0))
            warp_any = cute.arch.vote_any_sync(nonzero != 0)
            if tidx % 32 == 0:
                sAny[tidx // 32] = Int32(warp_any)
            cute.arch.sync_threads()  # sM, sST and sAny complete
            any_m = Int32(0)
            for w in cutlass.range_constexpr(THREADS // 32):
                any_m = any_m | sAny[w]
            # a segment whose M the warmup dropped (stored as zeros) passes its B on: S M + B = B for
            # a finite S, without the K x K product that is the step's cost (the combine took 0.089
            # of B1 T32768's 0.563 ms forward at SEGMENT 64, H100, its M all zero under both gate sets)
            if any_m != 0:
                if const_expr(reverse):
                    for e in cutlass.range(K * K // THREADS, unroll=8):
                        flat = tidx + e * THREADS
                        sMt[flat % K, flat // K] = sM[flat // K, flat % K]
                    cute.arch.sync_threads()  # M^T complete
                for kk in cutlass.range(K, unroll=8):
                    m = sMt[kk, col]
                    for j in cutlass.range_constexpr(rows):
                        acc[j] = acc[j] + sST[kk, row0 + j * step] * m
            cute.arch.sync_threads()  # every read of sST, sM, sMt and sAny done before the next step's writes
            out_slot = s_slot - 1 if const_expr(reverse) else s_slot + 1
            for j in cutlass.range_constexpr(rows):
                mSegST[out_slot, h, vb * BV + row0 + j * step, col] = acc[j]
