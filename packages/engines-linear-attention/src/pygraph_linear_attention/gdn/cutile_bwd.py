"""The Gated DeltaNet backward in cuTile: the steps of `gdn.chunked_bwd` on the device.

Nothing of the forward is stored by the graph, so the backward recomputes it. The launches, in
stream order (the host side is `gdn.cutile_bwd_host.launch_backward`):

1. The forward's `chunk_table_kernel` and `chunk_prepare_kernel` (gamma, w, u, and each chunk's
   T = (I + A)^-1 in fp32, to the workspace), and `chunk_offsets_kernel`: each sequence's first
   chunk slot, so the scans can index the per-chunk states by the table's slots.
2. `state_scan_kernel` (grid: sequences x heads x value blocks): the forward's state scan again,
   storing the state entering each chunk (``h``, [slots, HO, V, K], io dtype) and ``v_new``.
3. `grad_scan_kernel` (same grid), chunks in reverse from d_final_state: stores the gradient of
   the state leaving each chunk (``dh``) and ``dv_new``; its last state is d_initial_state.
4. `chunked_bwd.chunk_grads` per chunk, in two kernels cut by concern so that each one's
   accumulators fit in registers (one kernel holding them all spilled 15.8 KB per thread):
   `chunk_grad_output_kernel` (grid: chunk slots x heads x key blocks of BK): the output's and
   the passed state's terms, per key block: dq, dk's first terms, dw, and the block's terms of
   d gamma; `chunk_grad_wy_kernel` (grid: chunk slots x heads): the WY transform's terms from
   T and dw (dv, the rest of dk, d beta), d gamma's reverse sum, and the gates' chain rules.
   The value dim is walked in blocks of BV (two or more), so the state tiles stay [BV, BK].
5. `group_sum_kernel`, `gate_sum_kernel`, `param_sum_kernel`: the per-output-head gradients summed
   over the heads each input head serves (GQA/GVA, per-head gates), q's and k's then taken
   through their l2 normalization, and over tokens for a_log and dt_bias, cast to the graph's
   dtypes. Where a sum would only cast (one output head per input head, no l2 norm), the chunk
   kernels write dQ, dK and dV themselves and it is not launched.

Matrix products take io-dtype operands with fp32 accumulation (T's too, as FLA's WY backward
takes its stored inverse in the io dtype): with fp32 operands chunk_grad_wy_kernel spilled 2.1 KB
per thread at K = V = 128 on sm_90 (steps of 16; 7.2 KB at 64) and took 33.5 ms of a 41 ms call at
B1 T32768 on the H200; with io operands it holds its tiles without a spill (253 registers as timed,
250 with the direct dK and dV stores since) and took 1.1 ms. The inverse itself
(chunk_prepare_kernel) stays fp32.
"""

from __future__ import annotations

from typing import Any

import cuda.tile as ct

from pygraph_linear_attention.common.cutile_blocks import (
    TMA,
    chunk_offsets_kernel,
    gate_sum_kernel,
    group_sum_kernel,
    l2_normalized,
    mm,
    param_sum_kernel,
    rows_at,
)
from pygraph_linear_attention.gdn.cutile_fwd import (
    carry_state,
    gamma_at,
    keys_at,
    segment_combine_kernel,
    softplus,
)

__all__ = [
    "BWD_KERNELS",
    "chunk_grad_output_kernel",
    "chunk_grad_wy_kernel",
    "export_signatures",
    "grad_scan_kernel",
    "state_scan_kernel",
]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]
_ZERO = ct.PaddingMode.ZERO


def _rows(x, C: ConstInt, D: ConstInt):
    """A [C, 1, D] tile as [C, D] fp32."""
    return ct.astype(ct.reshape(x, (C, D)), ct.float32)


@ct.kernel
def state_scan_kernel(
    k,  # [T, H, K] io
    w,  # [T, HO, K] io, from chunk_prepare_kernel
    u,  # [T, HO, V] io
    gamma,  # [T, HO] fp32
    cu_seqlens,  # [N + 1]
    offsets,  # [N] int32, from chunk_offsets_kernel
    h0,  # [N, HO, V, K] (read when HAS_H0)
    h_out,  # [slots, HO, V, K] io: the state entering each chunk
    v_new_out,  # [T, HO, V] io
    K_GROUP,
    L2NORM,
    HAS_H0,
    K: ConstInt,
    BV: ConstInt,
    C: ConstInt,
):
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    base = ct.load(offsets, (n,), shape=())
    length = eos - bos
    state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_H0 != 0:
        state = ct.astype(ct.reshape(ct.load(h0, (n, h, vb, 0), shape=(1, 1, BV, K)), (BV, K)), ct.float32)
    r = ct.arange(C, dtype=ct.int32)
    hk = h // K_GROUP
    for c in range(ct.cdiv(length, C)):
        k_seq, w_seq, u_seq = k.slice(0, bos, eos), w.slice(0, bos, eos), u.slice(0, bos, eos)
        g_seq, vn_seq = gamma.slice(0, bos, eos), v_new_out.slice(0, bos, eos)
        rows = length - c * C
        valid = r < rows
        kt = keys_at(k_seq, c, hk, L2NORM, C, K)
        wt = rows_at(w_seq, (c, h, 0), C, K)
        ut = rows_at(u_seq, (c, h, vb), C, BV)
        gam = gamma_at(g_seq, c, h, C)
        state_io = ct.astype(state, kt.dtype)
        ct.store(
            h_out,
            (base + c, h, vb, 0),
            ct.reshape(ct.astype(state, h_out.dtype), (1, 1, BV, K)),
            allow_tma=TMA,
        )
        v_new = ct.astype(ut, ct.float32) - ct.mma(
            wt, ct.transpose(state_io), ct.zeros((C, BV), dtype=ct.float32)
        )
        ct.store(vn_seq, (c, h, vb), ct.reshape(ct.astype(v_new, v_new_out.dtype), (C, 1, BV)), allow_tma=TMA)
        state = carry_state(state, v_new, kt, gam, valid, rows, r, C)


@ct.kernel
def grad_scan_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    w,  # [T, HO, K] io
    gamma,  # [T, HO] fp32
    do,  # [T, HO, V] io: dO
    cu_seqlens,  # [N + 1]
    offsets,  # [N] int32
    dht,  # [N, HO, V, K] (read when HAS_DHT): d_final_state
    dh_out,  # [slots, HO, V, K] io: the gradient of the state leaving each chunk
    dv_new_out,  # [T, HO, V] io
    dh0,  # [N, HO, V, K] (written when HAS_H0): d_initial_state
    K_GROUP,
    L2NORM,
    HAS_DHT,
    HAS_H0,
    # 0: dh and dv_new not stored (the split scan's pass for each segment's G); compile-time, so the
    # storing kernel is the one without the flag (as a runtime flag it spilled 112 B at K = 128 on sm_90)
    STORE_CHUNKS: ConstInt,
    K: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    base = ct.load(offsets, (n,), shape=())
    length = eos - bos
    d_state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_DHT != 0:
        d_state = ct.astype(ct.reshape(ct.load(dht, (n, h, vb, 0), shape=(1, 1, BV, K)), (BV, K)), ct.float32)
    r = ct.arange(C, dtype=ct.int32)
    causal = ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)
    hk = h // K_GROUP
    chunks = ct.cdiv(length, C)
    for i in range(chunks):
        c = chunks - 1 - i
        q_seq, k_seq, w_seq = q.slice(0, bos, eos), k.slice(0, bos, eos), w.slice(0, bos, eos)
        g_seq, do_seq, dvn_seq = (
            gamma.slice(0, bos, eos),
            do.slice(0, bos, eos),
            dv_new_out.slice(0, bos, eos),
        )
        rows = length - c * C
        valid = r < rows
        qt = rows_at(q_seq, (c, hk, 0), C, K)
        kt = rows_at(k_seq, (c, hk, 0), C, K)
        if L2NORM != 0:
            qt = l2_normalized(qt)
            kt = l2_normalized(kt)
        io = kt.dtype
        wt = rows_at(w_seq, (c, h, 0), C, K)
        gam = gamma_at(g_seq, c, h, C)
        dot = (
            _rows(ct.load(do_seq, (c, h, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), C, BV)
            * SCALE
        )
        if STORE_CHUNKS != 0:
            ct.store(
                dh_out,
                (base + c, h, vb, 0),
                ct.reshape(ct.astype(d_state, dh_out.dtype), (1, 1, BV, K)),
                allow_tma=TMA,
            )

        last = ct.sum(ct.where(r == ct.minimum(rows, C) - 1, gam, 0.0))
        # rows and columns both real: a padded row's gamma reads 0, so its gap to a real
        # column is a growth that overflows under strong gates (inf * 0 = NaN in the products)
        live = causal & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
        gap = ct.expand_dims(gam, 1) - ct.expand_dims(gam, 0)
        scores = ct.mma(qt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
        scores = ct.where(live, scores * ct.exp(ct.where(live, gap, 0.0)), 0.0)
        tail = ct.where(valid, ct.exp(last - gam), 0.0)
        dv_new = mm(ct.transpose(scores), dot, io) + ct.expand_dims(tail, 1) * mm(
            kt, ct.transpose(d_state), io
        )
        if STORE_CHUNKS != 0:
            ct.store(
                dvn_seq,
                (c, h, vb),
                ct.reshape(ct.astype(dv_new, dv_new_out.dtype), (C, 1, BV)),
                allow_tma=TMA,
            )
        decayed_do = dot * ct.expand_dims(ct.where(valid, ct.exp(gam), 0.0), 1)
        # one accumulator chain (as the forward's state update): tileiras 13.4 rejects the sum of
        # separate products here for sm_80 ("invalid use-def chain in LoopSchedule")
        d_state = ct.mma(ct.transpose(ct.astype(-dv_new, io)), wt, d_state * ct.exp(last))
        d_state = ct.mma(ct.transpose(ct.astype(decayed_do, io)), qt, d_state)
    if HAS_H0 != 0:
        ct.store(dh0, (n, h, vb, 0), ct.reshape(ct.astype(d_state, dh0.dtype), (1, 1, BV, K)), allow_tma=TMA)


def _inverse_row_norms(x_seq, c, head, BLOCKS: ConstInt, BK: ConstInt, C: ConstInt):
    """1 / max(|row|, 1e-12) [C, 1] fp32 of chunk ``c``'s rows of ``x_seq`` [T, H, K] at ``head``,
    summed over its key blocks of BK (the normalization `l2_normalized` applies to a whole row)."""
    squares = ct.zeros((C, 1), dtype=ct.float32)
    for b in range(BLOCKS):
        x = _rows(ct.load(x_seq, (c, head, b), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA), C, BK)
        squares = squares + ct.sum(x * x, axis=1, keepdims=True)
    return 1.0 / ct.maximum(ct.sqrt(squares), 1e-12)


def _key_block(x_seq, c, head, kb, inv_norm, L2NORM, BK: ConstInt, C: ConstInt):
    """Key block ``kb`` [C, BK] of chunk ``c``'s rows at ``head``, l2-normalized when L2NORM (io dtype)."""
    x = ct.reshape(
        ct.load(x_seq, (c, head, kb), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA), (C, BK)
    )
    if L2NORM != 0:
        x = ct.astype(ct.astype(x, ct.float32) * inv_norm, x.dtype)
    return x


@ct.kernel
def chunk_grad_output_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    gamma,  # [T, HO] fp32, from chunk_prepare_kernel
    do,  # [T, HO, V] io
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    h,  # [slots, HO, V, K] io, from state_scan_kernel
    dh,  # [slots, HO, V, K] io, from grad_scan_kernel
    v_new,  # [T, HO, V] io
    dv_new,  # [T, HO, V] io
    dq_out,  # [T, HO, K] fp32: per output head, of the normalized q
    dq_final,  # [T, H, K] io: the graph's dQ (written instead of dq_out when DIRECT_QK)
    dk_out,  # [T, HO, K] fp32: the output's and the passed state's terms of dk
    dw_out,  # [T, HO, K] fp32: the gradient of w
    dgamma_out,  # [T, HO, K / BK] fp32: this key block's terms of d gamma
    K_GROUP,
    L2NORM,
    DIRECT_QK,  # one output head per q/k head and no l2 norm: nothing to sum, dQ written here
    K: ConstInt,
    V: ConstInt,
    BK: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    slot, head, kb = ct.bid(0), ct.bid(1), ct.bid(2)
    n = ct.load(table, (slot, 0), shape=())
    if n < 0:
        return
    c = ct.load(table, (slot, 1), shape=())
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    r = ct.arange(C, dtype=ct.int32)
    rows = eos - bos - c * C
    valid = r < rows
    gam = ct.reshape(
        ct.load(gamma.slice(0, bos, eos), (c, head), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA), (C,)
    )
    last_row = ct.minimum(rows, C) - 1
    last = ct.sum(ct.where(r == last_row, gam, 0.0))

    hk = head // K_GROUP
    q_seq, k_seq = q.slice(0, bos, eos), k.slice(0, bos, eos)
    inv_q = ct.zeros((C, 1), dtype=ct.float32)
    inv_k = ct.zeros((C, 1), dtype=ct.float32)
    if L2NORM != 0:
        inv_q = _inverse_row_norms(q_seq, c, hk, K // BK, BK, C)
        inv_k = _inverse_row_norms(k_seq, c, hk, K // BK, BK, C)
    qt = _key_block(q_seq, c, hk, kb, inv_q, L2NORM, BK, C)
    kt = _key_block(k_seq, c, hk, kb, inv_k, L2NORM, BK, C)
    io = kt.dtype

    # the sums over value blocks accumulate in the products' own accumulators (the loop runs
    # at least twice: `GdnCutileBwdConfig.grad_block_v` says why)
    dq_inter = ct.zeros((C, BK), dtype=ct.float32)
    dk_state = ct.zeros((C, BK), dtype=ct.float32)
    dw = ct.zeros((C, BK), dtype=ct.float32)
    dp = ct.zeros((C, C), dtype=ct.float32)
    d_last = ct.zeros((), dtype=ct.float32)
    do_seq, vn_seq, dvn_seq = do.slice(0, bos, eos), v_new.slice(0, bos, eos), dv_new.slice(0, bos, eos)
    for vb in range(V // BV):
        dot = ct.astype(
            _rows(ct.load(do_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), C, BV)
            * SCALE,
            io,
        )
        vn = ct.reshape(
            ct.load(vn_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), (C, BV)
        )
        dvn = ct.reshape(
            ct.load(dvn_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), (C, BV)
        )
        hs = ct.reshape(ct.load(h, (slot, head, vb, kb), shape=(1, 1, BV, BK)), (BV, BK))
        dhs = ct.reshape(ct.load(dh, (slot, head, vb, kb), shape=(1, 1, BV, BK)), (BV, BK))
        dq_inter = ct.mma(dot, hs, dq_inter)
        dp = ct.mma(dot, ct.transpose(vn), dp)
        dk_state = ct.mma(vn, dhs, dk_state)
        dw = ct.mma(-dvn, hs, dw)
        d_last = d_last + ct.sum(ct.astype(dhs, ct.float32) * ct.astype(hs, ct.float32))

    # the output: o = e (q h^T) + (q k^T * M) v_new; this block's columns of q and k
    qf, kf = ct.astype(qt, ct.float32), ct.astype(kt, ct.float32)
    dq = dq_inter * ct.expand_dims(ct.exp(gam), 1)
    dgamma = ct.sum(qf * dq, axis=1)
    # rows and columns both real: gamma reads 0 past the sequence's end (see grad_scan_kernel)
    live = (
        (ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)) & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
    )
    gap = ct.expand_dims(gam, 1) - ct.expand_dims(gam, 0)
    dp = ct.where(live, dp * ct.exp(ct.where(live, gap, 0.0)), 0.0)
    qk = ct.mma(qt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))  # this block's part of q k^T
    dq = dq + mm(dp, kt, io)
    dk = mm(ct.transpose(dp), qt, io)
    dgamma = dgamma + ct.sum(dp * qk, axis=1) - ct.sum(dp * qk, axis=0)
    # the state passed on
    dks = dk_state * ct.expand_dims(ct.where(valid, ct.exp(last - gam), 0.0), 1)
    dk = dk + dks
    dgamma = dgamma - ct.sum(kf * dks, axis=1)
    d_last = d_last * ct.exp(last) + ct.sum(kf * dks)
    dgamma = dgamma + ct.where(r == last_row, d_last, 0.0)

    if DIRECT_QK != 0:
        ct.store(
            dq_final.slice(0, bos, eos),
            (c, head, kb),
            ct.reshape(ct.astype(dq, dq_final.dtype), (C, 1, BK)),
            allow_tma=TMA,
        )
    else:
        ct.store(dq_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dq, (C, 1, BK)), allow_tma=TMA)
    ct.store(dk_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dk, (C, 1, BK)), allow_tma=TMA)
    ct.store(dw_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dw, (C, 1, BK)), allow_tma=TMA)
    ct.store(dgamma_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dgamma, (C, 1, 1)), allow_tma=TMA)


@ct.kernel
def chunk_grad_wy_kernel(
    k,  # [T, H, K] io
    v,  # [T, HV, V] io
    g,  # [T, HG] fp32
    beta,  # [T, HB] fp32 or io
    a_log,  # [HA] (read when SAFE_GATE)
    dt_bias,  # [HD] (read when SAFE_GATE and HAS_DT_BIAS)
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    t_mat,  # [slots, HO, C, C] fp32: T = (I + A)^-1, from chunk_prepare_kernel
    dv_new,  # [T, HO, V] io
    dw,  # [T, HO, K] fp32, from chunk_grad_output_kernel
    dk_io,  # [T, HO, K] fp32: read (the output's terms), written with the WY terms added
    dgamma_part,  # [T, HO, PARTS] fp32, from chunk_grad_output_kernel (PARTS: its key blocks)
    dv_out,  # [T, HO, V] fp32
    dk_final,  # [T, H, K] io: the graph's dK (written instead of dk_io when DIRECT_QK)
    dv_final,  # [T, HV, V] io: the graph's dV (written instead of dv_out when DIRECT_V)
    dg_out,  # [T, HO] fp32: of the raw g (what dt_bias's gradient sums too)
    dbeta_out,  # [T, HO] fp32: of the raw beta
    da_out,  # [T, HO] fp32: each token's term of d_a_log (written when SAFE_GATE)
    K_GROUP,
    V_GROUP,
    G_GROUP,
    B_GROUP,
    A_GROUP,
    D_GROUP,
    L2NORM,
    BETA_SIGMOID,
    NEG_EIGVAL,
    SAFE_GATE,
    HAS_DT_BIAS,
    DIRECT_QK,  # as chunk_grad_output_kernel's
    DIRECT_V,  # one output head per v head: dV written here
    K: ConstInt,
    V: ConstInt,
    BK: ConstInt,
    BV: ConstInt,
    PARTS: ConstInt,
    C: ConstInt,
):
    head = ct.bid(1)
    slot = ct.bid(0)
    n = ct.load(table, (slot, 0), shape=())
    if n < 0:
        return
    c = ct.load(table, (slot, 1), shape=())
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    r = ct.arange(C, dtype=ct.int32)
    valid = r < (eos - bos - c * C)

    # the gates, as chunk_prepare_kernel applies the options
    raw_g = ct.load(
        g.slice(0, bos, eos), (c, head // G_GROUP), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA
    )
    raw_g = ct.astype(ct.reshape(raw_g, (C,)), ct.float32)
    gate = raw_g
    biased = raw_g  # g + dt_bias: safe_gate's softplus argument
    rate = ct.zeros((), dtype=ct.float32)
    if SAFE_GATE != 0:
        rate = ct.exp(ct.astype(ct.load(a_log, (head // A_GROUP,), shape=()), ct.float32))
        if HAS_DT_BIAS != 0:
            biased = raw_g + ct.astype(ct.load(dt_bias, (head // D_GROUP,), shape=()), ct.float32)
        gate = ct.where(valid, -rate * softplus(biased), 0.0)
    raw_b = ct.load(
        beta.slice(0, bos, eos), (c, head // B_GROUP), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA
    )
    raw_b = ct.astype(ct.reshape(raw_b, (C,)), ct.float32)
    wr = raw_b
    if BETA_SIGMOID != 0:
        wr = ct.where(valid, 1.0 / (1.0 + ct.exp(-raw_b)), 0.0)
    if NEG_EIGVAL != 0:
        wr = wr * 2.0
    gamma = ct.cumsum(gate, 0)  # past the end the gates read 0: gamma stays the last real token's
    e = ct.exp(gamma)
    we = ct.expand_dims(wr * e, 1)

    # w = T (beta exp(gamma) k): the Gram matrix A is made of, and T's gradient from dw
    hk = head // K_GROUP
    k_seq, dw_seq, dk_seq = k.slice(0, bos, eos), dw.slice(0, bos, eos), dk_io.slice(0, bos, eos)
    dk_final_seq = dk_final.slice(0, bos, eos)
    inv_k = ct.zeros((C, 1), dtype=ct.float32)
    if L2NORM != 0:
        inv_k = _inverse_row_norms(k_seq, c, hk, K // BK, BK, C)
    gram = ct.zeros((C, C), dtype=ct.float32)
    dt = ct.zeros((C, C), dtype=ct.float32)
    io = k.dtype
    for kb in range(K // BK):
        kt = _key_block(k_seq, c, hk, kb, inv_k, L2NORM, BK, C)
        gram = ct.mma(kt, ct.transpose(kt), gram)
        dwt = ct.reshape(
            ct.load(dw_seq, (c, head, kb), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA), (C, BK)
        )
        dt = ct.mma(ct.astype(dwt, io), ct.transpose(ct.astype(ct.astype(kt, ct.float32) * we, io)), dt)

    # u = T (beta v): dv and beta's first term, and T's gradient from dv_new
    tr = ct.transpose(
        ct.astype(ct.reshape(ct.load(t_mat, (slot, head, 0, 0), shape=(1, 1, C, C)), (C, C)), io)
    )
    d_write = ct.zeros((C,), dtype=ct.float32)
    dvn_seq, v_seq, dv_seq = dv_new.slice(0, bos, eos), v.slice(0, bos, eos), dv_out.slice(0, bos, eos)
    dv_final_seq = dv_final.slice(0, bos, eos)
    hv = head // V_GROUP
    for vb in range(V // BV):
        dvn = ct.reshape(
            ct.load(dvn_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), (C, BV)
        )
        vt = _rows(ct.load(v_seq, (c, hv, vb), shape=(C, 1, BV), padding_mode=_ZERO, allow_tma=TMA), C, BV)
        dvw = ct.mma(tr, dvn, ct.zeros((C, BV), dtype=ct.float32))
        dv = ct.reshape(dvw * ct.expand_dims(wr, 1), (C, 1, BV))
        if DIRECT_V != 0:
            ct.store(dv_final_seq, (c, head, vb), ct.astype(dv, dv_final.dtype), allow_tma=TMA)
        else:
            ct.store(dv_seq, (c, head, vb), dv, allow_tma=TMA)
        d_write = d_write + ct.sum(dvw * vt, axis=1)
        dt = ct.mma(dvn, ct.transpose(ct.astype(vt * ct.expand_dims(wr, 1), io)), dt)

    # the WY solve (fp32): A = beta (k k^T * decay), strictly lower; T = (I + A)^-1
    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    zero_cc = ct.zeros((C, C), dtype=ct.float32)
    da = mm(ct.mma(tr, ct.astype(dt, io), zero_cc), tr, io)
    gap = ct.expand_dims(gamma, 1) - ct.expand_dims(gamma, 0)
    da_att = ct.where(below, -da * ct.exp(ct.where(below, gap, 0.0)), 0.0)  # dA * decay
    d_write = d_write + ct.sum(da_att * gram, axis=1)
    dgram = da_att * ct.expand_dims(wr, 1)
    daa = dgram * gram  # dA * A
    dgamma = ct.sum(daa, axis=1) - ct.sum(daa, axis=0)
    dgram_io = ct.astype(dgram + ct.transpose(dgram), io)
    for kb in range(K // BK):
        kf = ct.astype(_key_block(k_seq, c, hk, kb, inv_k, L2NORM, BK, C), ct.float32)
        dwt = ct.reshape(
            ct.load(dw_seq, (c, head, kb), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA), (C, BK)
        )
        dkw = ct.mma(tr, ct.astype(dwt, io), ct.zeros((C, BK), dtype=ct.float32))
        d_write = d_write + ct.sum(dkw * kf * ct.expand_dims(e, 1), axis=1)
        dgamma = dgamma + ct.sum(dkw * kf * we, axis=1)
        dk = ct.reshape(
            ct.load(dk_seq, (c, head, kb), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA), (C, BK)
        )
        dk = ct.mma(dgram_io, ct.astype(kf, io), dk + dkw * we)
        if DIRECT_QK != 0:
            ct.store(
                dk_final_seq,
                (c, head, kb),
                ct.reshape(ct.astype(dk, dk_final.dtype), (C, 1, BK)),
                allow_tma=TMA,
            )
        else:
            ct.store(dk_seq, (c, head, kb), ct.reshape(dk, (C, 1, BK)), allow_tma=TMA)
    part = ct.load(
        dgamma_part.slice(0, bos, eos), (c, head, 0), shape=(C, 1, PARTS), padding_mode=_ZERO, allow_tma=TMA
    )
    dgamma = dgamma + ct.sum(ct.reshape(part, (C, PARTS)), axis=1)
    # gamma_r = g_0 + ... + g_r: the decay's gradient is dgamma's reverse cumulative sum
    d_decay = ct.sum(dgamma) - ct.cumsum(dgamma, 0) + dgamma

    # the options' chain rules (q's and k's l2 norm: in group_sum_kernel, after the head sums)
    if NEG_EIGVAL != 0:
        d_write = d_write * 2.0
    if BETA_SIGMOID != 0:
        s = 1.0 / (1.0 + ct.exp(-raw_b))
        d_write = d_write * s * (1.0 - s)
    d_raw_g = d_decay
    if SAFE_GATE != 0:
        d_raw_g = ct.where(valid, d_decay * -rate / (1.0 + ct.exp(-biased)), 0.0)
        ct.store(da_out.slice(0, bos, eos), (c, head), ct.reshape(d_decay * gate, (C, 1)), allow_tma=TMA)
    ct.store(dg_out.slice(0, bos, eos), (c, head), ct.reshape(d_raw_g, (C, 1)), allow_tma=TMA)
    ct.store(dbeta_out.slice(0, bos, eos), (c, head), ct.reshape(d_write, (C, 1)), allow_tma=TMA)


# the kernels by the names the host side (`gdn.cutile_bwd_host`) launches them under
BWD_KERNELS = {
    "offsets": chunk_offsets_kernel,
    "states": state_scan_kernel,
    "grad_scan": grad_scan_kernel,
    "chunk_grad_output": chunk_grad_output_kernel,
    "chunk_grad_wy": chunk_grad_wy_kernel,
    "group_sum": group_sum_kernel,
    "gate_sum": gate_sum_kernel,
    "param_sum": param_sum_kernel,
    "segment_combine_grad": segment_combine_kernel,  # REVERSE
}


def export_signatures(
    cfg: Any, *, cu_seqlens: str = "int32", beta: str = "float32", state: str = "float32"
) -> dict:
    """One `KernelSignature` per launch of the backward for ``cfg`` (a `GdnCutileBwdConfig`), for
    ``cuda.tile.compilation.export_kernel``, as `gdn.cutile_fwd.export_signatures` describes them:
    the arrays as the engine passes them, runtime scalars int32, the host side's constants."""

    from pygraph_linear_attention.common.cutile_export import Param, signature
    from pygraph_linear_attention.gdn.cutile_bwd_host import KERNEL_OF, backward_arguments
    from pygraph_linear_attention.gdn.cutile_fwd import KERNELS

    io, f32 = cfg.io_dtype, "float32"
    params = {
        name: Param(io, 3) for name in ("q", "k", "v", "dO", "dQ", "dK", "dV", "w", "u", "v_new", "dv_new")
    }
    params |= {name: Param(f32, 3) for name in ("dq", "dk", "dv")}
    params |= {name: Param(f32, 2) for name in ("g", "dG", "gamma", "dg", "dbeta", "da")}
    params |= {name: Param(io, 4) for name in ("h", "dh")}
    params |= {
        "beta": Param(beta, 2), "dBeta": Param(beta, 2), "cu_seqlens": Param(cu_seqlens, 1),
        "table": Param("int32", 2), "offsets": Param("int32", 1), "spare": Param(f32, 1), "spare4": Param(f32, 4),
        "t": Param(f32, 4), "dw": Param(f32, 3), "dgamma": Param(f32, 3),
        "seg_table": Param("int32", 2), "seg_offsets": Param("int32", 1), "seg_cu": Param("int32", 1),
        "seg_chunk_offsets": Param("int32", 1), "seg_n": Param(f32, 4), "seg_m": Param(f32, 4),
        "seg_h0": Param(f32, 4),
    }  # fmt: skip
    if cfg.safe_gate:
        params |= {"a_log": Param(f32, 1), "d_a_log": Param(f32, 1)}
        if cfg.has_dt_bias:
            params |= {"dt_bias": Param(f32, 1), "d_dt_bias": Param(f32, 1)}
    if cfg.has_initial_state:
        params |= {"h0": Param(state, 4), "dh0": Param(state, 4)}
    if cfg.has_d_final_state:
        params["dht"] = Param(state, 4)
    kernels = {**KERNELS, **BWD_KERNELS}

    args = backward_arguments(cfg, params)
    return {
        name: (kernels[KERNEL_OF[name]], signature(kernels[KERNEL_OF[name]], args[name]))
        for name in cfg.launches()
    }
