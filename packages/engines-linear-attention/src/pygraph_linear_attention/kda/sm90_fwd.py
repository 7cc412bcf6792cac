"""The KDA and GDN-2 forward in CuTe DSL (the ``kda_sm90`` and ``gdn2_sm90`` engines): three kernels
over 64-token chunks, the last two `gdn.sm90_fwd`'s own (its split scan and whole-V output on
warpgroup MMAs, run with ``channel_decay``).

1. `KdaSm90Fwd.prepare_kda` (grid: chunk slots x output heads, 256 threads) does everything that
   carries a per-channel decay, so the scan and the output take plain operands:

   - the gates, one key channel per thread: the bounded safe gate
     ``lower_bound * sigmoid(exp(a_log) (g + dt_bias))`` where asked, and gamma, the cumulative sum
     down the chunk ([64, K] fp32 in shared memory; rows past the sequence keep the last real row's);
   - the decay-weighted products ``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) k_j[c]`` by sub-chunks
     of 16 rows (`common.chunked`'s ``sub_chunk`` form): rows of sub-chunk i scaled by
     ``exp(gamma_r - ref_i)``, keys up to its end by ``exp(ref_i - gamma_j)``, ``ref_i`` its first
     row's gamma, so across sub-chunks both factors are decays and inside one the key side grows
     by at most ``exp(-15 min g)`` (``exp(75)`` at the safe gate's bound of -5). The factors are
     bf16 whatever the io dtype (fp16 would overflow at ``exp(11)``), each product one
     ``mma.sync`` of [16, K] x [K, 64]. With x = beta k (GDN-2: beta per channel) they give ``A``
     (strictly lower), with x = q the chunk's scores ``P`` (causal, 0 past the sequence), stored
     [T, HO, 64] in the io dtype;
   - ``T = (I + A)^-1`` by `common.sm90_tiles.blocked_inverse` on the first group (16 x 16 diagonal
     blocks by fp32 forward substitution, merged on tf32 MMAs), stored as ``T diag(beta)`` (KDA)
     or ``T`` (GDN-2) in the io dtype, then
     ``u = T diag(beta) v`` (GDN-2: ``T (w_gate v)``) and ``w = T diag(beta) (k exp(gamma))``
     (GDN-2: ``T (beta k exp(gamma))``);
   - the decayed operands of the next kernels: ``q exp(gamma)``, ``k exp(last - gamma)`` (``last``
     the chunk's last real row) and that last gamma [slots, HO, K] fp32.

2. `GdnSm90Fwd.scan_wg` (grid: sequences x output heads x value blocks): the state carried
   transposed in fp32 wgmma accumulators, ``v_new = u - w S^T``, ``S^T = diag(exp(last)) S^T +
   (k exp(last - gamma))^T v_new``; stores each chunk's entering state and v_new.
3. `GdnSm90Fwd.output` (grid: chunk slots x output heads, whole V):
   ``o = scale ((q exp(gamma)) S^T + P v_new)``.

Indices are 32-bit (the engine declines past 2^31 elements). No chunk table: the chunk slots and the
binary search of ``cu_seqlens`` are the shared ones (`common.sm90_tiles.slot_chunk`).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    INVERSE_STRIDE,
    MERGE_STRIDE,
    THREADS,
    VEC,
    aligned_stride,
    blocked_inverse,
    chunk_rows,
    cta_g2s,
    fast_exp,
    l2_normalize_rows,
    load_rows,
    row_major,
    slot_chunk,
    smem_gemm,
    smem_tile,
    smem_vector,
    t_column,
    warp_mma,
    wy_rows_to_gmem,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_fwd import GdnSm90Fwd

__all__ = ["PREP_LAUNCH", "PREP_THREADS", "SUB", "KdaSm90Fwd"]

SUB = 16  # rows per sub-chunk of the decay-weighted products
# prepare_kda's threads: two groups of the family's 128, which split its element loops and take one
# of each pair of products (A and P, u and w) each. Its shared memory (110 KB) allows two CTAs an SM:
# at 128 threads that was 8 warps an SM for a kernel whose stalls are latencies (ncu on the H200:
# instruction fetch, barrier and shared-memory waits, about 0.7 instructions a cycle an SM); at 256
# the registers (128 a thread) still allow two.
PREP_THREADS = 2 * THREADS
# its launch: two CTAs an SM asked of the compiler (registers capped at 128: the backward's variant,
# which also stores T, took 154 uncapped, one CTA an SM), and the largest shared-memory carveout
# (two CTAs take 221 KB of the 228; named, the compile does not ask the device, so it runs on a CPU)
PREP_LAUNCH = {"block": [PREP_THREADS, 1, 1], "min_blocks_per_mp": 2, "preferred_smem_carveout": 100}
_PAIR = cutlass.BFloat16  # their factors' dtype: fp32's exponent range (the key side reaches exp(75))


def vec8(tile, row, c8):
    """The ``c8``-th 8 values of row ``row`` of a row-major tile (shared: 16 contiguous bytes of a
    swizzled 16-bit tile, 32 of an fp32 one) or of a global row."""
    return cute.local_tile(tile[row, None], (VEC,), (c8,))


def load8(tile, row, c8):
    """`vec8` of the tile, copied into registers."""
    vals = cute.make_rmem_tensor((VEC,), tile.element_type)
    cute.autovec_copy(vec8(tile, row, c8), vals)
    return vals


class KdaSm90Fwd(GdnSm90Fwd):
    """One static configuration of the KDA (``gdn2`` False) or GDN-2 forward: dims, the scan's value
    block and stages, dtypes and options. The scan and the output are GDN's (``channel_decay``)."""

    channel_decay = True

    def __init__(
        self,
        *,
        key_dim: int,
        value_dim: int,
        block_v: int,
        io_dtype: str,
        beta_dtype: str,
        h0_dtype: str,
        ht_dtype: str,
        cu_dtype: str,
        gdn2: bool,
        l2norm: bool,
        beta_sigmoid: bool,
        neg_eigval: bool,
        safe_gate: bool,
        has_a_log: bool,
        has_dt_bias: bool,
        lower_bound: float,
        has_h0: bool,
        store_ht: bool,
        stages: int = 1,
        store_t: bool = False,  # the backward's prepare (`kda.sm90_bwd`) also stores T
    ) -> None:
        super().__init__(
            key_dim=key_dim, value_dim=value_dim, block_v=block_v, io_dtype=io_dtype, beta_dtype=beta_dtype,
            h0_dtype=h0_dtype, ht_dtype=ht_dtype, cu_dtype=cu_dtype, l2norm=l2norm,
            beta_sigmoid=beta_sigmoid, neg_eigval=neg_eigval, safe_gate=safe_gate, has_dt_bias=has_dt_bias,
            has_h0=has_h0, store_ht=store_ht, stages=stages, split=True, store_t=store_t, wgmma=2,
        )  # fmt: skip
        self.gdn2 = gdn2  # beta [T, HB, K] inside the erase read, and the write gate w [T, HW, V]
        self.has_a_log = has_a_log
        self.lower_bound = lower_bound

    # ------------------------------------------------------------------ host side (traced once)
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        w_gate_ptr: cute.Pointer,
        a_log_ptr: cute.Pointer,
        dt_bias_ptr: cute.Pointer,
        cu_ptr: cute.Pointer,
        h0_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        ht_ptr: cute.Pointer,
        glast_ptr: cute.Pointer,
        qd_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        hs_ptr: cute.Pointer,
        vnew_ptr: cute.Pointer,
        tokens: Int32,
        sequences: Int32,
        search_steps: Int32,  # ceil(log2(sequences + 1)): the slot search's halvings
        heads_qk: Int32,
        heads_v: Int32,
        heads_out: Int32,
        heads_g: Int32,
        heads_beta: Int32,
        heads_w: Int32,
        heads_a_log: Int32,
        heads_dt_bias: Int32,
        scale: Float32,  # the output's: a run-time value, so one compile serves every scale
        stream: Any,
    ):
        K, V, C = self.K, self.V, CHUNK

        def rows(ptr, heads, dim, aligned=True):
            """A [tokens, heads, dim] row-major view (rows 16-byte aligned where copied 16 bytes at a time)."""
            stride = aligned_stride(heads * dim) if aligned else heads * dim
            return cute.make_tensor(ptr, cute.make_layout((tokens, heads, dim), stride=(stride, dim, 1)))

        mQ, mK, mV = rows(q_ptr, heads_qk, K), rows(k_ptr, heads_qk, K), rows(v_ptr, heads_v, V)
        mG = rows(g_ptr, heads_g, K, False)
        if const_expr(self.gdn2):  # GDN-2's beta and write gate: read 8 channels at a time
            mBeta = rows(beta_ptr, heads_beta, K)
        else:
            mBeta = cute.make_tensor(beta_ptr, cute.make_layout((tokens, heads_beta), stride=(heads_beta, 1)))
        mWg = rows(w_gate_ptr, heads_w, V, self.gdn2)
        mALog = cute.make_tensor(a_log_ptr, cute.make_layout((heads_a_log,)))
        mDtBias = cute.make_tensor(dt_bias_ptr, cute.make_layout((heads_dt_bias, K), stride=(K, 1)))
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((sequences + 1,)))
        state_shape = (sequences, heads_out, V, K)
        state_stride = (heads_out * V * K, V * K, K, 1)
        mH0 = cute.make_tensor(h0_ptr, cute.make_layout(state_shape, stride=state_stride))
        mHt = cute.make_tensor(ht_ptr, cute.make_layout(state_shape, stride=state_stride))
        mO = rows(o_ptr, heads_out, V)
        slots = tokens // C + sequences + 1
        mGlast = cute.make_tensor(
            glast_ptr, cute.make_layout((slots, heads_out, K), stride=(heads_out * K, K, 1))
        )
        mQd, mKd, mW = rows(qd_ptr, heads_out, K), rows(kd_ptr, heads_out, K), rows(w_ptr, heads_out, K)
        mU, mVnew, mP = rows(u_ptr, heads_out, V), rows(vnew_ptr, heads_out, V), rows(p_ptr, heads_out, C)
        mHs = cute.make_tensor(
            hs_ptr,
            cute.make_layout(
                (slots, heads_out, V, K), stride=(aligned_stride(heads_out * V * K), V * K, K, 1)
            ),
        )
        groups = (
            heads_out // heads_qk, heads_out // heads_v, heads_out // heads_g, heads_out // heads_beta,
            heads_out // heads_w, heads_out // heads_a_log, heads_out // heads_dt_bias,
        )  # fmt: skip
        self.prepare_kda(
            mQ, mK, mV, mG, mBeta, mWg, mALog, mDtBias, mCu, mGlast, mQd, mKd, mW, mU, mP, mP, sequences,
            search_steps, groups,
        ).launch(grid=[slots, heads_out, 1], stream=stream, **PREP_LAUNCH)  # fmt: skip
        # the scan and the output read prepare's per-output-head operands: one output head per "k head"
        self.scan_wg(mKd, mW, mU, mGlast, mCu, mH0, mHt, mHs, mVnew, Int32(1)).launch(
            grid=[sequences, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
        )
        self.output(mQd, mP, mGlast, mCu, mHs, mVnew, mO, sequences, search_steps, Int32(1), scale).launch(
            grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream
        )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def prepare_kda(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,  # [T, HG, K] fp32: the log decay per channel, or the safe gate's logits
        mBeta: cute.Tensor,  # [T, HB] (KDA) or [T, HB, K] (GDN-2)
        mWg: cute.Tensor,  # [T, HW, V] io: GDN-2's write gate
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,  # [HD, K]
        mCu: cute.Tensor,
        mGlast: cute.Tensor,  # [slots, HO, K] fp32: each chunk's last gamma
        mQd: cute.Tensor,  # [T, HO, K] io: q exp(gamma)
        mKd: cute.Tensor,  # [T, HO, K] io: k exp(last - gamma)
        mW: cute.Tensor,
        mU: cute.Tensor,
        mP: cute.Tensor,  # [T, HO, 64] io: the chunk's decay-weighted causal scores
        mT: cute.Tensor,  # [slots, HO, 64, 64] io: T = (I + A)^-1 (with store_t: the backward's)
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
    ):
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group, g_group, b_group, w_group, a_group, d_group = groups
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        hk, bh = h // k_group, h // b_group

        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            last_row = cutlass.min(rows_left, C) - 1  # the chunk's last real row
            smem = utils.SmemAllocator()
            # 110 KB at K = V = 128: two CTAs an SM
            sQ = smem_tile(smem, io, C, K)
            sK = smem_tile(smem, io, C, K)
            sGam = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
            # A (fp32, at `blocked_inverse`'s row stride), then (once the inverse is read out) T's
            # scaled copy (io), as gdn_sm90's; the inverse's scratch beside it
            raw_a = smem.allocate(C * INVERSE_STRIDE * 4, 1024)
            sA = cute.make_tensor(
                cute.recast_ptr(raw_a, dtype=Float32), cute.make_layout((C, C), stride=(INVERSE_STRIDE, 1))
            )
            sMerge = smem.allocate_tensor(Float32, cute.make_layout((32, 32), stride=(MERGE_STRIDE, 1)), 16)
            t_layout, t_swz = row_major(C, C)
            sT = cute.make_tensor(cute.recast_ptr(raw_a, t_swz, dtype=io), t_layout)
            # one 16 KB region, in turn: the key-side factors, v (u's operand)
            raw_r = smem.allocate(C * max(K, V) * 2, 1024)
            y_layout, y_swz = row_major(C, K)
            v_layout, v_swz = row_major(C, V)
            sY = cute.make_tensor(cute.recast_ptr(raw_r, y_swz, dtype=_PAIR), y_layout)
            sV = cute.make_tensor(cute.recast_ptr(raw_r, v_swz, dtype=io), v_layout)
            sX = smem_tile(smem, _PAIR, SUB, K)
            sQX = smem_tile(smem, _PAIR, SUB, K)
            sBeta = smem_vector(smem)

            # each group of 128 threads issues its copies and takes its MMA fragments by its own index
            g2s_k = cta_g2s(io, K)
            if tidx < THREADS:
                load_rows(g2s_k, tidx, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
            else:
                load_rows(g2s_k, tidx - THREADS, chunk_rows(mK, r0, hk, K), sK, rows_left)
            cute.arch.cp_async_commit_group()

            # the gates, a key channel per thread: gamma = cumsum of the (safe) gate down the chunk; the
            # gate past the sequence is 0, so those rows keep the last real row's gamma
            if tidx < K:
                mGlast[slot, h, tidx] = self._gamma_column(
                    mG, mALog, mDtBias, sGam, r0, rows_left, h, (g_group, a_group, d_group), tidx
                )
            if const_expr(not self.gdn2):  # beta by the second group, while the first sums the gates
                b_row = tidx - THREADS
                if b_row >= 0:
                    if b_row < C:
                        sBeta[b_row] = self._beta(mBeta, r0, b_row, last_row, bh, 0)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if tidx < THREADS:
                    l2_normalize_rows(sQ, tidx, K)
                else:
                    l2_normalize_rows(sK, tidx - THREADS, K)
                cute.arch.sync_threads()

            # the output's operand q exp(gamma) (k exp(last - gamma) is the second group's during the
            # substitution). The element loops take 8 channels a thread (16-byte shared loads and
            # global stores; one element a thread spent 60% of its instructions on addresses, SASS)
            # and run at run time: fully unrolled, the kernel's 12 K instructions made instruction
            # fetch 37% of its stalls (ncu, H200). Values are computed unconditionally and only the
            # stores predicated, so no load or exp waits behind a per-element branch. A thread reads
            # here the vectors of q whose place the sub-chunk pass below overwrites by the same
            # thread (that pass gives vector f = r * K / 8 + c8 to thread f % 256, as this loop
            # does), so no barrier between them
            per_row = K // VEC
            c8 = tidx % per_row  # this thread's 8 channels in every element loop (256 % per_row == 0)
            for e in cutlass.range(C * per_row // PREP_THREADS, unroll=2):
                r = (tidx + e * PREP_THREADS) // per_row
                q8, gam8 = load8(sQ, r, c8), load8(sGam, r, c8)
                qd8 = cute.make_rmem_tensor((VEC,), io)
                for j in cutlass.range_constexpr(VEC):
                    qd8[j] = (q8[j].to(Float32) * fast_exp(gam8[j])).to(io)
                if r < rows_left:
                    cute.autovec_copy(qd8, vec8(mQd[None, h, None], r0 + r, c8))

            # A and P by sub-chunks: rows ref.. ref + 15 against the keys up to their end (A by the
            # first group, P by the second)
            mma_sub = warp_mma(_PAIR, SUB, C)
            sub_vectors = SUB * per_row  # a sub-chunk's vectors: 256 at K = 128, 128 at 64
            for i in cutlass.range_constexpr(C // SUB):
                ref = i * SUB
                ref8 = load8(sGam, ref, c8)
                # the sub-chunk's rows: vector f to thread f % 256, as the q loop gave them (at K = 64
                # the first 128 threads take the even sub-chunks, the others the odd)
                first = i * sub_vectors % PREP_THREADS  # the sub-chunk's first vector's thread
                if tidx // sub_vectors == first // sub_vectors:
                    r = (tidx - first + i * sub_vectors) // per_row
                    k8, q8, gam8 = load8(sK, r, c8), load8(sQ, r, c8), load8(sGam, r, c8)
                    x8 = cute.make_rmem_tensor((VEC,), _PAIR)
                    qx8 = cute.make_rmem_tensor((VEC,), _PAIR)
                    kg8 = cute.make_rmem_tensor((VEC,), io)
                    if const_expr(self.gdn2):
                        beta8 = self._beta8(mBeta, r0, r, last_row, bh, c8)
                    for j in cutlass.range_constexpr(VEC):
                        f = fast_exp(gam8[j] - ref8[j])
                        k_val = k8[j].to(Float32)
                        if const_expr(self.gdn2):
                            k_val = k_val * beta8[j]
                        x8[j] = (k_val * f).to(_PAIR)
                        qx8[j] = (q8[j].to(Float32) * f).to(_PAIR)
                        kg8[j] = (k_val * fast_exp(gam8[j])).to(io)
                    cute.autovec_copy(x8, vec8(sX, r - ref, c8))
                    cute.autovec_copy(qx8, vec8(sQX, r - ref, c8))
                    # q's row is read no more: its place takes w's operand k exp(gamma) (GDN-2: beta
                    # inside), so beta is read once an element
                    cute.autovec_copy(kg8, vec8(sQ, r, c8))
                # the keys up to the sub-chunk's end (past it they are left as they are: their columns
                # are masked below)
                for e in cutlass.range(((i + 1) * sub_vectors + PREP_THREADS - 1) // PREP_THREADS, unroll=2):
                    flat_y = tidx + e * PREP_THREADS
                    if flat_y < (i + 1) * sub_vectors:
                        r = flat_y // per_row
                        k8, gam8 = load8(sK, r, c8), load8(sGam, r, c8)
                        y8 = cute.make_rmem_tensor((VEC,), _PAIR)
                        for j in cutlass.range_constexpr(VEC):
                            y8[j] = (k8[j].to(Float32) * fast_exp(ref8[j] - gam8[j])).to(_PAIR)
                        cute.autovec_copy(y8, vec8(sY, r, c8))
                cute.arch.sync_threads()
                if tidx < THREADS:
                    gram, crd = zeroed_acc(mma_sub, tidx, SUB, C)
                    smem_gemm(mma_sub, tidx, gram, sX, sY, False, False, _PAIR)
                    for idx in cutlass.range_constexpr(cute.size(gram)):
                        row, col = crd[idx][0] + ref, crd[idx][1]
                        val = Float32(0.0)
                        if row > col:
                            val = gram[idx]
                            if const_expr(not self.gdn2):
                                val = val * sBeta[row]
                        sA[row, col] = val
                else:
                    scores, crd = zeroed_acc(mma_sub, tidx - THREADS, SUB, C)
                    smem_gemm(mma_sub, tidx - THREADS, scores, sQX, sY, False, False, _PAIR)
                    for idx in cutlass.range_constexpr(cute.size(scores)):
                        row, col = crd[idx][0] + ref, crd[idx][1]
                        if row < rows_left:
                            p = Float32(0.0)
                            if row >= col:
                                p = scores[idx]
                            mP[r0 + row, h, col] = p.to(io)
                cute.arch.sync_threads()  # the factors are read; sA is complete

            # v into the factors' region while T is solved
            if tidx < THREADS:
                load_rows(cta_g2s(io, V), tidx, chunk_rows(mV, r0, h // v_group, V), sV, rows_left)
            cute.arch.cp_async_commit_group()
            # T = (I + A)^-1 by the first group (`blocked_inverse` at its named barrier 1), stored
            # scaled by beta_j (KDA): thread t takes column t % 64 of rows t // 64, t // 64 + 2, ...
            if tidx < THREADS:
                blocked_inverse(sA, sMerge, tidx, barrier_id=1)
                tcol = tidx % C
                col = t_column(sA, tidx, mT, slot, h, self.store_t, io)
                cute.arch.barrier(barrier_id=1, number_of_threads=THREADS)  # every read of T before its copy
                col_scale = Float32(1.0)
                if const_expr(not self.gdn2):
                    col_scale = sBeta[tcol]
                for e in cutlass.range_constexpr(C // 2):
                    sT[tidx // C + 2 * e, tcol] = (col[e] * col_scale).to(io)
            else:  # the second group meanwhile: the scan's operand k exp(last - gamma)
                if tidx >= THREADS:
                    last8 = load8(sGam, last_row, c8)
                    for e in cutlass.range(C * per_row // THREADS, unroll=2):
                        r = (tidx - THREADS + e * THREADS) // per_row
                        k8, gam8 = load8(sK, r, c8), load8(sGam, r, c8)
                        kd8 = cute.make_rmem_tensor((VEC,), io)
                        for j in cutlass.range_constexpr(VEC):
                            kd8[j] = (k8[j].to(Float32) * fast_exp(last8[j] - gam8[j])).to(io)
                        if r < rows_left:
                            cute.autovec_copy(kd8, vec8(mKd[None, h, None], r0 + r, c8))
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.gdn2):  # u = T (w_gate v); v's rows past the sequence are 0 already
                v_row = V // VEC
                for e in cutlass.range(C * v_row // PREP_THREADS, unroll=2):
                    r, cv = (tidx + e * PREP_THREADS) // v_row, (tidx + e * PREP_THREADS) % v_row
                    v8 = load8(sV, r, cv)
                    gate8 = load8(mWg[None, h // w_group, None], r0 + cutlass.min(Int32(r), last_row), cv)
                    for j in cutlass.range_constexpr(VEC):
                        v8[j] = (v8[j].to(Float32) * gate8[j].to(Float32)).to(io)
                    cute.autovec_copy(v8, vec8(sV, r, cv))
                cute.arch.sync_threads()
            # u by the first group; w = T (k exp(gamma)) (GDN-2: beta per channel inside), its operand
            # in q's tile, by the second
            if tidx < THREADS:
                wy_rows_to_gmem(tidx, sT, sV, chunk_rows(mU, r0, h, V), rows_left, io, V)
            else:
                wy_rows_to_gmem(tidx - THREADS, sT, sQ, chunk_rows(mW, r0, h, K), rows_left, io, K)

    @cute.jit
    def _gate_params(
        self, mALog: cute.Tensor, mDtBias: cute.Tensor, h: Int32, a_group: Int32, d_group: Int32, col: Int32
    ):
        """(rate, bias) of the safe gate ``lower_bound * sigmoid(rate (g + bias))`` for output head
        ``h``, key channel ``col``: exp(a_log) and dt_bias where given, else 1 and 0."""
        rate = Float32(1.0)
        bias = Float32(0.0)
        if const_expr(self.safe_gate and self.has_a_log):
            rate = fast_exp(Float32(mALog[h // a_group]))
        if const_expr(self.safe_gate and self.has_dt_bias):
            bias = Float32(mDtBias[h // d_group, col])
        return rate, bias

    @cute.jit
    def _gamma_column(
        self,
        mG: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        sGam: cute.Tensor,
        r0: Int32,
        rows_left: Int32,
        h: Int32,
        groups: Any,
        col: Int32,
    ):
        """gamma of key channel ``col`` down the chunk from token ``r0`` into ``sGam`` [64, K] fp32
        (the cumulative sum of the gate, the safe gate where asked; the gate past the sequence is 0,
        so those rows keep the last real row's gamma); returns the chunk's last gamma."""
        g_group, a_group, d_group = groups
        rate, bias = self._gate_params(mALog, mDtBias, h, a_group, d_group, col)
        hg = h // g_group
        last = cutlass.min(rows_left, CHUNK) - 1
        # every row's load first, from a row inside the sequence, so the 64 loads are in flight
        # together: loaded inside the sum's per-row branch, each waited for the one before (64 serial
        # global round trips a thread, in SASS one LDG a branch)
        gates = cute.make_rmem_tensor((CHUNK,), Float32)
        for r in cutlass.range_constexpr(CHUNK):
            gates[r] = Float32(mG[r0 + cutlass.min(Int32(r), last), hg, col])
        total = Float32(0.0)
        for r in cutlass.range_constexpr(CHUNK):
            gate = gates[r]
            if const_expr(self.safe_gate):
                gate = self.lower_bound / (1.0 + fast_exp(-(gate + bias) * rate))
            total = total + cutlass.select_(Int32(r) < rows_left, gate, Float32(0.0))
            sGam[r, col] = total
        return total

    @cute.jit
    def _beta(self, mBeta: cute.Tensor, r0: Int32, r: Int32, last_row: Int32, bh: Int32, col: Int32):
        """beta of row ``r`` of the chunk from token ``r0`` (KDA: its head's one value; GDN-2: channel
        ``col``) after the options, 0 past ``last_row`` (the chunk's last real row). Read from a row
        inside the chunk whatever ``r``, without a branch: behind one, each read in an unrolled loop
        waited for the one before."""
        tok = r0 + cutlass.min(Int32(r), last_row)
        wr = Float32(0.0)
        if const_expr(self.gdn2):
            wr = Float32(mBeta[tok, bh, col].to(Float32))
        else:
            wr = Float32(mBeta[tok, bh].to(Float32))
        return self._beta_options(wr, r, last_row)

    @cute.jit
    def _beta_options(self, wr: Float32, r: Int32, last_row: Int32):
        """A raw beta of row ``r`` after the options (sigmoid, then the negative-eigenvalue 2x), 0
        past ``last_row``."""
        if const_expr(self.beta_sigmoid):
            wr = 1.0 / (1.0 + fast_exp(-wr))
        if const_expr(self.neg_eigval):
            wr = wr * 2.0
        return Float32(cutlass.select_(Int32(r) <= last_row, wr, Float32(0.0)))

    @cute.jit
    def _beta8(self, mBeta: cute.Tensor, r0: Int32, r: Int32, last_row: Int32, bh: Int32, c8: Int32):
        """GDN-2's `_beta` of channels ``8 c8 .. 8 c8 + 7`` in fp32 registers: one 16-byte load (two
        for fp32 beta) where eight 2-byte ones were (the engine checks beta's alignment)."""
        raw = load8(mBeta[None, bh, None], r0 + cutlass.min(Int32(r), last_row), c8)
        vals = cute.make_rmem_tensor((VEC,), Float32)
        for j in cutlass.range_constexpr(VEC):
            vals[j] = self._beta_options(Float32(raw[j].to(Float32)), r, last_row)
        return vals
