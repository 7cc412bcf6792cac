"""The gdn_sm90 backward's chunk gradients fused (`ChunkGradWsKernels.grad_chunk_ws`, WGMMA 2): the
output's and passed state's terms (`GdnSm90Bwd.grad_output`) and the WY transform's
(`GdnSm90Bwd.grad_wy`) of one chunk and head in one CTA of two warpgroups, so dk's first terms and
dw stay on chip instead of a round trip through HBM each (fp32 dk, io dw, d gamma's output terms),
and the chunk's rows are read once, not twice. Each warpgroup walks its own chain of products over
the whole key and value dims (``wgmma.m64nNk16``; operands from shared memory in the major mode each
product reads them, the transposes by MN-major reads rather than copies). The chains meet only at
dk:

- warpgroup 0 (the output's and the passed state's terms): the gates, ``dP = scale dO v_new^T``
  (decayed, causal) beside ``q k^T``, ``dq = scale exp(gamma) dO h + dP k``, then ``dk' = exp(last -
  gamma) v_new dh + dP^T q`` and sum(dh * h); its loads are dO, v_new and q, then dh.
- warpgroup 1 (the WY transform's terms): ``dv = beta T^T dv_new`` and ``dv_new v^T`` first, then
  ``dw = -dv_new h``, ``k k^T``, ``dT``, ``T^T dw``, ``dA = -T^T dT T^T`` and dk's WY terms; its
  loads are k, h, dv_new and T (k normalized here), then v.

So one warpgroup's products run while the other does its elementwise steps, and each orders its own
tiles with a barrier of its 128 threads. Named barriers carry what crosses, each waited on just
before the first read: ``GATES`` (warpgroup 0 has the gates in shared memory and the sums' vectors
zeroed), ``KH`` (warpgroup 1 has k, normalized, and h) and ``DK`` (warpgroup 0's dk' is in the
exchange: warpgroup 1 adds it to its terms and stores dk). The exchange is dh's shared memory, dead
once dk' is computed, holding each thread's fp32 fragment at the index of the thread of warpgroup 1
with the same coordinates (both accumulators come from one MMA shape), fragment-major so a warp's
accesses are consecutive words. dT, its product ``T^T dT^T`` and dA's io copy share one tile, one
after the other. The d gamma sums and the gates' chain rules follow a barrier of the CTA
(`ChunkGradWsKernels.chunk_gate_grads`). Every tile of the chunk is resident (203 KB at K = V = 128,
one CTA an SM; 227 registers a thread).

Why split (docs/linear-attention.md, The CuTe DSL backward): the first fused form had both
warpgroups side by side on every product, half the columns each, and the same elementwise step
between products, so the tensor cores waited on it and every step ended at a barrier of the CTA
(Nsight Compute: issue slots 24% busy; shared-memory and SFU dependencies, barriers and fixed
latencies). The split takes 18% off the kernel on an H100 (B4 T4096 0.667 -> 0.547 ms).

A mixin of `gdn.sm90_bwd.GdnSm90Bwd` (its fields: dims, dtypes, options); the elementwise steps are
`gdn.sm90_bwd_chunk`'s.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph.engines.cute_tiles import g2s_copy, row_major
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
    tail_decay,
    transposed,
    wg_gemm,
    wg_mma,
    zero_vector,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_bwd_chunk import (
    beta_cols,
    da_terms,
    decayed_cols,
    dp_terms,
    dv_rows,
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


# named barrier ids (0 is the CTA's): each warpgroup's own, then the three that cross
_BAR_WG = (1, 2)
_BAR_GATES = 3  # the chunk's gates in shared memory, the sums' vectors zeroed (warpgroup 0)
_BAR_KH = 4  # k loaded and normalized, h loaded (warpgroup 1)
_BAR_DK = 5  # warpgroup 0's dk' in the exchange


def _wg_sync(wg: int):
    """The 128 threads of warpgroup ``wg`` meet."""
    cute.arch.barrier(barrier_id=_BAR_WG[wg], number_of_threads=THREADS)


class ChunkGradWsKernels:
    """The chunk gradients of `GdnSm90Bwd` on dependency-split warpgroups (a mixin: they read its
    configuration)."""

    @cute.jit
    def chunk_gate_grads(self, tidx, rows_left, last_row, last, r0, h, sums, sPart, gates, mDg, mDb, mDa):
        """The kernel's last steps, after a barrier of the CTA once every row and column sum
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

    @cute.jit
    def first_tiles(self, wg: cutlass.Constexpr, t, pending: cutlass.Constexpr, keys):
        """Warpgroup ``wg``'s first tiles ready for its products: its cp.async groups but the last
        ``pending`` landed and visible to the warpgroup MMAs, and its key tile ``keys`` (q or k)
        L2-normalized where the kernel normalizes them."""
        cute.arch.cp_async_wait_group(pending)
        async_visible()
        _wg_sync(wg)
        if const_expr(self.l2norm):
            l2_normalize_rows(keys, t, self.K)
            async_visible()
            _wg_sync(wg)

    @cute.jit
    def output_chain(self, t, tiles, sX, sGamma, sDg, sKd, sPart, mDq, mDQ, r0, h, rows_left, scale):
        """Warpgroup 0 (thread ``t`` of 128): dP and q k^T, dq (stored), dk' into the exchange ``sX``,
        their d gamma terms into ``sDg`` and ``sKd``, sum(dh * h) into ``sPart[0]``."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        sQ, sK, sDo, sVn, sH, sDh, sDp = tiles
        mma_cc = wg_mma(io, C, False, False)  # x y^T
        mma_ck = wg_mma(io, K, False, True)  # x y
        mma_ck_t = wg_mma(io, K, True, True)  # x^T y
        last = sGamma[cutlass.min(rows_left, C) - 1]  # the chunk's last real row's
        self.first_tiles(0, t, 1, sQ)  # dO, v_new, q

        # dP = scale dO v_new^T on the causal, real part, with the decay; d gamma's terms dP * (q k^T)
        dp, crd_p = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, dp, sDo, sVn)
        cute.arch.barrier(barrier_id=_BAR_KH, number_of_threads=WG2_THREADS)
        qk, _ = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, qk, sQ, sK)
        cute.nvgpu.warpgroup.wait_group(0)
        dp_terms(dp, qk, crd_p, mma_cc.get_slice(t).partition_C(sDp), sGamma, rows_left, scale, io)
        row_sums(dp, crd_p, sDg)
        col_sums_sub_paired(dp, crd_p, sDg, t)
        async_visible()
        _wg_sync(0)  # sDp complete

        # dq = scale exp(gamma) dO h + dP k; d gamma's terms dq_h * q
        dq, crd = zeroed_acc(mma_ck, t, C, K)
        wg_gemm(mma_ck, t, dq, sDo, transposed(sH))
        cute.nvgpu.warpgroup.wait_group(0)
        row_a, row_b = row_pair(crd)
        scale_row_pair(dq, crd, row_a, scale * fast_exp(sGamma[row_a]), scale * fast_exp(sGamma[row_b]))
        q_part = mma_ck.get_slice(t).partition_C(sQ)
        terms = cute.make_rmem_tensor(dq.shape, Float32)
        for e in cutlass.range_constexpr(cute.size(dq)):
            terms[e] = dq[e] * q_part[e].to(Float32)
        row_sums(terms, crd, sDg)
        wg_gemm(mma_ck, t, dq, sDp, transposed(sK))
        cute.nvgpu.warpgroup.wait_group(0)
        grad_rows_to_gmem(mma_ck, t, dq, crd, self.direct_qk, mDQ, mDq, r0, h, K, rows_left, io)
        cute.arch.cp_async_wait_group(0)  # dh
        async_visible()
        _wg_sync(0)

        # dk' = exp(last - gamma) (v_new dh) + dP^T q; d gamma's terms -k * the passed part
        dk, _ = zeroed_acc(mma_ck, t, C, K)
        wg_gemm(mma_ck, t, dk, sVn, transposed(sDh))
        cute.nvgpu.warpgroup.wait_group(0)
        tails = tail_decay(row_a, rows_left, last, sGamma), tail_decay(row_b, rows_left, last, sGamma)
        scale_row_pair(dk, crd, row_a, *tails)
        k_part = mma_ck.get_slice(t).partition_C(sK)
        for e in cutlass.range_constexpr(cute.size(dk)):
            terms[e] = dk[e] * k_part[e].to(Float32)
        row_sums(terms, crd, sKd)
        wg_gemm(mma_ck_t, t, dk, transposed(sDp), transposed(sQ))
        # the last row's d gamma: the state leaving is exp(last) h + ...: sum(dh * h) exp(last)
        part = tile_dot(sDh, sH, t, V, K, THREADS)
        for off in cutlass.range_constexpr(5):
            part = part + cute.arch.shuffle_sync_bfly(part, 1 << off)
        if t % 32 == 0:
            cute.arch.atomic_add(sPart.iterator, part)
        cute.nvgpu.warpgroup.wait_group(0)
        _wg_sync(0)  # every read of dh done: the exchange takes its memory
        for e in cutlass.range_constexpr(cute.size(dk)):
            sX[e * THREADS + t] = dk[e]
        cute.arch.barrier_arrive(barrier_id=_BAR_DK, number_of_threads=WG2_THREADS)

    @cute.jit
    def wy_chain(self, t, tiles, sX, sGamma, sWr, sDwrite, sDgam, sRow, mDv, mDV, mDk, mDK, r0, h, rows_left):
        """Warpgroup 1 (thread ``t`` of 128): dv (stored), dT, dA and dk's WY terms, plus warpgroup 0's
        dk' from the exchange ``sX`` (dk stored); their d gamma and beta terms into ``sDwrite``,
        ``sDgam`` and ``sRow``."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        sK, sH, sDvn, sV, sDw, sT, sDt, sTmp, sDgram = tiles
        mma_cc = wg_mma(io, C, False, False)  # x y^T
        mma_cc_t = wg_mma(io, C, True, True)  # x^T y
        mma_ck = wg_mma(io, K, False, True)  # x y
        mma_ck_t = wg_mma(io, K, True, True)  # x^T y
        mma_cv_t = wg_mma(io, V, True, True)
        self.first_tiles(1, t, 1, sK)  # k, h, dv_new, T
        cute.arch.barrier_arrive(barrier_id=_BAR_KH, number_of_threads=WG2_THREADS)

        # u = T (beta v): dv = beta T^T dv_new and beta's term (T^T dv_new) . v; dT's second product
        dvw, crd_v = zeroed_acc(mma_cv_t, t, C, V)
        wg_gemm(mma_cv_t, t, dvw, transposed(sT), transposed(sDvn))
        cute.arch.cp_async_wait_group(0)  # v
        async_visible()
        _wg_sync(1)
        dt_v, crd_p = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, dt_v, sDvn, sV)
        cute.nvgpu.warpgroup.wait_group(1)
        cute.arch.barrier(barrier_id=_BAR_GATES, number_of_threads=WG2_THREADS)
        dv_rows(dvw, crd_v, mma_cv_t.get_slice(t).partition_C(sV), sWr, sDwrite)
        grad_rows_to_gmem(mma_cv_t, t, dvw, crd_v, self.direct_v, mDV, mDv, r0, h, V, rows_left, io)

        # dw = -dv_new h (io, shared) and the gram k k^T
        dw, crd = zeroed_acc(mma_ck, t, C, K)
        wg_gemm(mma_ck, t, dw, sDvn, transposed(sH))
        gram, _ = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, gram, sK, sK)
        cute.nvgpu.warpgroup.wait_group(1)
        dw_part = mma_ck.get_slice(t).partition_C(sDw)
        for e in cutlass.range_constexpr(cute.size(dw)):
            dw_part[e] = (-dw[e]).to(io)
        async_visible()
        _wg_sync(1)  # sDw complete

        # dT = ((dw k^T) exp(gamma_j) + dv_new v^T) beta_j; T^T dw for w = T (beta exp(gamma) k)
        dt, _ = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, dt, sDw, sK)
        dkw, _ = zeroed_acc(mma_ck_t, t, C, K)
        wg_gemm(mma_ck_t, t, dkw, transposed(sT), transposed(sDw))
        cute.nvgpu.warpgroup.wait_group(1)
        decayed_cols(dt, crd_p, sGamma)
        for e in cutlass.range_constexpr(cute.size(dt)):
            dt[e] = dt[e] + dt_v[e]
        beta_cols(dt, crd_p, sWr)
        acc_to_smem(mma_cc, t, dt, sDt, io)
        async_visible()
        _wg_sync(1)  # sDt complete

        # T = (I + A)^-1: dA = -T^T dT T^T; A = beta (k k^T) exp(gamma_i - gamma_j), strictly lower
        tmp, _ = zeroed_acc(mma_cc_t, t, C, C)
        wg_gemm(mma_cc_t, t, tmp, transposed(sT), transposed(sDt))
        cute.nvgpu.warpgroup.wait_group(0)
        _wg_sync(1)  # every read of dT done: the product takes its tile
        acc_to_smem(mma_cc_t, t, tmp, sTmp, io)
        async_visible()
        _wg_sync(1)
        da, _ = zeroed_acc(mma_cc, t, C, C)
        wg_gemm(mma_cc, t, da, sTmp, sT)
        cute.nvgpu.warpgroup.wait_group(0)
        _wg_sync(1)  # every read of T^T dT^T done: dA' takes its tile
        da_terms(da, gram, crd_p, mma_cc.get_slice(t).partition_C(sDgram), sGamma, sWr, sDwrite, sDgam, io)
        col_sums_sub_paired(da, crd_p, sDgam, t)

        # w = T (beta exp(gamma) k): dk = dk' + beta exp(gamma) T^T dw + (dA' + dA'^T) k
        row_a, row_b = row_pair(crd)
        e_a, e_b = fast_exp(sGamma[row_a]), fast_exp(sGamma[row_b])
        wr_a, wr_b = sWr[row_a] * e_a, sWr[row_b] * e_b
        k_part = mma_ck.get_slice(t).partition_C(sK)
        terms = cute.make_rmem_tensor(dkw.shape, Float32)
        for e in cutlass.range_constexpr(cute.size(dkw)):
            e_row = e_b
            w_row = wr_b
            if crd[e][0] == row_a:
                e_row = e_a
                w_row = wr_a
            terms[e] = dkw[e] * k_part[e].to(Float32) * e_row
            dkw[e] = dkw[e] * w_row
        row_sums(terms, crd, sRow)
        async_visible()
        _wg_sync(1)  # sDgram complete
        wg_gemm(mma_ck, t, dkw, sDgram, transposed(sK))
        wg_gemm(mma_ck_t, t, dkw, transposed(sDgram), transposed(sK))
        cute.arch.barrier(barrier_id=_BAR_DK, number_of_threads=WG2_THREADS)
        cute.nvgpu.warpgroup.wait_group(0)
        for e in cutlass.range_constexpr(cute.size(dkw)):
            dkw[e] = dkw[e] + sX[e * THREADS + t]
        grad_rows_to_gmem(mma_ck, t, dkw, crd, self.direct_qk, mDK, mDk, r0, h, K, rows_left, io)

    @cute.kernel
    def grad_chunk_ws(
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
        `grad_output` and `grad_wy` take them. Each warpgroup on its own chain (`output_chain`,
        `wy_chain`)."""
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
            sDo, sVn = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V)
            sH = smem_tile(smem, io, V, K)
            # dh's tile, then (once warpgroup 0 has read it) the fp32 exchange of dk'
            raw_dh = smem.allocate(max(V * K * io.width // 8, C * K * 4), 1024)
            dh_layout, dh_swizzle = row_major(V, K)
            sDh = cute.make_tensor(cute.recast_ptr(raw_dh, dh_swizzle, dtype=io), dh_layout)
            sX = cute.make_tensor(cute.recast_ptr(raw_dh, dtype=Float32), cute.make_layout((C * K,)))
            sDp = smem_tile(smem, io, C, C)
            sDvn, sV, sDw = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V), smem_tile(smem, io, C, K)
            sT = smem_tile(smem, io, C, C)
            sDt, sTmp, sDgram = aliased_smem_tiles(smem, io, (C, C), (C, C), (C, C))
            sGamma, sWr, sDg, sKd, sDwrite, sDgam, sRow, sDgamma = (smem_vector(smem) for _ in range(8))
            sPart = smem_vector(smem, 4)
            t = tidx % THREADS
            if tidx < THREADS:  # each warpgroup loads what its chain reads first, in that order
                g2s_k, g2s_v = g2s_copy(io, K, THREADS), g2s_copy(io, V, THREADS)
                load_rows(g2s_v, t, chunk_rows(mDo, r0, h, V), sDo, rows_left)
                load_rows(g2s_v, t, chunk_rows(mVnew, r0, h, V), sVn, rows_left)
                load_rows(g2s_k, t, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
                cute.arch.cp_async_commit_group()
                load_rows(g2s_k, t, mDh[slot, h, None, None], sDh, V)
                cute.arch.cp_async_commit_group()
            else:  # k and h for both chains
                g2s_k, g2s_v, g2s_c = (
                    g2s_copy(io, K, THREADS),
                    g2s_copy(io, V, THREADS),
                    g2s_copy(io, C, THREADS),
                )
                load_rows(g2s_k, t, chunk_rows(mK, r0, hk, K), sK, rows_left)
                load_rows(g2s_k, t, mHs[slot, h, None, None], sH, V)
                load_rows(g2s_v, t, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
                load_rows(g2s_c, t, mT[slot, h, None, None], sT, C)
                cute.arch.cp_async_commit_group()
                load_rows(g2s_v, t, chunk_rows(mV, r0, hv, V), sV, rows_left)
                cute.arch.cp_async_commit_group()

            # the gates and the zeroed sums by threads 0-63 (warpgroup 0), warpgroup 1 meanwhile on its
            # first products: it waits at GATES before its first read of them
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
            if tidx < THREADS:
                _wg_sync(0)
                if tidx >= 32 and tidx < C:
                    sGamma[tidx] = sGamma[tidx] + sGamma[31]
                _wg_sync(0)
                cute.arch.barrier_arrive(barrier_id=_BAR_GATES, number_of_threads=WG2_THREADS)
                self.output_chain(
                    t, (sQ, sK, sDo, sVn, sH, sDh, sDp), sX, sGamma, sDg, sKd, sPart, mDq, mDQ, r0, h,
                    rows_left, scale,
                )  # fmt: skip
            else:
                self.wy_chain(
                    t, (sK, sH, sDvn, sV, sDw, sT, sDt, sTmp, sDgram), sX, sGamma, sWr, sDwrite, sDgam, sRow,
                    mDv, mDV, mDk, mDK, r0, h, rows_left,
                )  # fmt: skip
            cute.arch.sync_threads()  # every row and column sum is in
            last_row = cutlass.min(rows_left, C) - 1  # the chunk's last real row
            self.chunk_gate_grads(
                tidx, rows_left, last_row, sGamma[last_row], r0, h, (sDg, sKd, sDgam, sRow, sDwrite, sDgamma), sPart,
                (raw_b, gate, wr, biased, rate), mDg, mDb, mDa,
            )  # fmt: skip
