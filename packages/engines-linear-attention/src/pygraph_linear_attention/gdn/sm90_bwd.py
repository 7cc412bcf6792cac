"""The Gated DeltaNet backward in CuTe DSL (the ``gdn_sm90_bwd`` engine): the steps of
`gdn.chunked_bwd` over 64-token chunks, the forward recomputed (the graph stores nothing of it).

Launches, in stream order:

1. The forward's `GdnSm90Fwd.prepare`, also storing each chunk's ``T = (I + A)^-1`` (io dtype: the
   products below take it as an operand), and its split `GdnSm90Fwd.scan`: the state entering each
   chunk (``hs``) and ``v_new``.
2. `GdnSm90Bwd.grad_scan` (grid: sequences x output heads x value blocks of BV): chunks in reverse
   from d_final_state, the gradient of the state in fp32 registers; per chunk it stores the gradient
   of the state leaving the chunk (``dh``) and ``dv_new = scale P^T dO + exp(last - gamma) k dS^T``,
   then ``dS = exp(last) dS - dv_new^T w + scale (exp(gamma) dO)^T q``; its last dS is
   d_initial_state.
3. `GdnSm90Bwd.grad_output` (grid: chunk slots x output heads): the output's and the passed state's
   terms: dq (whole), dk's first terms, dw and those terms of d gamma.
4. `GdnSm90Bwd.grad_wy` (same grid): the WY transform's terms from T, dw and dv_new: dv, the rest
   of dk and d beta, d gamma's reverse sum (the decay's gradient) and the gates' chain rules.
   With WGMMA 2 one kernel takes 3 and 4 (`ChunkGradWsKernels.grad_chunk_ws`,
   `gdn.sm90_bwd_chunk_ws`): two warpgroups, each on its own chain of products; dk's first terms and
   dw stay on chip.
With SEGMENT (WGMMA 1 or 2) the two scans of 1 and 2 run segmented, a long sequence over segments x heads
x blocks CTAs: `GdnSm90Fwd.scan_wg` phase 1 (each segment's transition: B and M rows, with the
forward's warmup), `GdnSm90Fwd.segment_combine` (the state entering each segment), `scan_wg` phase
2 (every segment from its entering state, storing as above); then `grad_scan_wg` phase 1 (each
segment's G, the gradient at its start from zero at its end, the warmup from its start),
`segment_combine` reversed (the gradient at each segment's end: ``D M^T + G`` segment by segment
from the last, with the forward's M) and `grad_scan_wg` phase 2 (every segment from the gradient at its
end, storing as above).

5. `head_sum` (dQ, dK through the l2 norm where the kernel normalized them, dV), `gate_sum` (dG,
   dBeta) and `param_sum` (d_a_log, d_dt_bias): the per-output-head gradients summed over the heads
   each input head serves. Where a sum would only cast (one output head per input head, no l2
   norm) steps 3 and 4 write dQ, dK and dV themselves and it is not launched.

The products are the forward's: ``mma.sync.m16n8k16`` over io-dtype operands in shared memory,
fp32 accumulators, 128 threads per CTA. A product ``x @ y`` is written `matmul(..., x, y)` with each
operand a shared tile or `trans(tile)`, its transpose (read by the transposing ldmatrix). Row sums of a
64-row accumulator go to a shared fp32 vector by one atomic add per row a thread holds; column
sums through a shared fp32 tile, one thread per column.

The gradient scans live in `gdn.sm90_bwd_scans` (a mixin of `GdnSm90Bwd`), the shared tiles,
products and sums in `common.sm90_tiles`.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass import Float32, Int32, const_expr

from pygraph_linear_attention.common.sm90_tiles import (
    CHUNK,
    DTYPES,
    THREADS,
    acc_to_gmem,
    acc_to_smem,
    aliased_smem_tiles,
    aligned_stride,
    block_sum,
    chunk_rows,
    col_sums_sub,
    cta_g2s,
    fast_exp,
    gamma_row,
    grad_rows_to_gmem,
    l2_normalize_rows,
    load_rows,
    matmul,
    row_inv_norms,
    row_sums,
    scaled_rows,
    slot_chunk,
    smem_tile,
    smem_vector,
    tail_decay,
    trans,
    warp_mma,
    zero_vector,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_bwd_chunk import (
    ChunkGradKernels,
    beta_cols,
    da_terms,
    decayed_cols,
    dp_terms,
    dv_rows,
)
from pygraph_linear_attention.gdn.sm90_bwd_chunk_ws import WG2_THREADS, ChunkGradWsKernels
from pygraph_linear_attention.gdn.sm90_bwd_scans import GradScanKernels
from pygraph_linear_attention.gdn.sm90_fwd import GdnSm90Fwd

__all__ = ["GdnSm90Bwd"]


class GdnSm90Bwd(GradScanKernels, ChunkGradKernels, ChunkGradWsKernels):
    """One static configuration of the backward: the forward's (which it recomputes) and which
    gradients the chunk kernels write themselves. The gradients' dtypes are their pointers' (the
    stores convert to each tensor's element type)."""

    def __init__(
        self,
        *,
        key_dim: int,
        value_dim: int,
        block_v: int,
        io_dtype: str,
        beta_dtype: str,
        h0_dtype: str,
        cu_dtype: str,
        l2norm: bool,
        beta_sigmoid: bool,
        neg_eigval: bool,
        safe_gate: bool,
        has_dt_bias: bool,
        has_h0: bool,
        has_dht: bool,
        direct_qk: bool,
        direct_v: bool,
        wgmma: int = 0,
        stages: int = 1,
        segment: int = 0,
    ) -> None:
        self.K, self.V, self.BV = key_dim, value_dim, block_v
        self.io = DTYPES[io_dtype]
        self.l2norm, self.beta_sigmoid, self.neg_eigval = l2norm, beta_sigmoid, neg_eigval
        self.safe_gate, self.has_dt_bias = safe_gate, has_dt_bias
        self.has_h0, self.has_dht = has_h0, has_dht
        # one output head per q/k head and no l2 norm: dQ and dK written by the chunk kernels (the head
        # sum would only cast); one output head per v head: dV likewise
        self.direct_qk, self.direct_v = direct_qk, direct_v
        self.wgmma = wgmma >= 1  # the scans on warpgroup MMAs (`GdnSm90Fwd.scan_wg`, `grad_scan_wg`)
        # WGMMA 2: the chunk gradients as one kernel on two warpgroups split by dependency
        # (`grad_chunk_ws`), not grad_output then grad_wy
        self.fused_grad = wgmma == 2
        # STAGES of both scans (with wgmma): 2 prefetches the next chunk's tiles
        self.stages = stages
        # SEGMENT (with wgmma): chunks a segment of both scans, each run as its segments' transitions,
        # their combine and every segment at once from its entering state or gradient (`scan_wg` and
        # `grad_scan_wg` at phases 1 and 2, `segment_combine` forward and reversed)
        self.segment = segment
        self.fwd = GdnSm90Fwd(
            key_dim=key_dim, value_dim=value_dim, block_v=block_v, io_dtype=io_dtype, beta_dtype=beta_dtype,
            h0_dtype=h0_dtype, ht_dtype="float32", cu_dtype=cu_dtype, l2norm=l2norm,
            beta_sigmoid=beta_sigmoid, neg_eigval=neg_eigval, safe_gate=safe_gate, has_dt_bias=has_dt_bias,
            has_h0=has_h0, store_ht=False, stages=stages, split=True, store_t=True, wgmma=self.wgmma, segment=segment,
        )  # fmt: skip

    # ------------------------------------------------------------------ host side (traced once)
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        a_log_ptr: cute.Pointer,
        dt_bias_ptr: cute.Pointer,
        cu_ptr: cute.Pointer,
        h0_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        dht_ptr: cute.Pointer,
        dq_final_ptr: cute.Pointer,
        dk_final_ptr: cute.Pointer,
        dv_final_ptr: cute.Pointer,
        dg_final_ptr: cute.Pointer,
        dbeta_final_ptr: cute.Pointer,
        dh0_ptr: cute.Pointer,
        da_log_ptr: cute.Pointer,
        ddt_bias_ptr: cute.Pointer,
        gamma_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        t_ptr: cute.Pointer,
        hs_ptr: cute.Pointer,
        vnew_ptr: cute.Pointer,
        dh_ptr: cute.Pointer,
        dvnew_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dw_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        dgp_ptr: cute.Pointer,
        dg_ptr: cute.Pointer,
        dbeta_ptr: cute.Pointer,
        da_ptr: cute.Pointer,
        seg_mb_ptr: cute.Pointer,
        seg_st_ptr: cute.Pointer,
        con_ptr: cute.Pointer,
        tokens: Int32,
        sequences: Int32,
        search_steps: Int32,
        heads_qk: Int32,
        heads_v: Int32,
        heads_out: Int32,
        heads_g: Int32,
        heads_beta: Int32,
        heads_a_log: Int32,
        heads_dt_bias: Int32,
        scale: Float32,  # the forward's output's: a run-time value, so one compile serves every scale
        stream: Any,
    ):
        K, V, C = self.K, self.V, CHUNK
        slots = tokens // C + sequences + 1

        def rows3(ptr, heads, dim):
            return cute.make_tensor(
                ptr, cute.make_layout((tokens, heads, dim), stride=(aligned_stride(heads * dim), dim, 1))
            )

        def rows2(ptr, heads):
            return cute.make_tensor(ptr, cute.make_layout((tokens, heads), stride=(heads, 1)))

        def states(ptr, count, rows, cols):
            shape = (count, heads_out, rows, cols)
            stride = (aligned_stride(heads_out * rows * cols), rows * cols, cols, 1)
            return cute.make_tensor(ptr, cute.make_layout(shape, stride=stride))

        mQ, mK, mV = rows3(q_ptr, heads_qk, K), rows3(k_ptr, heads_qk, K), rows3(v_ptr, heads_v, V)
        mG, mBeta = rows2(g_ptr, heads_g), rows2(beta_ptr, heads_beta)
        mALog = cute.make_tensor(a_log_ptr, cute.make_layout((heads_a_log,)))
        mDtBias = cute.make_tensor(dt_bias_ptr, cute.make_layout((heads_dt_bias,)))
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((sequences + 1,)))
        mH0, mDht, mDh0 = (
            states(h0_ptr, sequences, V, K),
            states(dht_ptr, sequences, V, K),
            states(dh0_ptr, sequences, V, K),
        )
        mDo = rows3(do_ptr, heads_out, V)
        mDQ, mDK, mDV = (
            rows3(dq_final_ptr, heads_qk, K),
            rows3(dk_final_ptr, heads_qk, K),
            rows3(dv_final_ptr, heads_v, V),
        )
        mDG, mDBeta = rows2(dg_final_ptr, heads_g), rows2(dbeta_final_ptr, heads_beta)
        mDALog = cute.make_tensor(da_log_ptr, cute.make_layout((heads_a_log,)))
        mDDtBias = cute.make_tensor(ddt_bias_ptr, cute.make_layout((heads_dt_bias,)))
        mGamma = rows2(gamma_ptr, heads_out)
        mW, mU = rows3(w_ptr, heads_out, K), rows3(u_ptr, heads_out, V)
        mT, mHs, mDh = states(t_ptr, slots, C, C), states(hs_ptr, slots, V, K), states(dh_ptr, slots, V, K)
        mVnew, mDvnew = rows3(vnew_ptr, heads_out, V), rows3(dvnew_ptr, heads_out, V)
        mDq, mDk, mDw, mDv = (
            rows3(dq_ptr, heads_out, K),
            rows3(dk_ptr, heads_out, K),
            rows3(dw_ptr, heads_out, K),
            rows3(dv_ptr, heads_out, V),
        )
        mDgp, mDg, mDb, mDa = (
            rows2(dgp_ptr, heads_out),
            rows2(dg_ptr, heads_out),
            rows2(dbeta_ptr, heads_out),
            rows2(da_ptr, heads_out),
        )
        groups = (
            heads_out // heads_qk, heads_out // heads_v, heads_out // heads_g, heads_out // heads_beta,
            heads_out // heads_a_log, heads_out // heads_dt_bias,
        )  # fmt: skip
        fwd = self.fwd
        # with SEGMENT: each segment's B (then G) and M rows, the state entering it (then the gradient
        # at its end); each chunk's largest beta ||k||^2 (the warmup's test)
        seg_slots, mSegMB, mSegST, mCon = fwd.segment_tensors(
            seg_mb_ptr, seg_st_ptr, con_ptr, tokens, sequences, heads_out
        )
        fwd.prepare(
            mK,
            mV,
            mG,
            mBeta,
            mALog,
            mDtBias,
            mCu,
            mGamma,
            mW,
            mU,
            mT,
            sequences,
            search_steps,
            groups,
            mQ,
            mT,
            mCon,  # (written with SEGMENT)
        ).launch(grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream)
        blocks = V // self.BV
        if const_expr(self.segment):
            segs = (mSegMB, mSegST, mCon, sequences, search_steps)
            state = (mK, mW, mU, mGamma, mCu, mH0, mH0, mHs, mVnew, groups[0])
            fwd.scan_wg(*state, *segs, 1).launch(
                grid=[seg_slots, heads_out, (V + K) // self.BV], block=[THREADS, 1, 1], stream=stream
            )
            fwd.segment_combine(mSegMB, mSegST, mCu, mH0, self.has_h0).launch(
                grid=[sequences, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
            fwd.scan_wg(*state, *segs, 2).launch(
                grid=[seg_slots, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
            grad = (mQ, mK, mW, mGamma, mDo, mCu, mDht, mDh, mDvnew, mDh0, groups[0], scale, None)
            self.grad_scan_wg(*grad, *segs, 1).launch(
                grid=[seg_slots, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
            fwd.segment_combine(mSegMB, mSegST, mCu, mDht, self.has_dht, True).launch(
                grid=[sequences, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
            self.grad_scan_wg(*grad, *segs, 2).launch(
                grid=[seg_slots, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
        else:
            fwd.launch_scan(
                mQ, mK, mW, mU, mGamma, mCu, mH0, mVnew, mH0, mHs, mVnew, sequences, heads_out, groups[0], scale,
                stream,
            )  # fmt: skip
            scan = self.grad_scan_wg if const_expr(self.wgmma) else self.grad_scan
            scan(mQ, mK, mW, mGamma, mDo, mCu, mDht, mDh, mDvnew, mDh0, groups[0], scale).launch(
                grid=[sequences, heads_out, blocks], block=[THREADS, 1, 1], stream=stream
            )
        if const_expr(self.fused_grad):
            self.grad_chunk_ws(
                mQ, mK, mV, mG, mBeta, mALog, mDtBias, mCu, mDo, mT, mHs, mDh, mVnew, mDvnew, mDq, mDQ, mDk, mDK,
                mDv, mDV, mDg, mDb, mDa, sequences, search_steps, groups, scale,
            ).launch(grid=[slots, heads_out, 1], block=[WG2_THREADS, 1, 1], stream=stream)  # fmt: skip
        else:
            self.grad_output(
                mQ, mK, mGamma, mDo, mCu, mHs, mDh, mVnew, mDvnew, mDq, mDQ, mDk, mDw, mDgp, sequences,
                search_steps, groups[0], scale,
            ).launch(grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream)  # fmt: skip
            self.grad_wy(
                mK, mV, mG, mBeta, mALog, mDtBias, mCu, mT, mDvnew, mDw, mDk, mDgp, mDv, mDK, mDV, mDg, mDb, mDa,
                sequences, search_steps, groups,
            ).launch(grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream)  # fmt: skip
        if const_expr(not self.direct_qk):
            self.head_sum(mDq, mQ, mDQ, groups[0], K, True).launch(
                grid=[tokens, heads_qk, 1], block=[THREADS, 1, 1], stream=stream
            )
            self.head_sum(mDk, mK, mDK, groups[0], K, True).launch(
                grid=[tokens, heads_qk, 1], block=[THREADS, 1, 1], stream=stream
            )
        if const_expr(not self.direct_v):
            self.head_sum(mDv, mV, mDV, groups[1], V, False).launch(
                grid=[tokens, heads_v, 1], block=[THREADS, 1, 1], stream=stream
            )
        token_blocks = (tokens + THREADS - 1) // THREADS
        self.gate_sum(mDg, mDG, groups[2], tokens).launch(
            grid=[token_blocks, heads_g, 1], block=[THREADS, 1, 1], stream=stream
        )
        self.gate_sum(mDb, mDBeta, groups[3], tokens).launch(
            grid=[token_blocks, heads_beta, 1], block=[THREADS, 1, 1], stream=stream
        )
        if const_expr(self.safe_gate):
            self.param_sum(mDa, mDALog, groups[4], tokens).launch(
                grid=[heads_a_log, 1, 1], block=[THREADS, 1, 1], stream=stream
            )
            if const_expr(self.has_dt_bias):
                self.param_sum(mDg, mDDtBias, groups[5], tokens).launch(
                    grid=[heads_dt_bias, 1, 1], block=[THREADS, 1, 1], stream=stream
                )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def grad_output(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mGamma: cute.Tensor,
        mDo: cute.Tensor,
        mCu: cute.Tensor,
        mHs: cute.Tensor,
        mDh: cute.Tensor,
        mVnew: cute.Tensor,
        mDvnew: cute.Tensor,
        mDq: cute.Tensor,
        mDQ: cute.Tensor,
        mDk: cute.Tensor,
        mDw: cute.Tensor,
        mDgp: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        k_group: Int32,
        scale: Float32,
    ):
        """The output's terms (o = scale (exp(gamma) q h^T + P v_new)) and the passed state's
        (S' = exp(last) h + (v_new exp(last - gamma))^T k) of one chunk's gradients.

        The products over the key dim in two halves, one after the other through the same tiles (q,
        k and the states h, dh at KH = K / 2 columns): 105 KB of shared memory at K = V = 128, so two
        CTAs share an SM, where the whole-K tiles took 168 KB and left one CTA of 4 warps per SM,
        latency-bound. q k^T (d gamma's terms dP * (q k^T)) is taken first from whole q and k rows
        loaded into the state tiles' memory."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        KH = K // 2
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        hk = h // k_group
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            sDo, sVn, sDvn = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V), smem_tile(smem, io, C, V)
            sQ, sK = smem_tile(smem, io, C, KH), smem_tile(smem, io, C, KH)
            sH, sQrows = aliased_smem_tiles(smem, io, (V, KH), (C, K))
            sDh, sKrows = aliased_smem_tiles(smem, io, (V, KH), (C, K))
            sDp = smem_tile(smem, io, C, C)
            sGamma, sDg, sKd = smem_vector(smem), smem_vector(smem), smem_vector(smem)
            sQinv, sKinv = smem_vector(smem), smem_vector(smem)
            sRed = smem_vector(smem, 4)
            g2s_h, g2s_row, g2s_v = cta_g2s(io, KH), cta_g2s(io, K), cta_g2s(io, V)
            load_rows(g2s_row, tidx, chunk_rows(mQ, r0, hk, K), sQrows, rows_left)
            load_rows(g2s_row, tidx, chunk_rows(mK, r0, hk, K), sKrows, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mDo, r0, h, V), sDo, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mVnew, r0, h, V), sVn, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
            load_rows(g2s_h, tidx, chunk_rows(mQ, r0, hk, KH, 0), sQ, rows_left)
            load_rows(g2s_h, tidx, chunk_rows(mK, r0, hk, KH, 0), sK, rows_left)
            cute.arch.cp_async_commit_group()
            if tidx < C:
                sGamma[tidx] = gamma_row(mGamma, r0, rows_left, h, tidx)
            zero_vector(sDg, tidx)
            zero_vector(sKd, tidx)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                row_inv_norms(sQrows, tidx, K, sQinv)
                row_inv_norms(sKrows, tidx, K, sKinv)
                cute.arch.sync_threads()
                scaled_rows(sQrows, sQrows, lambda r: sQinv[r], tidx, C, K)
                scaled_rows(sKrows, sKrows, lambda r: sKinv[r], tidx, C, K)
                cute.arch.sync_threads()
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            last = sGamma[last_row]
            mma_cc, mma_ch = warp_mma(io, C, C), warp_mma(io, C, KH)

            # dP = scale dO v_new^T on the causal, real part, with the decay; d gamma's terms dP * (q k^T)
            dp, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, dp, sDo, trans(sVn), io)
            qk, _ = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, qk, sQrows, trans(sKrows), io)
            dp_terms(dp, qk, crd_p, mma_cc.get_slice(tidx).partition_C(sDp), sGamma, rows_left, scale, io)
            row_sums(dp, crd_p, sDg)
            col_sums_sub(dp, crd_p, sDg, tidx)

            part = Float32(0.0)  # sum(dh * h), over both halves
            # a loop, not unrolled: the two halves' code unrolled together took 255 registers and spilled
            for half in cutlass.range(2, unroll=1):
                # the states after the whole rows (their memory) are read; the second half after every
                # product of the first
                cute.arch.sync_threads()
                if half == 1:
                    load_rows(g2s_h, tidx, chunk_rows(mQ, r0, hk, KH, 1), sQ, rows_left)
                    load_rows(g2s_h, tidx, chunk_rows(mK, r0, hk, KH, 1), sK, rows_left)
                load_rows(g2s_h, tidx, cute.local_tile(mHs[slot, h, None, None], (V, KH), (0, half)), sH, V)
                load_rows(g2s_h, tidx, cute.local_tile(mDh[slot, h, None, None], (V, KH), (0, half)), sDh, V)
                cute.arch.cp_async_commit_group()
                cute.arch.cp_async_wait_group(0)
                cute.arch.sync_threads()
                if const_expr(self.l2norm):
                    scaled_rows(sQ, sQ, lambda r: sQinv[r], tidx, C, KH)
                    scaled_rows(sK, sK, lambda r: sKinv[r], tidx, C, KH)
                    cute.arch.sync_threads()

                # dq = scale exp(gamma) dO h + dP k; d gamma's terms dq_h * q
                dq, crd = zeroed_acc(mma_ch, tidx, C, KH)
                matmul(mma_ch, tidx, dq, sDo, sH, io)
                for e in cutlass.range_constexpr(cute.size(dq)):
                    dq[e] = dq[e] * scale * fast_exp(sGamma[crd[e][0]])
                terms, _ = zeroed_acc(mma_ch, tidx, C, KH)
                q_part = mma_ch.get_slice(tidx).partition_C(sQ)
                for e in cutlass.range_constexpr(cute.size(dq)):
                    terms[e] = dq[e] * q_part[e].to(Float32)
                row_sums(terms, crd, sDg)
                matmul(mma_ch, tidx, dq, sDp, sK, io)
                grad_rows_to_gmem(
                    mma_ch, tidx, dq, crd, self.direct_qk, mDQ, mDq, r0, h, KH, rows_left, io, half
                )

                # dk = dP^T q + exp(last - gamma) (v_new dh); d gamma's terms -k * the passed part
                dk, _ = zeroed_acc(mma_ch, tidx, C, KH)
                matmul(mma_ch, tidx, dk, sVn, sDh, io)
                k_part = mma_ch.get_slice(tidx).partition_C(sK)
                for e in cutlass.range_constexpr(cute.size(dk)):
                    dk[e] = dk[e] * tail_decay(crd[e][0], rows_left, last, sGamma)
                    terms[e] = dk[e] * k_part[e].to(Float32)
                row_sums(terms, crd, sKd)
                matmul(mma_ch, tidx, dk, trans(sDp), sQ, io)
                acc_to_gmem(mma_ch, tidx, dk, crd, chunk_rows(mDk, r0, h, KH, half), rows_left, Float32)

                # dw = -dv_new h
                dw, _ = zeroed_acc(mma_ch, tidx, C, KH)
                matmul(mma_ch, tidx, dw, sDvn, sH, io)
                for e in cutlass.range_constexpr(cute.size(dw)):
                    dw[e] = -dw[e]
                acc_to_gmem(mma_ch, tidx, dw, crd, chunk_rows(mDw, r0, h, KH, half), rows_left, io)

                # the last row's d gamma: the state leaving is exp(last) h + ...: sum(dh * h) exp(last)
                for e in cutlass.range(V * KH // THREADS, unroll=8):
                    flat = tidx + e * THREADS
                    r, col = flat // KH, flat % KH
                    part = part + sDh[r, col].to(Float32) * sH[r, col].to(Float32)

            d_last = block_sum(part, tidx, sRed) * fast_exp(last)  # its barriers complete the row sums
            if tidx < rows_left and tidx < C:
                dgamma = sDg[tidx] - sKd[tidx]
                if tidx == last_row:
                    total = Float32(0.0)
                    for r in cutlass.range(C, unroll=8):
                        total = total + sKd[r]
                    dgamma = dgamma + d_last + total
                mDgp[r0 + tidx, h] = dgamma

    @cute.kernel
    def grad_wy(
        self,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,
        mBeta: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        mCu: cute.Tensor,
        mT: cute.Tensor,
        mDvnew: cute.Tensor,
        mDw: cute.Tensor,
        mDk: cute.Tensor,
        mDgp: cute.Tensor,
        mDv: cute.Tensor,
        mDK: cute.Tensor,
        mDV: cute.Tensor,
        mDg: cute.Tensor,
        mDb: cute.Tensor,
        mDa: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
    ):
        """The WY transform's terms (w = T (beta exp(gamma) k), u = T (beta v), T = (I + A)^-1) and
        the gates' chain rules of one chunk."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group = groups[0], groups[1]
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            # 80 KB of tiles, so two CTAs share an SM: v and dv_new are dead once dT and dv are
            # formed, and their memory then holds T^T dT and dA's gram term
            sK, sDw = smem_tile(smem, io, C, K), smem_tile(smem, io, C, K)
            sV, sDgram = aliased_smem_tiles(smem, io, (C, V), (C, C))
            sDvn, sTmp = aliased_smem_tiles(smem, io, (C, V), (C, C))
            sT, sDt = smem_tile(smem, io, C, C), smem_tile(smem, io, C, C)
            sGamma, sWr, sDwrite, sDgam, sRow, sDgamma = (smem_vector(smem) for _ in range(6))
            g2s_k, g2s_v, g2s_c = cta_g2s(io, K), cta_g2s(io, V), cta_g2s(io, C)
            load_rows(g2s_k, tidx, chunk_rows(mK, r0, h // k_group, K), sK, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mV, r0, h // v_group, V), sV, rows_left)
            load_rows(g2s_k, tidx, chunk_rows(mDw, r0, h, K), sDw, rows_left)
            load_rows(g2s_v, tidx, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
            load_rows(g2s_c, tidx, mT[slot, h, None, None], sT, C)
            cute.arch.cp_async_commit_group()

            raw_b, gate, wr, biased, rate = self.fwd.chunk_gates(
                mG, mBeta, mALog, mDtBias, groups, r0, rows_left, h, tidx, sGamma, sWr
            )
            zero_vector(sDwrite, tidx)
            zero_vector(sDgam, tidx)
            zero_vector(sRow, tidx)
            cute.arch.sync_threads()
            if tidx >= 32 and tidx < C:
                sGamma[tidx] = sGamma[tidx] + sGamma[31]
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                l2_normalize_rows(sK, tidx, K)
                cute.arch.sync_threads()
            mma_cc, mma_ck, mma_cv = warp_mma(io, C, C), warp_mma(io, C, K), warp_mma(io, C, V)

            # T's gradient: dT = dw (beta exp(gamma) k)^T + dv_new (beta v)^T, the gates as column
            # scales of the fp32 accumulator: ((dw k^T) exp(gamma_j) + dv_new v^T) beta_j
            dt, crd_p = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, dt, sDw, trans(sK), io)
            decayed_cols(dt, crd_p, sGamma)
            matmul(mma_cc, tidx, dt, sDvn, trans(sV), io)
            beta_cols(dt, crd_p, sWr)
            acc_to_smem(mma_cc, tidx, dt, sDt, io)

            # u = T (beta v): dv = beta T^T dv_new, and beta's term (T^T dv_new) . v
            dvw, crd_v = zeroed_acc(mma_cv, tidx, C, V)
            matmul(mma_cv, tidx, dvw, trans(sT), sDvn, io)
            dv_rows(dvw, crd_v, mma_cv.get_slice(tidx).partition_C(sV), sWr, sDwrite)
            grad_rows_to_gmem(mma_cv, tidx, dvw, crd_v, self.direct_v, mDV, mDv, r0, h, V, rows_left, io)
            cute.arch.sync_threads()  # sDt complete; v and dv_new read for the last time

            # T = (I + A)^-1: dA = -T^T dT T^T; A = beta (k k^T) exp(gamma_i - gamma_j), strictly lower
            tmp, _ = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, tmp, trans(sT), sDt, io)
            acc_to_smem(mma_cc, tidx, tmp, sTmp, io)
            cute.arch.sync_threads()
            da, _ = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, da, sTmp, trans(sT), io)
            gram, _ = zeroed_acc(mma_cc, tidx, C, C)
            matmul(mma_cc, tidx, gram, sK, trans(sK), io)
            dg_part = mma_cc.get_slice(tidx).partition_C(sDgram)
            da_terms(da, gram, crd_p, dg_part, sGamma, sWr, sDwrite, sDgam, io)
            col_sums_sub(da, crd_p, sDgam, tidx)
            cute.arch.sync_threads()  # sDgram complete

            # w = T (beta exp(gamma) k): dk += beta exp(gamma) T^T dw + (dA' + dA'^T) k
            dkw, crd = zeroed_acc(mma_ck, tidx, C, K)
            matmul(mma_ck, tidx, dkw, trans(sT), sDw, io)
            terms_k, _ = zeroed_acc(mma_ck, tidx, C, K)
            k_part = mma_ck.get_slice(tidx).partition_C(sK)
            prior = mma_ck.get_slice(tidx).partition_C(chunk_rows(mDk, r0, h, K))
            for e in cutlass.range_constexpr(cute.size(dkw)):
                row = crd[e][0]
                e_row = fast_exp(sGamma[row])
                terms_k[e] = dkw[e] * k_part[e].to(Float32) * e_row
                before = Float32(0.0)
                if row < rows_left:
                    before = Float32(prior[e])
                dkw[e] = before + dkw[e] * sWr[row] * e_row
            row_sums(terms_k, crd, sRow)
            matmul(mma_ck, tidx, dkw, sDgram, sK, io)
            matmul(mma_ck, tidx, dkw, trans(sDgram), sK, io)
            grad_rows_to_gmem(mma_ck, tidx, dkw, crd, self.direct_qk, mDK, mDk, r0, h, K, rows_left, io)
            cute.arch.sync_threads()  # the column sums and every row sum are in

            # d gamma, then the decay's gradient: gamma_r = g_0 + ... + g_r, so its reverse cumulative sum
            if tidx < C:
                dgamma = sDgam[tidx] + sRow[tidx] * wr
                if tidx < rows_left:
                    dgamma = dgamma + Float32(mDgp[r0 + tidx, h])
                sDgamma[tidx] = dgamma
            cute.arch.sync_threads()
            self.gate_chain_rules(
                tidx, rows_left, r0, h, sDgamma, sDwrite, sRow, raw_b, gate, biased, rate, mDg, mDb, mDa
            )

    @cute.kernel
    def head_sum(
        self,
        mSrc: cute.Tensor,
        mRaw: cute.Tensor,
        mDst: cute.Tensor,
        group: Int32,
        D: cutlass.Constexpr,
        l2: cutlass.Constexpr,
    ):
        """dst[t, j] = the sum of src[t, j * group + i] over i < group (one CTA per token and head, a
        thread per column), taken back through the row's l2 normalization where the kernels applied
        one (``l2`` and the configuration's l2norm; ``mRaw``: the rows before it)."""
        tidx, _, _ = cute.arch.thread_idx()
        tok, j, _ = cute.arch.block_idx()
        smem = utils.SmemAllocator()
        sRed = smem_vector(smem, 4)
        acc = Float32(0.0)
        if tidx < D:
            for i in cutlass.range(group, unroll=1):
                acc = acc + Float32(mSrc[tok, j * group + i, tidx])
        if const_expr(l2 and self.l2norm):
            x = Float32(0.0)
            if tidx < D:
                x = Float32(mRaw[tok, j, tidx].to(Float32))
            norm = cute.math.sqrt(block_sum(x * x, tidx, sRed))
            floored = cute.math.max(norm, Float32(1e-12))
            y = x / floored
            along = block_sum(acc * y, tidx, sRed)
            if norm > 1e-12:
                acc = (acc - y * along) / floored
            else:
                acc = acc / 1e-12
        if tidx < D:
            mDst[tok, j, tidx] = acc.to(mDst.element_type)

    @cute.kernel
    def gate_sum(self, mSrc: cute.Tensor, mDst: cute.Tensor, group: Int32, tokens: Int32):
        """`head_sum` for [T, heads] gates: a thread per token."""
        tidx, _, _ = cute.arch.thread_idx()
        tb, j, _ = cute.arch.block_idx()
        tok = tb * THREADS + tidx
        if tok < tokens:
            acc = Float32(0.0)
            for i in cutlass.range(group, unroll=1):
                acc = acc + Float32(mSrc[tok, j * group + i])
            mDst[tok, j] = acc.to(mDst.element_type)

    @cute.kernel
    def param_sum(self, mSrc: cute.Tensor, mDst: cute.Tensor, group: Int32, tokens: Int32):
        """dst[p] = the sum of src over every token and the heads p serves (one CTA per parameter)."""
        tidx, _, _ = cute.arch.thread_idx()
        p, _, _ = cute.arch.block_idx()
        smem = utils.SmemAllocator()
        sRed = smem_vector(smem, 4)
        acc = Float32(0.0)
        for tb in cutlass.range((tokens + THREADS - 1) // THREADS, unroll=1):
            tok = tb * THREADS + tidx
            if tok < tokens:
                for i in cutlass.range(group, unroll=1):
                    acc = acc + Float32(mSrc[tok, p * group + i])
        total = block_sum(acc, tidx, sRed)
        if tidx == 0:
            mDst[p] = total.to(mDst.element_type)
