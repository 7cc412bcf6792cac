"""The fused scan with its output beside the state's chain (WGMMA 4): two warpgroups a CTA.

The chunk step of `gdn.sm90_fused` has a serial chain, ``S -> k S^T -> x -> Tb x -> S'``, and work
that hangs off it, ``o = scale (exp(gamma) q S^T + P v_new)``. With one warpgroup the output's
products and their waits sit inside the chain (a chunk step of 4.3 us at BLOCK_V 64 on an H100,
27% of issue slots busy: the warpgroup waits on its own MMAs). Here warpgroup 0 walks the chain
alone and warpgroup 1 computes each chunk's output from what the chain publishes, so one
warpgroup's MMAs run while the other does its scalar work:

- warpgroup 0 (the state): k, v, Tb and gamma by cp.async (two stages); per chunk the entering
  state's io copy into ``sST[b]`` (b = chunk parity), x, ``v_new = Tb x`` into ``sVn[b]``, the
  carried rows and the state's update; the final state.
- warpgroup 1 (the output): q, k and gamma by cp.async (two stages); per chunk the decayed causal
  scores ``P = (q k^T) exp(gamma_i - gamma_j)`` (before the state is awaited: off the chain, and
  prepare neither reads q nor stores P), ``exp(gamma) q S^T`` from ``sST[b]``, then ``+ P v_new``
  from ``sVn[b]``, scaled, staged in shared memory and stored 16 bytes at a time.

Named barriers order the two: ``STATE[b]`` (warpgroup 0 arrives once ``sST[b]`` is written,
warpgroup 1 waits), ``VNEW[b]`` (likewise for ``sVn[b]``) and ``FREE[b]`` (warpgroup 1 arrives
once its products of chunk c have read both, warpgroup 0 waits before writing them for chunk
c + 2); each warpgroup's own tiles are ordered by its own 128-thread barrier, except warpgroup 1's
P, whose writes the STATE barrier orders before the product that reads it (all 128 threads of
warpgroup 1 wait there, each after its fence). Phase 1 of SEGMENT
(no output) stays on `FusedScanKernels.scan_fused_wg`.

A mixin of `gdn.sm90_fwd.GdnSm90Fwd` (its fields: dims, dtypes, options, segment).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

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
    slot_chunk,
    store_rows,
    tail_decay,
    transposed,
    wg_gemm,
    wg_mma,
    zeroed_acc,
)

WS_THREADS = 2 * THREADS
# named barrier ids (0 is the CTA's __syncthreads): each warpgroup's own, then a pair (one per
# chunk parity) of STATE, VNEW and FREE
_BAR_WG = (1, 2)
_BAR_STATE = (3, 4)
_BAR_VNEW = (5, 6)
_BAR_FREE = (7, 8)


def _wg_sync(wg):
    """The 128 threads of warpgroup ``wg`` (a Python int) meet."""
    cute.arch.barrier(barrier_id=_BAR_WG[wg], number_of_threads=THREADS)


@cute.jit
def _signal(ids, b):
    """Arrive (without waiting) at barrier ``ids[b]`` shared by both warpgroups."""
    if b == 0:
        cute.arch.barrier_arrive(barrier_id=ids[0], number_of_threads=WS_THREADS)
    else:
        cute.arch.barrier_arrive(barrier_id=ids[1], number_of_threads=WS_THREADS)


@cute.jit
def _await(ids, b):
    """Wait at barrier ``ids[b]`` until the other warpgroup has arrived."""
    if b == 0:
        cute.arch.barrier(barrier_id=ids[0], number_of_threads=WS_THREADS)
    else:
        cute.arch.barrier(barrier_id=ids[1], number_of_threads=WS_THREADS)


def _load_state_tiles(copies, t, tiles, buffers, r0, rows_left, buf, K: int, BV: int):
    """Warpgroup 0's cp.async of one chunk (from token ``r0``) into stage ``buf``: k, v's value block
    and Tb, rows at or past ``rows_left`` zero-filled (no commit)."""
    g2s_k, g2s_v, g2s_t = copies
    mK, mV, mTb, hk, hv, h, vb = tiles
    sKs, sVs, sTbs, _, _ = buffers
    load_rows(g2s_k, t, chunk_rows(mK, r0, hk, K), sKs[None, None, buf], rows_left)
    load_rows(g2s_v, t, chunk_rows(mV, r0, hv, BV, vb), sVs[None, None, buf], rows_left)
    load_rows(g2s_t, t, chunk_rows(mTb, r0, h, CHUNK), sTbs[None, None, buf], rows_left)


def _load_output_tiles(g2s_k, t, tiles, buffers, r0, rows_left, buf, K: int):
    """Warpgroup 1's cp.async of one chunk into stage ``buf``: q and k (no commit)."""
    mQ, mK, hk, _, _ = tiles
    sQs, sK1s, _, _ = buffers
    load_rows(g2s_k, t, chunk_rows(mQ, r0, hk, K), sQs[None, None, buf], rows_left)
    load_rows(g2s_k, t, chunk_rows(mK, r0, hk, K), sK1s[None, None, buf], rows_left)


class FusedWsScanKernels:
    """`scan_fused_ws` (a mixin of `GdnSm90Fwd`: it reads its configuration)."""

    @cute.kernel
    def scan_fused_ws(
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
        mSegST: cute.Tensor,
        k_group: Int32,
        v_group: Int32,
        sequences: Int32,
        search_steps: Int32,
        scale: Float32,
        phase: cutlass.Constexpr,
    ):
        """256 threads a CTA (the module's docstring). ``phase`` 0: grid sequences x output heads x
        value blocks, every chunk of a sequence; 2: segment slots x heads x value blocks, a segment
        from the state entering it (as `scan_fused_wg`'s phase 2)."""
        C = CHUNK
        tidx, _, _ = cute.arch.thread_idx()
        wg = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4
        t = tidx % THREADS
        slot, h, vb = cute.arch.block_idx()
        n = slot
        seg = Int32(0)
        c_begin = Int32(0)
        is_last = Int32(1)
        if const_expr(phase == 0):
            bos = Int32(mCu[slot])
            length = Int32(mCu[slot + 1]) - bos
            c_end = cute.ceil_div(length, C)
            active = Int32(1)
        else:
            tokens_per = C * self.segment
            bos, length, seg = slot_chunk(mCu, slot, sequences, search_steps, tokens_per)
            n = slot - bos // tokens_per - seg
            c_begin = seg * self.segment
            c_end = cute.ceil_div(length, C)
            if c_end > c_begin + self.segment:
                c_end = c_begin + self.segment
            is_last = Int32((seg + 1) * tokens_per >= length)
            active = Int32(Int32(seg * tokens_per < length) + Int32(seg == 0) > 0)

        K, BV, io = self.K, self.BV, self.io
        smem = utils.SmemAllocator()
        k_layout, k_swz = row_major(C, K, 2)
        v_layout, v_swz = row_major(C, BV, 2)
        t_layout, t_swz = row_major(C, C, 2)
        x_layout, x_swz = row_major(C, BV)
        s_layout, s_swz = row_major(K, BV, 2)
        vn_layout, vn_swz = row_major(C, BV, 2)
        sKs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sVs = smem.allocate_tensor(io, v_layout, 1024, v_swz)
        sTbs = smem.allocate_tensor(io, t_layout, 1024, t_swz)
        sX = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sCar = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sSTs = smem.allocate_tensor(io, s_layout, 1024, s_swz)  # the entering state, S^T, per parity
        sVns = smem.allocate_tensor(io, vn_layout, 1024, vn_swz)  # v_new, per parity
        sQs = smem.allocate_tensor(io, k_layout, 1024, k_swz)
        sK1s = smem.allocate_tensor(io, k_layout, 1024, k_swz)  # warpgroup 1's own k (no hand-off)
        p_layout, p_swz = row_major(C, C)
        sP = smem.allocate_tensor(io, p_layout, 1024, p_swz)  # one stage: written and read within a chunk
        sO = smem.allocate_tensor(io, x_layout, 1024, x_swz)
        sGammas = smem.allocate_tensor(Float32, cute.make_layout((C, 2, 2), stride=(1, C, 2 * C)), 16)
        if active > 0:
            shared = (
                sSTs,
                sVns,
                sGammas,
            )  # the state copy, v_new (0 writes, 1 reads); gamma (each its own half)
            if wg == 0:
                tiles = (mK, mV, mTb, h // k_group, h // v_group, h, vb)
                self._ws_state(
                    tiles, (sKs, sVs, sTbs, sX, sCar), shared, mGamma, mH0, mHt, mSegST, t, slot, n, bos, length,
                    seg, c_begin, c_end, is_last, phase,
                )  # fmt: skip
            else:
                tiles = (mQ, mK, h // k_group, h, vb)
                self._ws_output(
                    tiles, (sQs, sK1s, sP, sO), shared, mGamma, mO, t, bos, length, c_begin, c_end, scale
                )

    @cute.jit
    def _ws_state(
        self, tiles, buffers, shared, mGamma, mH0, mHt, mSegST, t, slot, n, bos, length, seg, c_begin, c_end,
        is_last, phase: cutlass.Constexpr,
    ):  # fmt: skip
        """Warpgroup 0: the state's chain over chunks ``c_begin`` to ``c_end`` (thread ``t`` of 128)."""
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        h, vb = tiles[5], tiles[6]
        sKs, sVs, sTbs, sX, sCar = buffers
        sSTs, sVns, sGammas = shared
        g2s_k, g2s_v, g2s_t = cta_g2s(io, K), cta_g2s(io, BV), cta_g2s(io, C)
        mma_v = wg_mma(io, BV, False, True)  # [C, BV] = k [C, K] . S [BV, K]^T (S read MN-major)
        mma_tv = wg_mma(io, BV, False, True)  # [C, BV] = Tb [C, C] . x [C, BV]
        mma_s = wg_mma(io, BV, True, True)  # S^T [K, BV] += k^T [K, C] . carried [C, BV]
        state, _ = zeroed_acc(mma_s, t, K, BV)
        thr_s = mma_s.get_slice(t)
        if const_expr(phase == 2):
            if seg > 0:  # the state entering the segment, from the combine
                src = thr_s.partition_C(
                    transposed(cute.local_tile(mSegST[slot, h, None, None], (BV, K), (vb, 0)))
                )
                for i in cutlass.range_constexpr(cute.size(state)):
                    state[i] = src[i]
        if const_expr(self.has_h0):
            if seg == 0:
                src = thr_s.partition_C(transposed(cute.local_tile(mH0[n, h, None, None], (BV, K), (vb, 0))))
                for i in cutlass.range_constexpr(cute.size(state)):
                    state[i] = src[i].to(Float32)
        copies = (g2s_k, g2s_v, g2s_t)
        r_first = bos + c_begin * C
        _load_state_tiles(copies, t, tiles, buffers, r_first, length - c_begin * C, 0, K, BV)
        cute.arch.cp_async_commit_group()
        if t < C:
            sGammas[t, 0, 0] = gamma_row(mGamma, r_first, length - c_begin * C, h, t)

        for c in cutlass.range(c_begin, c_end, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = (c - c_begin) % 2
            g_next = Float32(0.0)
            if c + 1 < c_end:
                _load_state_tiles(copies, t, tiles, buffers, r0 + C, rows_left - C, 1 - buf, K, BV)
            cute.arch.cp_async_commit_group()
            if t < C:
                if c + 1 < c_end:
                    g_next = gamma_row(mGamma, r0 + C, rows_left - C, h, t)
            sK, sV, sTb = sKs[None, None, buf], sVs[None, None, buf], sTbs[None, None, buf]
            sGamma = sGammas[None, buf, 0]
            sST, sVn = sSTs[None, None, buf], sVns[None, None, buf]  # (c - c_begin) % 2: the parity
            sS = transposed(sST)
            if c - c_begin >= 2:
                _await(_BAR_FREE, buf)  # warpgroup 1 has read sST and sVn of chunk c - 2
            acc_to_smem_packed(mma_s, t, state, sST, io)
            cute.arch.cp_async_wait_group(1)
            async_visible()
            _wg_sync(0)
            _signal(_BAR_STATE, buf)
            if const_expr(self.l2norm):
                l2_normalize_rows(sK, t, K)
                async_visible()
                _wg_sync(0)
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]

            ks, crd_v = zeroed_acc(mma_v, t, C, BV)
            wg_gemm(mma_v, t, ks, sK, sS)
            cute.nvgpu.warpgroup.wait_group(0)
            ra, rb = row_pair(crd_v)
            ea, eb = fast_exp(sGamma[ra]), fast_exp(sGamma[rb])
            v_frag = cute.make_rmem_tensor_like(ks, io)
            cute.autovec_copy(mma_v.get_slice(t).partition_C(sV), v_frag)
            for i in cutlass.range_constexpr(cute.size(ks)):
                e = eb
                if crd_v[i][0] == ra:
                    e = ea
                ks[i] = v_frag[i].to(Float32) - e * ks[i]
            acc_to_smem_packed(mma_v, t, ks, sX, io)  # x
            async_visible()
            _wg_sync(0)

            v_new, _ = zeroed_acc(mma_tv, t, C, BV)
            wg_gemm(mma_tv, t, v_new, sTb, transposed(sX))
            cute.nvgpu.warpgroup.wait_group(0)
            acc_to_smem_packed(mma_tv, t, v_new, sVn, io)
            ta, tb = tail_decay(ra, rows_left, last, sGamma), tail_decay(rb, rows_left, last, sGamma)
            scale_row_pair(v_new, crd_v, ra, ta, tb)
            acc_to_smem_packed(mma_tv, t, v_new, sCar, io)
            async_visible()
            _wg_sync(0)
            _signal(_BAR_VNEW, buf)

            decay = fast_exp(last)
            for i in cutlass.range_constexpr(cute.size(state)):
                state[i] = state[i] * decay
            wg_gemm(mma_s, t, state, transposed(sK), transposed(sCar))
            cute.nvgpu.warpgroup.wait_group(0)
            if t < C:
                sGammas[t, 1 - buf, 0] = g_next
            _wg_sync(0)  # every read of this chunk's tiles done before the next prefetch

        cute.arch.cp_async_wait_group(0)
        if const_expr(self.store_ht):
            if is_last > 0:
                dst = thr_s.partition_C(transposed(cute.local_tile(mHt[n, h, None, None], (BV, K), (vb, 0))))
                for i in cutlass.range_constexpr(cute.size(state)):
                    dst[i] = state[i].to(self.ht_t)

    @cute.jit
    def _ws_output(self, tiles, buffers, shared, mGamma, mO, t, bos, length, c_begin, c_end, scale):
        """Warpgroup 1: each chunk's output from the state and v_new warpgroup 0 publishes."""
        K, BV, C, io = self.K, self.BV, CHUNK, self.io
        h, vb = tiles[3], tiles[4]
        sQs, sK1s, sP, sO = buffers
        sSTs, sVns, sGammas = shared
        g2s_k = cta_g2s(io, K)
        s2g_v = cta_s2g(io, BV)
        mma_p = wg_mma(io, C, False, False)  # [C, C] = q [C, K] . k [C, K]^T
        mma_v = wg_mma(io, BV, False, True)  # [C, BV] = q [C, K] . S [BV, K]^T
        mma_tv = wg_mma(io, BV, False, True)  # [C, BV] += P [C, C] . v_new [C, BV]
        copies = g2s_k
        r_first = bos + c_begin * C
        _load_output_tiles(copies, t, tiles, buffers, r_first, length - c_begin * C, 0, K)
        cute.arch.cp_async_commit_group()
        if t < C:
            sGammas[t, 0, 1] = gamma_row(mGamma, r_first, length - c_begin * C, h, t)

        for c in cutlass.range(c_begin, c_end, unroll=1):
            r0 = bos + c * C
            rows_left = length - c * C
            buf = (c - c_begin) % 2
            g_next = Float32(0.0)
            if c + 1 < c_end:
                _load_output_tiles(copies, t, tiles, buffers, r0 + C, rows_left - C, 1 - buf, K)
            cute.arch.cp_async_commit_group()
            if t < C:
                if c + 1 < c_end:
                    g_next = gamma_row(mGamma, r0 + C, rows_left - C, h, t)
            sQ, sK = sQs[None, None, buf], sK1s[None, None, buf]
            sGamma = sGammas[None, buf, 1]
            sS, sVn = transposed(sSTs[None, None, buf]), sVns[None, None, buf]
            cute.arch.cp_async_wait_group(1)
            async_visible()
            _wg_sync(1)
            if const_expr(self.l2norm):
                l2_normalize_rows(sQ, t, K)
                l2_normalize_rows(sK, t, K)
                async_visible()
                _wg_sync(1)

            # P on the causal part of the real rows (a row past the sequence: 0, not 0 * exp(-gamma))
            scores, crd_p = zeroed_acc(mma_p, t, C, C)
            wg_gemm(mma_p, t, scores, sQ, sK)
            cute.nvgpu.warpgroup.wait_group(0)
            for i in cutlass.range_constexpr(cute.size(scores)):
                row, col = crd_p[i][0], crd_p[i][1]
                val = Float32(0.0)
                if row >= col and row < rows_left:
                    val = scores[i] * fast_exp(sGamma[row] - sGamma[col])
                scores[i] = val
            acc_to_smem_packed(mma_p, t, scores, sP, io)
            async_visible()  # the STATE barrier below (all 128 threads of this warpgroup wait at it) orders it

            out, crd_o = zeroed_acc(mma_v, t, C, BV)
            _await(_BAR_STATE, buf)
            wg_gemm(mma_v, t, out, sQ, sS)
            ra, rb = row_pair(crd_o)
            ea, eb = fast_exp(sGamma[ra]), fast_exp(sGamma[rb])
            cute.nvgpu.warpgroup.wait_group(0)
            scale_row_pair(out, crd_o, ra, ea, eb)
            _await(_BAR_VNEW, buf)
            wg_gemm(mma_tv, t, out, sP, transposed(sVn))
            cute.nvgpu.warpgroup.wait_group(0)
            if c + 2 < c_end:
                _signal(_BAR_FREE, buf)  # sST and sVn of this parity may take chunk c + 2's
            for i in cutlass.range_constexpr(cute.size(out)):
                out[i] = out[i] * scale
            acc_to_smem_packed(mma_tv, t, out, sO, io)
            if t < C:
                sGammas[t, 1 - buf, 1] = g_next
            _wg_sync(1)  # the output tile complete; every read of this chunk's tiles done
            store_rows(s2g_v, t, sO, chunk_rows(mO, r0, h, BV, vb), rows_left)
        cute.arch.cp_async_wait_group(0)
