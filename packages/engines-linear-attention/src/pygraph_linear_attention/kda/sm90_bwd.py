"""The KDA and GDN-2 backward in CuTe DSL (the ``kda_sm90_bwd`` and ``gdn2_sm90_bwd`` engines): the steps
of `kda.chunked_bwd` over 64-token chunks, the forward recomputed (the graph stores nothing of it).

Launches, in stream order:

1. The forward's `KdaSm90Fwd.prepare_kda` (also storing each chunk's ``T = (I + A)^-1``) and its
   split `scan_wg`: the decayed operands ``qd = q exp(gamma)``, ``kd = k exp(last - gamma)``, the
   scores P, w, u, the state entering each chunk (``hs``) and ``v_new``.
2. gdn_sm90's `grad_scan_wg` with ``channel_decay``: chunks in reverse from d_final_state on plain
   products of prepare's operands; per chunk the gradient of the state leaving it (``dh``) and
   ``dv_new``; its last state is d_initial_state.
3. `KdaSm90Bwd.grad_output_kda` (grid: chunk slots x output heads): the output's and the passed
   state's terms: dq (whole), dk's first terms, dw = -dv_new h and those terms of d gamma.
4. `KdaSm90Bwd.grad_wy_kda` (same grid): the WY transform's terms from T, dw and dv_new: dv, the
   rest of dk, beta's (GDN-2: and the write gate's), d gamma's reverse sum down the chunk and the
   gates' chain rules.
5. gdn_sm90's `head_sum` and `gate_sum` (dQ, dK through the l2 norm, dV, dG, dBeta, GDN-2's dW) and
   `slot_param_sum` (d_a_log, d_dt_bias from per-chunk partial sums).

Steps 3 and 4 each run their plain products on ``mma.sync`` (io operands, fp32 accumulators), then a
pass with a key channel per thread (`kda.sm90_bwd_channels`) for the decay-weighted products, ``sum_j m[r, j] y_j exp(gamma_r -
gamma_j)`` (rows weighted: dq's ``dp k``, the erase key's ``dA k``) and ``sum_r m[r, j] x_r exp(gamma_r
- gamma_j)`` (columns weighted: dk's ``dp^T q`` and ``dA^T e``), for lower-triangular m (dp, dA) in
shared fp32, with its transpose beside it so both kinds read rows (16-byte loads). Each is taken by sub-chunks of 16 rows (columns) against one reference gamma, so a
factor grows by at most ``exp(-15 min g)`` inside the sub-chunk and decays across them (the forward's
form), in fp32 on the CUDA cores: d gamma is a sum of products that cancel, and a model of these
products with bf16 factors put dG at 1.1e-2 to 2.1e-2 of the float64 reference
(`tests/test_kda_sm90_numerics.py`), fp32 keeps it at the plain products' error. The per-channel pass
also does everything per channel (d gamma, its reverse sum, the safe gate's chain rule), so no row
or column sums of fragments are needed for d gamma.
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
    VEC,
    acc_to_gmem,
    acc_to_smem,
    aligned_stride,
    block_sum,
    chunk_rows,
    cta_g2s,
    fast_exp,
    grad_rows_to_gmem,
    l2_normalize_rows,
    load_rows,
    matmul,
    row_sums,
    slot_chunk,
    smem_tile,
    smem_vector,
    trans,
    warp_mma,
    zeroed_acc,
)
from pygraph_linear_attention.gdn.sm90_bwd import GdnSm90Bwd
from pygraph_linear_attention.kda.sm90_bwd_channels import (
    REVERSE,
    KdaChannelPass,
    lower_to_smem,
    read_staged,
)
from pygraph_linear_attention.kda.sm90_fwd import PREP_LAUNCH, SUB, KdaSm90Fwd, load8, vec8

__all__ = ["GRAD_THREADS", "KdaSm90Bwd"]

# grad_output_kda's and grad_wy_kda's threads: two groups of the family's 128. Their shared memory
# (169-201 KB) holds one CTA an SM, at 128 threads 4 warps an SM, one a scheduler, for passes whose
# stalls are latencies (ncu on the H200: FMA chains, global and shared loads). Each group takes half
# of the plain products, and in the per-channel pass half of the sub-chunks of every channel.
GRAD_THREADS = 2 * THREADS


class KdaSm90Bwd(KdaChannelPass, GdnSm90Bwd):
    """One static configuration of the KDA (``gdn2`` False) or GDN-2 backward: the forward's (which it
    recomputes, `KdaSm90Fwd` with ``store_t``) and which gradients the chunk kernels write themselves.
    The gradients' dtypes are their pointers'."""

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
        has_dht: bool,
        direct_qk: bool,
        direct_v: bool,
        stages: int = 1,
        direct_g: bool = False,
        direct_beta: bool = False,
        direct_w: bool = False,
    ) -> None:
        self.K, self.V, self.BV = key_dim, value_dim, block_v
        self.io = DTYPES[io_dtype]
        self.gdn2 = gdn2
        self.l2norm, self.beta_sigmoid, self.neg_eigval = l2norm, beta_sigmoid, neg_eigval
        self.safe_gate, self.has_a_log, self.has_dt_bias = safe_gate, has_a_log, has_dt_bias
        self.lower_bound = lower_bound
        self.has_h0, self.has_dht = has_h0, has_dht
        self.direct_qk, self.direct_v = direct_qk, direct_v
        # one output head per gate head: grad_wy writes the gate's gradient itself (a head sum over
        # one head is a copy: 0.16 ms of KDA's forward+backward at B4 T4096, 0.48 of GDN-2's three)
        self.direct_g, self.direct_beta, self.direct_w = direct_g, direct_beta, direct_w
        self.wgmma, self.stages = True, stages
        self.fwd = KdaSm90Fwd(
            key_dim=key_dim, value_dim=value_dim, block_v=block_v, io_dtype=io_dtype, beta_dtype=beta_dtype,
            h0_dtype=h0_dtype, ht_dtype="float32", cu_dtype=cu_dtype,
            gdn2=gdn2, l2norm=l2norm, beta_sigmoid=beta_sigmoid, neg_eigval=neg_eigval, safe_gate=safe_gate,
            has_a_log=has_a_log, has_dt_bias=has_dt_bias, lower_bound=lower_bound, has_h0=has_h0,
            store_ht=False, stages=stages, store_t=True,
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
        w_gate_ptr: cute.Pointer,
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
        dw_final_ptr: cute.Pointer,
        dh0_ptr: cute.Pointer,
        da_log_ptr: cute.Pointer,
        ddt_bias_ptr: cute.Pointer,
        glast_ptr: cute.Pointer,
        qd_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        t_ptr: cute.Pointer,
        hs_ptr: cute.Pointer,
        vnew_ptr: cute.Pointer,
        dh_ptr: cute.Pointer,
        dvnew_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dw_ptr: cute.Pointer,
        de_ptr: cute.Pointer,
        dgp_ptr: cute.Pointer,
        dg_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        db_ptr: cute.Pointer,
        dwg_ptr: cute.Pointer,
        pa_ptr: cute.Pointer,
        pb_ptr: cute.Pointer,
        tokens: Int32,
        sequences: Int32,
        search_steps: Int32,
        heads_qk: Int32,
        heads_v: Int32,
        heads_out: Int32,
        heads_g: Int32,
        heads_beta: Int32,
        heads_w: Int32,
        heads_a_log: Int32,
        heads_dt_bias: Int32,
        scale: Float32,  # the forward's output's: a run-time value, so one compile serves every scale
        stream: Any,
    ):
        K, V, C = self.K, self.V, CHUNK
        slots = tokens // C + sequences + 1

        def rows(ptr, heads, dim, aligned=True):
            stride = aligned_stride(heads * dim) if aligned else heads * dim
            return cute.make_tensor(ptr, cute.make_layout((tokens, heads, dim), stride=(stride, dim, 1)))

        def rows2(ptr, heads):
            return cute.make_tensor(ptr, cute.make_layout((tokens, heads), stride=(heads, 1)))

        def states(ptr, count, height, width):
            shape = (count, heads_out, height, width)
            stride = (aligned_stride(heads_out * height * width), height * width, width, 1)
            return cute.make_tensor(ptr, cute.make_layout(shape, stride=stride))

        def per_slot(ptr):
            return cute.make_tensor(
                ptr, cute.make_layout((slots, heads_out, K), stride=(heads_out * K, K, 1))
            )

        mQ, mK, mV = rows(q_ptr, heads_qk, K), rows(k_ptr, heads_qk, K), rows(v_ptr, heads_v, V)
        mG = rows(g_ptr, heads_g, K, False)
        if const_expr(self.gdn2):
            mBeta, mDBeta = rows(beta_ptr, heads_beta, K), rows(dbeta_final_ptr, heads_beta, K, False)
            mDb = rows(db_ptr, heads_out, K, False)
        else:
            mBeta, mDBeta, mDb = (
                rows2(beta_ptr, heads_beta),
                rows2(dbeta_final_ptr, heads_beta),
                rows2(db_ptr, heads_out),
            )
        # GDN-2's beta and write gate: read 8 channels at a time (as the forward's)
        mWg, mDW = rows(w_gate_ptr, heads_w, V, self.gdn2), rows(dw_final_ptr, heads_w, V, False)
        mALog = cute.make_tensor(a_log_ptr, cute.make_layout((heads_a_log,)))
        mDtBias = cute.make_tensor(dt_bias_ptr, cute.make_layout((heads_dt_bias, K), stride=(K, 1)))
        mDALog = cute.make_tensor(da_log_ptr, cute.make_layout((heads_a_log,)))
        mDDtBias = cute.make_tensor(ddt_bias_ptr, cute.make_layout((heads_dt_bias, K), stride=(K, 1)))
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((sequences + 1,)))
        mH0, mDht, mDh0 = (
            states(h0_ptr, sequences, V, K),
            states(dht_ptr, sequences, V, K),
            states(dh0_ptr, sequences, V, K),
        )
        mDo = rows(do_ptr, heads_out, V)
        mDQ, mDK, mDV = (
            rows(dq_final_ptr, heads_qk, K),
            rows(dk_final_ptr, heads_qk, K),
            rows(dv_final_ptr, heads_v, V),
        )
        mDG = rows(dg_final_ptr, heads_g, K, False)
        mGlast, mPa, mPb = per_slot(glast_ptr), per_slot(pa_ptr), per_slot(pb_ptr)
        mQd, mKd, mW = rows(qd_ptr, heads_out, K), rows(kd_ptr, heads_out, K), rows(w_ptr, heads_out, K)
        mU, mP = rows(u_ptr, heads_out, V), rows(p_ptr, heads_out, C)
        mT, mHs, mDh = states(t_ptr, slots, C, C), states(hs_ptr, slots, V, K), states(dh_ptr, slots, V, K)
        mVnew, mDvnew = rows(vnew_ptr, heads_out, V), rows(dvnew_ptr, heads_out, V)
        mDq, mDk, mDw = rows(dq_ptr, heads_out, K), rows(dk_ptr, heads_out, K), rows(dw_ptr, heads_out, K)
        mDe, mDgp, mDg = rows(de_ptr, heads_out, K), rows(dgp_ptr, heads_out, K), rows(dg_ptr, heads_out, K)
        mDv, mDwg = rows(dv_ptr, heads_out, V), rows(dwg_ptr, heads_out, V)
        groups = (
            heads_out // heads_qk, heads_out // heads_v, heads_out // heads_g, heads_out // heads_beta,
            heads_out // heads_w, heads_out // heads_a_log, heads_out // heads_dt_bias,
        )  # fmt: skip
        fwd = self.fwd
        fwd.prepare_kda(
            mQ, mK, mV, mG, mBeta, mWg, mALog, mDtBias, mCu, mGlast, mQd, mKd, mW, mU, mP, mT, sequences,
            search_steps, groups,
        ).launch(grid=[slots, heads_out, 1], stream=stream, **PREP_LAUNCH)  # fmt: skip
        fwd.scan_wg(mKd, mW, mU, mGlast, mCu, mH0, mH0, mHs, mVnew, Int32(1)).launch(
            grid=[sequences, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream
        )
        self.grad_scan_wg(
            mQd, mKd, mW, mGlast, mDo, mCu, mDht, mDh, mDvnew, mDh0, Int32(1), scale, mP
        ).launch(grid=[sequences, heads_out, V // self.BV], block=[THREADS, 1, 1], stream=stream)
        self.grad_output_kda(
            mQ, mK, mG, mALog, mDtBias, mDo, mCu, mHs, mDh, mVnew, mDvnew, mDq, mDQ, mDk, mDw, mDgp, sequences,
            search_steps, groups, scale,
        ).launch(grid=[slots, heads_out, 1], block=[GRAD_THREADS, 1, 1], stream=stream)  # fmt: skip
        # the gates' gradients: into the workspace for a head sum, or where the head counts agree into
        # the outputs themselves (the same [T, HO, .] shape)
        dg_out = mDG if const_expr(self.direct_g) else mDg
        db_out = mDBeta if const_expr(self.direct_beta) else mDb
        dwg_out = mDW if const_expr(self.direct_w) else mDwg
        self.grad_wy_kda(
            mK, mV, mG, mBeta, mWg, mALog, mDtBias, mCu, mT, mDvnew, mDw, mDe, mDk, mDgp, mDv, mDK, mDV, dg_out,
            db_out, dwg_out, mPa, mPb, sequences, search_steps, groups,
        ).launch(grid=[slots, heads_out, 1], block=[GRAD_THREADS, 1, 1], stream=stream)  # fmt: skip
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
        if const_expr(not self.direct_g):
            self.head_sum(mDg, mG, mDG, groups[2], K, False).launch(
                grid=[tokens, heads_g, 1], block=[THREADS, 1, 1], stream=stream
            )
        if const_expr(self.gdn2):
            if const_expr(not self.direct_beta):
                self.head_sum(mDb, mBeta, mDBeta, groups[3], K, False).launch(
                    grid=[tokens, heads_beta, 1], block=[THREADS, 1, 1], stream=stream
                )
            if const_expr(not self.direct_w):
                self.head_sum(mDwg, mWg, mDW, groups[4], V, False).launch(
                    grid=[tokens, heads_w, 1], block=[THREADS, 1, 1], stream=stream
                )
        else:
            self.gate_sum(mDb, mDBeta, groups[3], tokens).launch(
                grid=[(tokens + THREADS - 1) // THREADS, heads_beta, 1], block=[THREADS, 1, 1], stream=stream
            )
        if const_expr(self.safe_gate and self.has_a_log):
            self.slot_param_sum(mPa, mDALog, groups[5], slots, False).launch(
                grid=[heads_a_log, 1, 1], block=[THREADS, 1, 1], stream=stream
            )
        if const_expr(self.safe_gate and self.has_dt_bias):
            self.slot_param_sum(mPb, mDDtBias, groups[6], slots, True).launch(
                grid=[heads_dt_bias, 1, 1], block=[THREADS, 1, 1], stream=stream
            )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def grad_output_kda(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mG: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
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
        groups: Any,
        scale: Float32,
    ):
        """The output's terms (o = scale (qd h^T + P v_new)) and the passed state's (S' = diag(exp(last))
        h + v_new^T kd) of one chunk's gradients: dq whole (to dQ where it needs no head sum), dk's
        first terms (fp32), dw = -dv_new h (io: the next kernel's operand) and those terms of d gamma
        (fp32 [T, HO, K]). 192 KB of shared memory at K = V = 128 (one CTA an SM)."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, _, g_group, _, _, a_group, d_group = groups
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        hk = h // k_group
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            smem = utils.SmemAllocator()
            sQ, sK = smem_tile(smem, io, C, K), smem_tile(smem, io, C, K)
            sDo, sVn, sDvn = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V), smem_tile(smem, io, C, V)
            sH, sDh = smem_tile(smem, io, V, K), smem_tile(smem, io, V, K)
            sGam = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
            sM = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)
            sMT = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)  # 208 KB in all
            sPassed = smem_vector(smem, K)  # the second group's share of the passed state's d gamma term
            g2s_k, g2s_v = cta_g2s(io, K), cta_g2s(io, V)
            gtid = tidx % THREADS  # the index within its group of 128 (copies, MMA fragments)
            if tidx < THREADS:
                load_rows(g2s_k, gtid, chunk_rows(mQ, r0, hk, K), sQ, rows_left)
                load_rows(g2s_k, gtid, chunk_rows(mK, r0, hk, K), sK, rows_left)
                load_rows(g2s_v, gtid, chunk_rows(mDo, r0, h, V), sDo, rows_left)
                load_rows(g2s_k, gtid, mHs[slot, h, None, None], sH, V)
            else:
                load_rows(g2s_v, gtid, chunk_rows(mVnew, r0, h, V), sVn, rows_left)
                load_rows(g2s_v, gtid, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
                load_rows(g2s_k, gtid, mDh[slot, h, None, None], sDh, V)
            cute.arch.cp_async_commit_group()
            if tidx < K:
                self.fwd._gamma_column(
                    mG, mALog, mDtBias, sGam, r0, rows_left, h, (g_group, a_group, d_group), tidx
                )
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if tidx < THREADS:
                    l2_normalize_rows(sQ, gtid, K)
                else:
                    l2_normalize_rows(sK, gtid, K)
                cute.arch.sync_threads()
            last_row = rows_left - 1
            if rows_left > C:
                last_row = C - 1
            mma_ck, mma_cc = warp_mma(io, C, K), warp_mma(io, C, C)

            if tidx < THREADS:
                # dq's state term scale exp(gamma) (dO h), staged in fp32 for the per-channel pass
                acc, crd = zeroed_acc(mma_ck, gtid, C, K)
                matmul(mma_ck, gtid, acc, sDo, sH, io)
                for e in cutlass.range_constexpr(cute.size(acc)):
                    acc[e] = acc[e] * scale * fast_exp(sGam[crd[e][0], crd[e][1]])
                acc_to_gmem(mma_ck, gtid, acc, crd, chunk_rows(mDq, r0, h, K), rows_left, Float32)
                # dw = -dv_new h
                dw, _ = zeroed_acc(mma_ck, gtid, C, K)
                matmul(mma_ck, gtid, dw, sDvn, sH, io)
                for e in cutlass.range_constexpr(cute.size(dw)):
                    dw[e] = -dw[e]
                acc_to_gmem(mma_ck, gtid, dw, crd, chunk_rows(mDw, r0, h, K), rows_left, io)
            else:
                # the passed state's dk term exp(last - gamma) (v_new dh)
                kt, crd = zeroed_acc(mma_ck, gtid, C, K)
                matmul(mma_ck, gtid, kt, sVn, sDh, io)
                for e in cutlass.range_constexpr(cute.size(kt)):
                    col = crd[e][1]
                    kt[e] = kt[e] * fast_exp(sGam[last_row, col] - sGam[crd[e][0], col])
                acc_to_gmem(mma_ck, gtid, kt, crd, chunk_rows(mDk, r0, h, K), rows_left, Float32)
                # dp = scale dO v_new^T on the causal, real part
                dp, crd_p = zeroed_acc(mma_cc, gtid, C, C)
                matmul(mma_cc, gtid, dp, sDo, trans(sVn), io)
                lower_to_smem(dp, crd_p, sM, sMT, scale, True, rows_left)
            cute.arch.sync_threads()  # sM complete, the staged terms written

            # the per-channel pass, a key channel per thread of each group: the first takes sub-chunks
            # 0 and 3, the second 1 and 2 (equal work: a row's sum of sub-chunk i has 16 (i + 1)
            # terms, a column's 16 (4 - i)); sub-chunk i's dk reads d gamma's rows its dq wrote, so
            # both are one thread's
            col = gtid
            part = Float32(0.0)
            passed = Float32(0.0)
            tiles, at = (sQ, sK, sGam, sM), (r0, rows_left, last_row, h)
            tiles_t = (sQ, sK, sGam, sMT)  # the columns' passes read dp^T's rows
            if col < K:
                if tidx < THREADS:
                    # the state's own last-row term: the state leaving is diag(exp(last)) h + ...
                    for v in cutlass.range(V, unroll=8):
                        part = part + sDh[v, col].to(Float32) * sH[v, col].to(Float32)
                    for i in cutlass.range_constexpr(0, C // SUB, 3):
                        self._rows_weighted(i, col, tiles, mDq, mDQ, mDgp, at, True)
                    for i in cutlass.range_constexpr(0, C // SUB, 3):
                        passed = passed + self._dk_first_cols(i, col, tiles_t, mDk, mDgp, at)
                else:
                    for i in cutlass.range_constexpr(1, 3):
                        self._rows_weighted(i, col, tiles, mDq, mDQ, mDgp, at, True)
                    for i in cutlass.range_constexpr(1, 3):
                        passed = passed + self._dk_first_cols(i, col, tiles_t, mDk, mDgp, at)
                    sPassed[col] = passed
            cute.arch.sync_threads()  # both groups' rows of d gamma written, the second's share in
            if tidx < K:
                tail = Float32(mDgp[r0 + last_row, h, col])
                mDgp[r0 + last_row, h, col] = (
                    tail + fast_exp(sGam[last_row, col]) * part + passed + sPassed[col]
                )

    @cute.kernel
    def grad_wy_kda(
        self,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mG: cute.Tensor,
        mBeta: cute.Tensor,
        mWg: cute.Tensor,
        mALog: cute.Tensor,
        mDtBias: cute.Tensor,
        mCu: cute.Tensor,
        mT: cute.Tensor,
        mDvnew: cute.Tensor,
        mDw: cute.Tensor,
        mDe: cute.Tensor,
        mDk: cute.Tensor,
        mDgp: cute.Tensor,
        mDv: cute.Tensor,
        mDK: cute.Tensor,
        mDV: cute.Tensor,
        mDg: cute.Tensor,
        mDb: cute.Tensor,
        mDwg: cute.Tensor,
        mPa: cute.Tensor,
        mPb: cute.Tensor,
        sequences: Int32,
        search_steps: Int32,
        groups: Any,
    ):
        """The WY transform's terms (w = T kw, u = T vw, T = (I + A)^-1, A = tril(kw kd^T, -1); kw = e
        exp(gamma) with the erase key e = beta k, vw = beta v (GDN-2: the write gate times v)) and the
        gates' chain rules of one chunk: dv, dk (finished), d beta, GDN-2's write gate's gradient, d
        gamma's reverse sum per channel into the raw gate's gradient, and per chunk the sums d_a_log
        and d_dt_bias are made of."""
        K, V, C, io = self.K, self.V, CHUNK, self.io
        k_group, v_group, g_group, b_group, w_group, a_group, d_group = groups
        tidx, _, _ = cute.arch.thread_idx()
        slot, h, _ = cute.arch.block_idx()
        bh = h // b_group
        bos, length, c = slot_chunk(mCu, slot, sequences, search_steps)
        rows_left = length - c * C
        if c * C < length:
            r0 = bos + c * C
            last_row = cutlass.min(rows_left, C) - 1  # the chunk's last real row
            smem = utils.SmemAllocator()
            sK, sDw, sKw = smem_tile(smem, io, C, K), smem_tile(smem, io, C, K), smem_tile(smem, io, C, K)
            sV, sDvn, sVw = smem_tile(smem, io, C, V), smem_tile(smem, io, C, V), smem_tile(smem, io, C, V)
            sT, sDt, sTmp = smem_tile(smem, io, C, C), smem_tile(smem, io, C, C), smem_tile(smem, io, C, C)
            sGam = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
            sM = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)
            sMT = smem.allocate_tensor(Float32, cute.make_layout((C, C), stride=(C, 1)), 16)
            sDwrite = smem_vector(smem)
            # the erase key's beta: KDA's one a row; GDN-2's one a channel, after the options, kept
            # [C, K] fp32 (32 KB, 201 KB in all) where it was read from global memory at each use,
            # the per-channel pass's row loop waiting on one such read a row
            if const_expr(self.gdn2):
                sBeta = smem.allocate_tensor(Float32, cute.make_layout((C, K), stride=(K, 1)), 16)
            else:
                sBeta = smem_vector(smem)
            g2s_k, g2s_v, g2s_c = cta_g2s(io, K), cta_g2s(io, V), cta_g2s(io, C)
            gtid = tidx % THREADS  # the index within its group of 128 (copies, MMA fragments)
            if tidx < THREADS:
                load_rows(g2s_k, gtid, chunk_rows(mK, r0, h // k_group, K), sK, rows_left)
                load_rows(g2s_v, gtid, chunk_rows(mV, r0, h // v_group, V), sV, rows_left)
                load_rows(g2s_k, gtid, chunk_rows(mDw, r0, h, K), sDw, rows_left)
            else:
                load_rows(g2s_v, gtid, chunk_rows(mDvnew, r0, h, V), sDvn, rows_left)
                load_rows(g2s_c, gtid, mT[slot, h, None, None], sT, C)
            cute.arch.cp_async_commit_group()
            if tidx < K:
                self.fwd._gamma_column(
                    mG, mALog, mDtBias, sGam, r0, rows_left, h, (g_group, a_group, d_group), tidx
                )
            if tidx >= THREADS:  # while the first group sums the gates
                if gtid < C:
                    if const_expr(not self.gdn2):
                        sBeta[gtid] = self.fwd._beta(mBeta, r0, gtid, last_row, bh, 0)
                    sDwrite[gtid] = Float32(0.0)
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            if const_expr(self.l2norm):
                if tidx < THREADS:
                    l2_normalize_rows(sK, gtid, K)
                cute.arch.sync_threads()
            # kw = e exp(gamma), and GDN-2's gated values w_gate v, 8 channels a thread (16-byte
            # shared loads and stores, GDN-2's beta and gate 16-byte global loads: the prepare's form)
            per_row = K // VEC
            c8 = tidx % per_row  # this thread's 8 channels (GRAD_THREADS % per_row == 0)
            for e in cutlass.range_constexpr(C * per_row // GRAD_THREADS):
                r = (tidx + e * GRAD_THREADS) // per_row
                k8, gam8 = load8(sK, r, c8), load8(sGam, r, c8)
                kw8 = cute.make_rmem_tensor((VEC,), io)
                if const_expr(self.gdn2):
                    beta8 = self.fwd._beta8(mBeta, r0, r, last_row, bh, c8)
                    cute.autovec_copy(beta8, vec8(sBeta, r, c8))
                else:
                    b = sBeta[r]
                for j in cutlass.range_constexpr(VEC):
                    kw = k8[j].to(Float32) * fast_exp(gam8[j])
                    if const_expr(self.gdn2):
                        kw = kw * beta8[j]
                    else:
                        kw = kw * b
                    kw8[j] = kw.to(io)
                cute.autovec_copy(kw8, vec8(sKw, r, c8))
            if const_expr(self.gdn2):
                v_row = V // VEC
                for e in cutlass.range_constexpr(C * v_row // GRAD_THREADS):
                    r, cv = (tidx + e * GRAD_THREADS) // v_row, (tidx + e * GRAD_THREADS) % v_row
                    # v's rows past the sequence are 0; the gate read from a real row, without a branch
                    v8 = load8(sV, r, cv)
                    gate8 = load8(mWg[None, h // w_group, None], r0 + cutlass.min(Int32(r), last_row), cv)
                    vw8 = cute.make_rmem_tensor((VEC,), io)
                    for j in cutlass.range_constexpr(VEC):
                        vw8[j] = (v8[j].to(Float32) * gate8[j].to(Float32)).to(io)
                    cute.autovec_copy(vw8, vec8(sVw, r, cv))
            cute.arch.sync_threads()
            mma_cc, mma_ck, mma_cv = warp_mma(io, C, C), warp_mma(io, C, K), warp_mma(io, C, V)

            # the first group: dT = dv_new vw^T + dw kw^T (KDA: beta a column scale of dv_new v^T), then
            # dA = -tril(T^T dT T^T, -1) in fp32 for the per-channel pass; the second: dvw = T^T dv_new
            # (dv = beta dvw, GDN-2: w_gate dvw; beta's term sum_v dvw v, GDN-2: the write gate's
            # gradient dvw v), then the erase key's first term exp(gamma) (T^T dw), staged in fp32
            if tidx < THREADS:
                dt, crd_p = zeroed_acc(mma_cc, gtid, C, C)
                if const_expr(self.gdn2):
                    matmul(mma_cc, gtid, dt, sDvn, trans(sVw), io)
                else:
                    matmul(mma_cc, gtid, dt, sDvn, trans(sV), io)
                    for e in cutlass.range_constexpr(cute.size(dt)):
                        dt[e] = dt[e] * sBeta[crd_p[e][1]]
                matmul(mma_cc, gtid, dt, sDw, trans(sKw), io)
                acc_to_smem(mma_cc, gtid, dt, sDt, io)
            else:
                dvw, crd_v = zeroed_acc(mma_cv, gtid, C, V)
                matmul(mma_cv, gtid, dvw, trans(sT), sDvn, io)
                terms_v, _ = zeroed_acc(mma_cv, gtid, C, V)
                v_part = mma_cv.get_slice(gtid).partition_C(sV)
                for e in cutlass.range_constexpr(cute.size(dvw)):
                    row, col = crd_v[e][0], crd_v[e][1]
                    terms_v[e] = dvw[e] * v_part[e].to(Float32)
                    if const_expr(self.gdn2):
                        gate = mWg[r0 + cutlass.min(Int32(row), last_row), h // w_group, col].to(Float32)
                        dvw[e] = dvw[e] * gate
                    else:
                        dvw[e] = dvw[e] * sBeta[row]
                if const_expr(self.gdn2):
                    acc_to_gmem(
                        mma_cv,
                        gtid,
                        terms_v,
                        crd_v,
                        chunk_rows(mDwg, r0, h, V),
                        rows_left,
                        mDwg.element_type,
                    )
                else:
                    row_sums(terms_v, crd_v, sDwrite)
                grad_rows_to_gmem(mma_cv, gtid, dvw, crd_v, self.direct_v, mDV, mDv, r0, h, V, rows_left, io)
            cute.arch.sync_threads()  # sDt complete

            if tidx < THREADS:
                tmp, _ = zeroed_acc(mma_cc, gtid, C, C)
                matmul(mma_cc, gtid, tmp, trans(sT), sDt, io)
                acc_to_smem(mma_cc, gtid, tmp, sTmp, io)
            else:
                de, crd = zeroed_acc(mma_ck, gtid, C, K)
                matmul(mma_ck, gtid, de, trans(sT), sDw, io)
                for e in cutlass.range_constexpr(cute.size(de)):
                    de[e] = de[e] * fast_exp(sGam[crd[e][0], crd[e][1]])
                acc_to_gmem(mma_ck, gtid, de, crd, chunk_rows(mDe, r0, h, K), rows_left, Float32)
            cute.arch.sync_threads()  # sTmp complete
            if tidx < THREADS:
                da, crd_p = zeroed_acc(mma_cc, gtid, C, C)
                matmul(mma_cc, gtid, da, sTmp, trans(sT), io)
                lower_to_smem(da, crd_p, sM, sMT, Float32(-1.0), False, rows_left)
            cute.arch.sync_threads()  # sM complete, de staged

            # the per-channel pass, a key channel per thread of each group, sub-chunks 0 and 3 to the
            # first, 1 and 2 to the second (as grad_output_kda's): de += the rows-weighted dA k, then
            # dk, d gamma's terms and beta's
            col = gtid
            at = (r0, rows_left, last_row, h)
            if col < K:
                if tidx < THREADS:
                    for i in cutlass.range_constexpr(0, C // SUB, 3):
                        self._rows_weighted(i, col, (sK, sK, sGam, sM), mDe, mDe, mDe, at, False)
                    for i in cutlass.range_constexpr(0, C // SUB, 3):
                        self._dk_cols(
                            i, col, sK, sGam, sMT, sBeta, sDwrite, mBeta, mDe, mDk, mDgp, mDK, mDb, at, bh
                        )
                else:
                    for i in cutlass.range_constexpr(1, 3):
                        self._rows_weighted(i, col, (sK, sK, sGam, sM), mDe, mDe, mDe, at, False)
                    for i in cutlass.range_constexpr(1, 3):
                        self._dk_cols(
                            i, col, sK, sGam, sMT, sBeta, sDwrite, mBeta, mDe, mDk, mDgp, mDK, mDb, at, bh
                        )
            cute.arch.sync_threads()  # every row of d gamma's terms written
            if tidx < K:
                # the decay's gradient: gamma_r = g_0 + ... + g_r, so d gamma's reverse sum down the
                # chunk; then the safe gate's chain rule, and this chunk's shares of d_a_log, d_dt_bias
                rate, bias = self.fwd._gate_params(mALog, mDtBias, h, a_group, d_group, col)
                run = Float32(0.0)
                part_a = Float32(0.0)
                part_b = Float32(0.0)
                for rq in cutlass.range(C // REVERSE, unroll=1):
                    top = C - 1 - rq * REVERSE  # this group's rows, from the bottom up
                    staged = read_staged(mDgp, r0, top - (REVERSE - 1), last_row, h, col, REVERSE)
                    raw_g = staged
                    if const_expr(self.safe_gate):
                        raw_g = read_staged(mG, r0, top - (REVERSE - 1), last_row, h // g_group, col, REVERSE)
                    for u in cutlass.range_constexpr(REVERSE):
                        r = top - u
                        if r < rows_left:
                            run = run + staged[REVERSE - 1 - u]
                            d_raw = run
                            if const_expr(self.safe_gate):
                                z = (raw_g[REVERSE - 1 - u] + bias) * rate
                                sig = 1.0 / (1.0 + fast_exp(-z))
                                d_z = run * self.lower_bound * sig * (1.0 - sig)
                                d_raw = d_z * rate
                                part_a = part_a + d_z * z
                                part_b = part_b + d_raw
                            mDg[r0 + r, h, col] = d_raw.to(mDg.element_type)
                if const_expr(self.safe_gate):
                    mPa[slot, h, col] = part_a
                    mPb[slot, h, col] = part_b
            if const_expr(not self.gdn2):
                cute.arch.sync_threads()  # every channel's share of beta's gradient is in
                if tidx < rows_left and tidx < C:
                    mDb[r0 + tidx, h] = self._write_chain(mBeta, r0 + tidx, bh, 0, sDwrite[tidx])
        else:
            if const_expr(self.safe_gate):  # an idle slot: nothing to add to the parameters' sums
                if tidx < K:
                    mPa[slot, h, tidx] = Float32(0.0)
                    mPb[slot, h, tidx] = Float32(0.0)

    @cute.kernel
    def slot_param_sum(
        self, mSrc: cute.Tensor, mDst: cute.Tensor, group: Int32, slots: Int32, per_channel: cutlass.Constexpr
    ):
        """dst[p] (``per_channel``: dst[p, channel]) = the sum of the per-chunk partials src [slots,
        HO, K] over every chunk slot, the output heads parameter head p serves (and the channels)."""
        tidx, _, _ = cute.arch.thread_idx()
        p, _, _ = cute.arch.block_idx()
        smem = utils.SmemAllocator()
        sRed = smem_vector(smem, 4)
        acc = Float32(0.0)
        if tidx < self.K:
            for s in cutlass.range(slots, unroll=4):
                for i in cutlass.range(group, unroll=1):
                    acc = acc + Float32(mSrc[s, p * group + i, tidx])
        if const_expr(per_channel):
            if tidx < self.K:
                mDst[p, tidx] = acc.to(mDst.element_type)
        else:
            total = block_sum(acc, tidx, sRed)
            if tidx == 0:
                mDst[p] = total.to(mDst.element_type)
