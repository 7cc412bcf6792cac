"""The Gated DeltaNet forward in CuTe DSL (the ``gdn_sm90`` engine): two kernels (three with SPLIT)
over 64-token chunks.

1. `GdnSm90Fwd.prepare` (grid: chunk slots x output heads, 128 threads): per chunk, the options
   applied to g, beta and k, the cumulative log decay gamma, ``A`` (strictly lower, decay-weighted
   ``beta k k^T``, fp32), ``T = (I + A)^-1`` and from it ``w = T (beta exp(gamma) k)`` and
   ``u = T (beta v)``; gamma (fp32), w and u (the io dtype) go to the workspace. No chunk table:
   sequence n's chunks take the slots from ``cu_seqlens[n] // 64 + n`` on (those ranges never
   overlap, and ``T // 64 + N + 1`` slots hold them for any lengths), and each CTA finds its
   sequence by a binary search of ``cu_seqlens``, so nothing is read on the host or built first.
2. `GdnSm90Fwd.scan` (grid: sequences x output heads x value blocks of ``BV``): the state
   ``S`` [BV, K] carried chunk after chunk in fp32 registers (the accumulator of its own update);
   per chunk ``v_new = u - w S^T``, the output ``o = scale (exp(gamma) q S^T + (q k^T * decay) v_new)``
   and ``S = exp(gamma_last) S + (v_new exp(gamma_last - gamma))^T k``. With ``split`` (SPLIT) it
   stores each chunk's entering state and v_new instead of the output (`GdnSm90Fwd.scan_wg` with
   ``wgmma``: the same on warpgroup MMAs, the state carried transposed), and
3. `GdnSm90Fwd.output` (grid: chunk slots x output heads x value blocks) computes every chunk's
   output at once from them.

Every product outside `scan_wg` is a warp-level ``mma.sync.m16n8k16`` (bf16 / fp16 operands, fp32 accumulators)
over operands in shared memory, read by ``ldmatrix`` (transposed where the product wants the
operand's other major mode: S's update reads v_new and k column-wise from their row-major tiles).
Tiles arrive by 16-byte ``cp.async`` copies, zero-filled past the sequence's end (the zero-token
padding `common.chunked` relies on); stores are predicated per element on the sequence's end.

The inverse is `common.sm90_tiles.blocked_inverse` on all four warps (16 x 16 diagonal blocks by
forward substitution in fp32, merged on tf32 MMAs); its columns are stored scaled by their token's
gates, as ``T diag(beta exp(gamma))`` and ``T diag(beta)``, into A's memory: w and u are then
products with k and v as loaded.

The scans of 2 live in `gdn.sm90_split_scan`, the output kernels in `gdn.sm90_output`, the fused
warpgroup scans in `gdn.sm90_fused` and `gdn.sm90_fused_ws` (mixins of `GdnSm90Fwd`), the shared
tiles, copies and products in `common.sm90_tiles`.
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
    INVERSE_STRIDE,
    MERGE_STRIDE,
    THREADS,
    acc_to_gmem,
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
    t_column,
    warp_mma,
    wy_rows_to_gmem,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_fused import FusedScanKernels
from pygraph_linear_attention.gdn.sm90_fused_ws import WS_THREADS, FusedWsScanKernels
from pygraph_linear_attention.gdn.sm90_output import OutputKernels, causal_decay
from pygraph_linear_attention.gdn.sm90_split_scan import SplitScanKernels


class GdnSm90Fwd(SplitScanKernels, OutputKernels, FusedScanKernels, FusedWsScanKernels):
    """One static configuration of the forward: dims, value block, dtypes and options."""

    # KDA / GDN-2 (`kda.sm90_fwd.KdaSm90Fwd`): the decay is per key channel, so `scan_wg` and
    # `output` take prepare's decayed operands (k exp(last - gamma), q exp(gamma), the chunk's scores)
    # and per-channel decays instead of a gamma per row
    channel_decay = False

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
        l2norm: bool,
        beta_sigmoid: bool,
        neg_eigval: bool,
        safe_gate: bool,
        has_dt_bias: bool,
        has_h0: bool,
        store_ht: bool,
        stages: int = 1,
        split: bool = False,
        store_t: bool = False,
        wgmma: int = 0,
        segment: int = 0,
    ) -> None:
        self.K, self.V, self.BV = key_dim, value_dim, block_v
        self.io = DTYPES[io_dtype]
        self.beta_t = DTYPES[beta_dtype]
        self.h0_t, self.ht_t = DTYPES[h0_dtype], DTYPES[ht_dtype]
        self.cu_t = cutlass.Int64 if cu_dtype == "int64" else Int32
        self.l2norm, self.beta_sigmoid, self.neg_eigval = l2norm, beta_sigmoid, neg_eigval
        self.safe_gate, self.has_dt_bias = safe_gate, has_dt_bias
        self.has_h0, self.store_ht = has_h0, store_ht
        # split: the scan stores each chunk's entering state and v_new, and `output` computes every
        # chunk's output at once (two products per chunk step in the scan instead of five)
        self.split = split
        self.store_t = store_t  # prepare also stores each chunk's T = (I + A)^-1 (the backward reads it)
        self.stages = stages  # the scan's shared buffers of q, k, w, u and gamma: 2 prefetches the next chunk
        # 1: the split scan on warpgroup MMAs (`scan_wg`); 2: the output kernel too (`output`, whole V)
        self.wgmma = wgmma >= 1
        # the fused scan on warpgroup MMAs (`scan_fused_wg`): prepare stores Tb = (I + A)^-1 diag(beta)
        # per chunk instead of w and u, and the scan computes the output with the state on chip
        self.fused_wg = self.wgmma and not split
        # WGMMA 3 (with SPLIT 0): the fused warpgroup scan reading each chunk's decayed causal scores P
        # from prepare (q k^T and its exps off the serial step, and computed once per chunk and head
        # instead of once per value block)
        self.stored_p = self.fused_wg and wgmma == 3
        # WGMMA 4: that scan on two warpgroups, the state's chain on one and the output on the other,
        # which computes P itself (`gdn.sm90_fused_ws`; SEGMENT's phase 1, which has no output, stays
        # on one)
        self.ws = self.fused_wg and wgmma == 4
        self.wgmma_output = wgmma == 2
        # chunks a segment of the fused warpgroup scan's segmented form (0: one CTA walks a whole sequence)
        self.segment = segment

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
        o_ptr: cute.Pointer,
        ht_ptr: cute.Pointer,
        gamma_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        hs_ptr: cute.Pointer,
        vnew_ptr: cute.Pointer,
        tb_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        seg_mb_ptr: cute.Pointer,
        seg_st_ptr: cute.Pointer,
        con_ptr: cute.Pointer,
        tokens: Int32,
        sequences: Int32,
        search_steps: Int32,  # ceil(log2(sequences + 1)): the slot search's halvings
        heads_qk: Int32,
        heads_v: Int32,
        heads_out: Int32,
        heads_g: Int32,
        heads_beta: Int32,
        heads_a_log: Int32,
        heads_dt_bias: Int32,
        scale: Float32,  # the output's: a run-time value, so one compile serves every scale
        stream: Any,
    ):
        K, V, C = self.K, self.V, CHUNK
        mQ = cute.make_tensor(
            q_ptr, cute.make_layout((tokens, heads_qk, K), stride=(aligned_stride(heads_qk * K), K, 1))
        )
        mK = cute.make_tensor(
            k_ptr, cute.make_layout((tokens, heads_qk, K), stride=(aligned_stride(heads_qk * K), K, 1))
        )
        mV = cute.make_tensor(
            v_ptr, cute.make_layout((tokens, heads_v, V), stride=(aligned_stride(heads_v * V), V, 1))
        )
        mG = cute.make_tensor(g_ptr, cute.make_layout((tokens, heads_g), stride=(heads_g, 1)))
        mBeta = cute.make_tensor(beta_ptr, cute.make_layout((tokens, heads_beta), stride=(heads_beta, 1)))
        mALog = cute.make_tensor(a_log_ptr, cute.make_layout((heads_a_log,)))
        mDtBias = cute.make_tensor(dt_bias_ptr, cute.make_layout((heads_dt_bias,)))
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((sequences + 1,)))
        state_shape = (sequences, heads_out, V, K)
        state_stride = (heads_out * V * K, V * K, K, 1)
        mH0 = cute.make_tensor(h0_ptr, cute.make_layout(state_shape, stride=state_stride))
        mHt = cute.make_tensor(ht_ptr, cute.make_layout(state_shape, stride=state_stride))
        mO = cute.make_tensor(
            o_ptr, cute.make_layout((tokens, heads_out, V), stride=(aligned_stride(heads_out * V), V, 1))
        )
        mGamma = cute.make_tensor(gamma_ptr, cute.make_layout((tokens, heads_out), stride=(heads_out, 1)))
        mW = cute.make_tensor(
            w_ptr, cute.make_layout((tokens, heads_out, K), stride=(aligned_stride(heads_out * K), K, 1))
        )
        mU = cute.make_tensor(
            u_ptr, cute.make_layout((tokens, heads_out, V), stride=(aligned_stride(heads_out * V), V, 1))
        )
        slots = tokens // C + sequences + 1
        mHs = cute.make_tensor(
            hs_ptr,
            cute.make_layout(
                (slots, heads_out, V, K), stride=(aligned_stride(heads_out * V * K), V * K, K, 1)
            ),
        )
        mVnew = cute.make_tensor(
            vnew_ptr, cute.make_layout((tokens, heads_out, V), stride=(aligned_stride(heads_out * V), V, 1))
        )
        mTb = cute.make_tensor(
            tb_ptr, cute.make_layout((tokens, heads_out, C), stride=(aligned_stride(heads_out * C), C, 1))
        )
        mP = cute.make_tensor(
            p_ptr, cute.make_layout((tokens, heads_out, C), stride=(aligned_stride(heads_out * C), C, 1))
        )
        # with SEGMENT the segments' rows and each chunk's largest beta ||k||^2 (the warmup's test)
        seg_slots, mSegMB, mSegST, mCon = self.segment_tensors(
            seg_mb_ptr, seg_st_ptr, con_ptr, tokens, sequences, heads_out
        )
        groups = (
            heads_out // heads_qk, heads_out // heads_v, heads_out // heads_g, heads_out // heads_beta,
            heads_out // heads_a_log, heads_out // heads_dt_bias,
        )  # fmt: skip
        # the T the backward reads (store_t), or the fused scan's Tb, through prepare's mT
        mT = mTb if const_expr(self.fused_wg) else mHs
        self.prepare(
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
            mP,
            mCon,
        ).launch(grid=[slots, heads_out, 1], block=[THREADS, 1, 1], stream=stream)
        if const_expr(self.fused_wg):
            fused = (
                mQ, mK, mV, mTb, mP, mGamma, mCu, mH0, mO, mHt, mSegMB, mSegST, mCon, groups[0], groups[1],
            )  # fmt: skip
            ws = (mQ, mK, mV, mTb, mGamma, mCu, mH0, mO, mHt, mSegST, groups[0], groups[1])
            if const_expr(self.segment):
                self.scan_fused_wg(*fused, sequences, search_steps, scale, 1).launch(
                    grid=[seg_slots, heads_out, (V + K) // self.BV], block=[THREADS, 1, 1], stream=stream
                )
                self.segment_combine(mSegMB, mSegST, mCu, mH0, self.has_h0).launch(
                    grid=[sequences, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
                )
                if const_expr(self.ws):
                    self.scan_fused_ws(*ws, sequences, search_steps, scale, 2).launch(
                        grid=[seg_slots, heads_out, V // self.BV], block=[WS_THREADS, 1, 1], stream=stream
                    )
                else:
                    self.scan_fused_wg(*fused, sequences, search_steps, scale, 2).launch(
                        grid=[seg_slots, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
                    )
            elif const_expr(self.ws):
                self.scan_fused_ws(*ws, sequences, search_steps, scale, 0).launch(
                    grid=[sequences, heads_out, V // self.BV], block=[WS_THREADS, 1, 1], stream=stream
                )
            else:
                self.scan_fused_wg(*fused, sequences, search_steps, scale, 0).launch(
                    grid=[sequences, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
                )
        else:
            self.launch_scan(
                mQ, mK, mW, mU, mGamma, mCu, mH0, mO, mHt, mHs, mVnew, sequences, heads_out, groups[0], scale,
                stream,
            )  # fmt: skip
        if const_expr(self.split):
            blocks = 1 if const_expr(self.wgmma_output) else V // self.BV
            self.output(
                mQ, mK, mGamma, mCu, mHs, mVnew, mO, sequences, search_steps, groups[0], scale
            ).launch(grid=[slots, heads_out, blocks], block=[THREADS, 1, 1], stream=stream)

    # ------------------------------------------------------------------ device side
    @cute.jit
    def chunk_gates(self, mG, mBeta, mALog, mDtBias, groups, r0, rows_left, h, tidx, sGamma, sWr):
        """The chunk's gates with the options applied (prepare's, and the backward's chunk kernels'),
        threads 0-63 a row each:
        sWr[r] the write strength (beta, its sigmoid, doubled with neg_eigval) and sGamma[r] gamma's
        inclusive sum within each warp's 32 rows (the caller adds row 31's to rows 32-63 after a
        barrier). Returns this thread's (raw beta, gate, write strength, biased gate, rate), the
        values the chain rules take (zeros past the chunk's rows and for threads 64 on)."""
        C = CHUNK
        _, _, g_group, b_group, a_group, d_group = groups
        valid = tidx < rows_left
        raw_g = Float32(0.0)
        raw_b = Float32(0.0)
        gate = Float32(0.0)
        wr = Float32(0.0)
        biased = Float32(0.0)
        rate = Float32(0.0)
        if tidx < C:
            if valid:
                raw_g = Float32(mG[r0 + tidx, h // g_group])
                raw_b = Float32(mBeta[r0 + tidx, h // b_group].to(Float32))
            gate = raw_g
            wr = raw_b
            if const_expr(self.safe_gate):
                rate = fast_exp(Float32(mALog[h // a_group]))
                biased = raw_g
                if const_expr(self.has_dt_bias):
                    biased = biased + Float32(mDtBias[h // d_group])
                soft = cute.math.max(biased, Float32(0.0)) + cute.math.log(
                    1.0 + fast_exp(-cute.math.abs(biased)), fastmath=True
                )
                gate = Float32(0.0)
                if valid:
                    gate = -rate * soft
            if const_expr(self.beta_sigmoid):
                sig = 1.0 / (1.0 + fast_exp(-raw_b))
                wr = Float32(0.0)
                if valid:
                    wr = sig
            if const_expr(self.neg_eigval):
                wr = wr * 2.0
            cum = gate
            lane = tidx % 32
            for off in cutlass.range_constexpr(5):
                up = cute.arch.shuffle_sync_up(cum, 1 << off, mask_and_clamp=0)
                if lane >= (1 << off):
                    cum = cum + up
            sGamma[tidx] = cum
            sWr[tidx] = wr
        return raw_b, gate, wr, biased, rate

    @cute.kernel
    def prepare(
        self,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,
        mBeta: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        mCu: cute.Tensor,
        mGamma: cute.Tensor,
        mW: cute.Tensor,
        mU: cute.Tensor,
        mT: cute.Tensor,  # [slots, HO, C, C] io, written only with store_t
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
        mQ: cute.Tensor,  # q, read with stored_p
        mP: cute.Tensor,  # [T, HO, 64] io: each token's row of its chunk's P, written with stored_p
        mCon: cute.Tensor,  # [slots, HO] fp32: each chunk's largest beta ||k||^2, written with segment
    ):
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group = groups[0], groups[1]
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()

        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            k_layout, k_swz = row_major(C, K)
            v_layout, v_swz = row_major(C, V)
            sK = smem.allocate_tensor(io, k_layout, 1024, k_swz)
            sV = None if const_expr(self.fused_wg) else smem.allocate_tensor(io, v_layout, 1024, v_swz)
            # A (fp32, at `blocked_inverse`'s row stride) and, once the inverse is read out, T's two
            # column-scaled copies (io) in the same 17 KB, the inverse's scratch beside it: 55 KB a
            # CTA with v's tile, so 4 CTAs an SM (3 with separate tiles, where the kernel,
            # latency-bound, issued on 31% of its cycles)
            raw = smem.allocate(C * INVERSE_STRIDE * 4, 1024)
            sA = cute.make_tensor(
                cute.recast_ptr(raw, dtype=Float32), cute.make_layout((C, C), stride=(INVERSE_STRIDE, 1))
            )
            sX = smem.allocate_tensor(Float32, cute.make_layout((32, 32), stride=(MERGE_STRIDE, 1)), 16)
            t_layout, t_swz = row_major(C, C)
            sTk = cute.make_tensor(cute.recast_ptr(raw, t_swz, dtype=io), t_layout)
            sTv = cute.make_tensor(cute.recast_ptr(raw + C * C * 2, t_swz, dtype=io), t_layout)
            sGamma = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            sBeta = smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
            sCon = (
                smem.allocate_tensor(Float32, cute.make_layout((C,)), 16)
                if const_expr(self.segment)
                else None
            )

            gK = chunk_rows(mK, r0, h // k_group, K)
            gV = chunk_rows(mV, r0, h // v_group, V)
            load_rows(cta_g2s(io, K), tidx, gK, sK, rows_left)
            sQ = None
            if const_expr(self.stored_p):
                sQ = smem.allocate_tensor(io, k_layout, 1024, k_swz)
                load_rows(cta_g2s(io, K), tidx, chunk_rows(mQ, r0, h // k_group, K), sQ, rows_left)
            if const_expr(not self.fused_wg):  # the fused scan reads v itself
                load_rows(cta_g2s(io, V), tidx, gV, sV, rows_left)
            cute.arch.cp_async_commit_group()

            # the gates (warps 0 and 1, one row each): options, then gamma = cumsum by warp scans
            self.chunk_gates(mG, mBeta, mALog, mDtBias, groups, r0, rows_left, h, tidx, sGamma, sBeta)
            cute.arch.sync_threads()
            if tidx >= 32 and tidx < C:
                sGamma[tidx] = sGamma[tidx] + sGamma[31]
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                l2_normalize_rows(sK, tidx, K)
                if const_expr(self.stored_p):
                    l2_normalize_rows(sQ, tidx, K)
                cute.arch.sync_threads()
            if const_expr(self.stored_p):
                self._stored_scores(tidx, sQ, sK, sGamma, chunk_rows(mP, r0, h, C), rows_left)

            # A = strictly lower (k k^T) * exp(gamma_i - gamma_j) * beta_i, fp32
            mma_cc = warp_mma(io, C, C)
            gram, crd = zeroed_acc(mma_cc, tidx, C, C)
            smem_gemm(mma_cc, tidx, gram, sK, sK, False, False, io)
            dst = mma_cc.get_slice(tidx).partition_C(sA)
            for i in cutlass.range_constexpr(cute.size(gram)):
                row, col = crd[i][0], crd[i][1]
                val = Float32(0.0)
                if row > col:
                    val = gram[i] * fast_exp(sGamma[row] - sGamma[col]) * sBeta[row]
                dst[i] = val
                if const_expr(self.segment):  # the diagonal: each row's beta ||k||^2
                    if row == col:
                        sCon[row] = gram[i] * sBeta[row]
            cute.arch.sync_threads()
            if const_expr(self.segment):
                self._store_contraction(tidx, sCon, mCon, slot, h)

            # T = (I + A)^-1 on all four warps, in place (`blocked_inverse`); thread t then takes column
            # t % 64 of rows t // 64, t // 64 + 2, ... (a warp's stores a row's 64 contiguous bytes)
            blocked_inverse(sA, sX, tidx)
            tcol = tidx % C
            if const_expr(self.fused_wg):  # Tb = T diag(beta) of the real rows
                bcol = sBeta[tcol]
                for e in cutlass.range_constexpr(C // 2):
                    i = tidx // C + 2 * e
                    if i < rows_left:
                        mT[r0 + i, h, tcol] = (sA[i, tcol] * bcol).to(io)
            # T lands as T diag(beta exp(gamma)) and T diag(beta) in A's memory, so w = (T diag(beta
            # exp(gamma))) k and u = (T diag(beta)) v read k and v as loaded (no pass scaling their rows)
            if const_expr(not self.fused_wg):
                col = t_column(sA, tidx, mT, slot, h, self.store_t, io)
                cute.arch.sync_threads()  # every read of T done before its copies overwrite it
                bk = sBeta[tcol] * fast_exp(sGamma[tcol])
                bv = sBeta[tcol]
                for e in cutlass.range_constexpr(C // 2):
                    sTk[tidx // C + 2 * e, tcol] = (col[e] * bk).to(io)
                    sTv[tidx // C + 2 * e, tcol] = (col[e] * bv).to(io)
            cute.arch.sync_threads()

            if const_expr(not self.fused_wg):
                # w = Tk k, u = Tv v: B is k / v read column-wise (N = K or V, K = the chunk)
                wy_rows_to_gmem(tidx, sTk, sK, chunk_rows(mW, r0, h, K), rows_left, io, K)
                wy_rows_to_gmem(tidx, sTv, sV, chunk_rows(mU, r0, h, V), rows_left, io, V)
            if tidx < rows_left and tidx < C:
                mGamma[r0 + tidx, h] = sGamma[tidx]

    @cute.jit
    def _store_contraction(self, tidx, sCon, mCon, slot, h):
        """The chunk's largest beta_t ||k_t||^2 (rows past the sequence: 0), or 3 where a beta is
        negative, into ``mCon[slot, h]`` (warp 0): a chunk's steps shrink the state by at least their
        decay where it is at most 2 (the segmented scan's warmup, `gdn.sm90_fused`)."""
        if tidx < 32:
            a, b = sCon[tidx], sCon[tidx + 32]
            worst = cute.math.max(a, b)
            if cute.math.min(a, b) < 0.0:
                worst = Float32(3.0)
            for off in cutlass.range_constexpr(5):
                worst = cute.math.max(worst, cute.arch.shuffle_sync_bfly(worst, 1 << off))
            if tidx == 0:
                mCon[slot, h] = worst

    @cute.jit
    def _stored_scores(self, tidx, sQ, sK, sGamma, gP, rows_left):
        """prepare's P for the fused warpgroup scan (stored_p): (q k^T) exp(gamma_i - gamma_j) on the
        causal part of the real rows, 0 elsewhere, the io dtype, into the chunk's rows of ``gP``."""
        C, io = CHUNK, self.io
        mma_cc = warp_mma(io, C, C)
        scores, crd = zeroed_acc(mma_cc, tidx, C, C)
        smem_gemm(mma_cc, tidx, scores, sQ, sK, False, False, io)
        causal_decay(scores, crd, sGamma, rows_left)
        acc_to_gmem(mma_cc, tidx, scores, crd, gP, rows_left, io)
