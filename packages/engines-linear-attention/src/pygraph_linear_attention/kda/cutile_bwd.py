"""The KDA and GDN-2 backward in cuTile: the steps of `kda.chunked_bwd` on the device.

The graph carries nothing of the forward, so the backward recomputes it. The launches, in stream
order (the host side is `kda.cutile_bwd_host.launch_backward`):

1. The forward's `chunk_table_kernel` and `kda_prepare_kernel` (gamma [T, HO, K] fp32, w, u, and
   each chunk's T = (I + A)^-1 in fp32, the gradient scan's decayed operands), and `chunk_offsets_kernel` (each sequence's first chunk
   slot: a chunk's slot is its sequence's offset plus its index).
2. The forward's `kda_state_scan_kernel` (grid: sequences x heads x value blocks): the state
   entering each chunk (``h`` [slots, HO, V, K], io dtype) and ``v_new`` again.
3. `kda_grad_scan_kernel` (same grid), chunks in reverse from d_final_state, on plain products of
   what the backward's prepare launch stored beside T (``q exp(gamma)``, ``k exp(last - gamma)``
   and the scores P, io dtype): stores the gradient of the state leaving each chunk (``dh``) and
   ``dv_new``; its last state is d_initial_state.
4. `kda_grad_output_kernel`: the output's and the passed state's
   terms, by key blocks (grid: chunk slots x heads x key blocks: dq, dk's and dgamma's first terms,
   dw = -dv_new h); `kda_grad_dt_kernel` (chunk slots x heads): the WY solve's dT, hence dA (to the
   workspace), dv and the write gate's gradient; `kda_grad_wy_kernel` (same grid): each key
   block's WY terms (the rest of dk, beta's), dgamma's reverse cumulative sum per channel and the
   gates' chain rules. Cut by concern so each holds few tiles (spill frames: `kda.cutile_bwd_host`).
5. `group_sum_kernel` / `gate_sum_kernel` / `param_sum_kernel` (GDN's) and
   `channel_param_sum_kernel`: the per-output-head gradients summed over the heads each input
   head serves (q's and k's taken back through their L2 norm there), over tokens for a_log and
   dt_bias, cast to the graph's dtypes.

Every decay-weighted product is per key channel, ``sum_j m[r, j] y_j exp(gamma_r - gamma_j)``
(`_row_weighted`) or ``sum_r m[r, j] x_r exp(gamma_r - gamma_j)`` (`_col_weighted``), for a
lower-triangular ``m``: by sub-chunks of `SUB` rows (or columns) against the sub-chunk's first
gamma, so across sub-chunks both factors are decays and inside one the growth is at most
``exp(-(SUB - 1) min g)`` (the forward's `_weighted_pairs` does the same).
"""

from __future__ import annotations

import cuda.tile as ct

from pygraph_linear_attention.common.cutile_blocks import (
    SUB,
    TMA,
    chunk_offsets_kernel,
    chunk_table_kernel,
    gate_sum_kernel,
    group_sum_kernel,
    mm,
    param_sum_kernel,
    rows_at,
)
from pygraph_linear_attention.kda.cutile_fwd import (
    block_rows,
    chunk_at,
    gamma_block,
    gate_block,
    inverse_norms,
    kda_prepare_kernel,
    kda_state_scan_kernel,
    sequence_bounds,
    write_rows,
)

__all__ = [
    "BWD_KERNELS",
    "channel_param_sum_kernel",
    "export_signatures",
    "kda_grad_dt_kernel",
    "kda_grad_output_kernel",
    "kda_grad_scan_kernel",
    "kda_grad_wy_kernel",
]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]
_ZERO = ct.PaddingMode.ZERO


def _state_block(states, slot, h, vb, BV: ConstInt, K: ConstInt):
    """The [BV, K] fp32 block ``vb`` of a per-chunk state tile [slots, HO, V, K]."""
    return ct.astype(
        ct.reshape(ct.load(states, (slot, h, vb, 0), shape=(1, 1, BV, K), allow_tma=TMA), (BV, K)), ct.float32
    )


def _sub(x, i, D: ConstInt):
    """Sub-chunk ``i``'s rows [SUB, D] of a [C, D] tile."""
    return ct.extract(x, (i, 0), (SUB, D))


def _row_part(m, y, gamma, ref, i, j, K: ConstInt):
    """``m[i, j] (y_j exp(ref - gamma_j))`` [SUB, K]: block (i, j) of m [SUB, SUB] against sub-chunk j."""
    right = _sub(y, j, K) * ct.exp(ref - _sub(gamma, j, K))
    return ct.mma(ct.extract(m, (i, j), (SUB, SUB)), right, ct.zeros((SUB, K), dtype=ct.float32))


def _row_weighted(m, y, gamma, C: ConstInt, K: ConstInt):
    """[C, K]: row r is ``sum_j m[r, j] y_j exp(gamma_r - gamma_j)`` channel by channel; m [C, C]
    fp32, 0 above the diagonal; y, gamma [C, K] fp32. Sub-chunk i of rows against its first gamma
    ``ref_i``: ``exp(gamma_i - ref_i) sum_{j <= i} m[i, j] (y_j exp(ref_i - gamma_j))``, SUB x SUB
    blocks of m, so no [C, K] factor is live (module docstring)."""
    g0 = ct.extract(gamma, (0, 0), (1, K))
    g1 = ct.extract(gamma, (SUB, 0), (1, K))
    g2 = ct.extract(gamma, (2 * SUB, 0), (1, K))
    g3 = ct.extract(gamma, (3 * SUB, 0), (1, K))
    o0 = _row_part(m, y, gamma, g0, 0, 0, K)
    o1 = _row_part(m, y, gamma, g1, 1, 0, K) + _row_part(m, y, gamma, g1, 1, 1, K)
    o2 = (
        _row_part(m, y, gamma, g2, 2, 0, K)
        + _row_part(m, y, gamma, g2, 2, 1, K)
        + _row_part(m, y, gamma, g2, 2, 2, K)
    )
    o3 = (
        _row_part(m, y, gamma, g3, 3, 0, K) + _row_part(m, y, gamma, g3, 3, 1, K)
        + _row_part(m, y, gamma, g3, 3, 2, K) + _row_part(m, y, gamma, g3, 3, 3, K)
    )  # fmt: skip
    top = ct.cat((o0 * ct.exp(_sub(gamma, 0, K) - g0), o1 * ct.exp(_sub(gamma, 1, K) - g1)), 0)
    bottom = ct.cat((o2 * ct.exp(_sub(gamma, 2, K) - g2), o3 * ct.exp(_sub(gamma, 3, K) - g3)), 0)
    return ct.cat((top, bottom), 0)


def _col_part(m, x, gamma, ref, i, j, K: ConstInt):
    """``m[i, j]^T (x_i exp(gamma_i - ref))`` [SUB, K]: block (i, j) of m transposed against sub-chunk i."""
    left = _sub(x, i, K) * ct.exp(_sub(gamma, i, K) - ref)
    return ct.mma(ct.transpose(ct.extract(m, (i, j), (SUB, SUB))), left, ct.zeros((SUB, K), dtype=ct.float32))


def _col_weighted(m, x, gamma, C: ConstInt, K: ConstInt):
    """[C, K]: row j is ``sum_r m[r, j] x_r exp(gamma_r - gamma_j)`` channel by channel; m [C, C]
    fp32, 0 above the diagonal; x, gamma [C, K] fp32. Sub-chunk j of columns against its first
    gamma ``ref_j``: ``exp(ref_j - gamma_j) sum_{i >= j} m[i, j]^T (x_i exp(gamma_i - ref_j))``."""
    g0 = ct.extract(gamma, (0, 0), (1, K))
    g1 = ct.extract(gamma, (SUB, 0), (1, K))
    g2 = ct.extract(gamma, (2 * SUB, 0), (1, K))
    g3 = ct.extract(gamma, (3 * SUB, 0), (1, K))
    o0 = (
        _col_part(m, x, gamma, g0, 0, 0, K) + _col_part(m, x, gamma, g0, 1, 0, K)
        + _col_part(m, x, gamma, g0, 2, 0, K) + _col_part(m, x, gamma, g0, 3, 0, K)
    )  # fmt: skip
    o1 = (
        _col_part(m, x, gamma, g1, 1, 1, K)
        + _col_part(m, x, gamma, g1, 2, 1, K)
        + _col_part(m, x, gamma, g1, 3, 1, K)
    )
    o2 = _col_part(m, x, gamma, g2, 2, 2, K) + _col_part(m, x, gamma, g2, 3, 2, K)
    o3 = _col_part(m, x, gamma, g3, 3, 3, K)
    top = ct.cat((o0 * ct.exp(g0 - _sub(gamma, 0, K)), o1 * ct.exp(g1 - _sub(gamma, 1, K))), 0)
    bottom = ct.cat((o2 * ct.exp(g2 - _sub(gamma, 2, K)), o3 * ct.exp(g3 - _sub(gamma, 3, K))), 0)
    return ct.cat((top, bottom), 0)


@ct.kernel
def kda_grad_scan_kernel(
    qd,  # [T, HO, K] io: q exp(gamma), from kda_prepare_kernel (its backward launch)
    kd,  # [T, HO, K] io: k exp(last - gamma)
    p,  # [T, HO, C] io: the chunk's scores
    w,  # [T, HO, K] io
    gamma,  # [T, HO, K] fp32: its chunk's last row decays the state
    do,  # [T, HO, V] io: dO
    cu_seqlens,  # [N + 1]
    offsets,  # [N] int32
    dht,  # [N, HO, V, K] (read when HAS_DHT): d_final_state
    dh_out,  # [slots, HO, V, K] io: the gradient of the state leaving each chunk
    dv_new_out,  # [T, HO, V] io
    dh0,  # [N, HO, V, K] (written when HAS_H0): d_initial_state
    HAS_DHT,
    HAS_H0,
    K: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos, eos = sequence_bounds(cu_seqlens, n)
    base = ct.load(offsets, (n,), shape=())
    length = eos - bos
    d_state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_DHT != 0:
        d_state = _state_block(dht, n, h, vb, BV, K)
    chunks = ct.cdiv(length, C)
    for i in range(chunks):
        c = chunks - 1 - i
        # sliced inside the loop: an empty last sequence (bos == T) must not slice
        qd_seq, kd_seq, p_seq = qd.slice(0, bos, eos), kd.slice(0, bos, eos), p.slice(0, bos, eos)
        w_seq, g_seq = w.slice(0, bos, eos), gamma.slice(0, bos, eos)
        do_seq, dvn_seq = do.slice(0, bos, eos), dv_new_out.slice(0, bos, eos)
        last_row = c * C + ct.minimum(length - c * C, C) - 1
        last = ct.reshape(ct.load(g_seq, (last_row, h, 0), shape=(1, 1, K), allow_tma=TMA), (1, K))
        # rows past the sequence load as 0 (every operand), so they add nothing
        qdt, kdt = rows_at(qd_seq, (c, h, 0), C, K), rows_at(kd_seq, (c, h, 0), C, K)
        wt, pt = rows_at(w_seq, (c, h, 0), C, K), rows_at(p_seq, (c, h, 0), C, C)
        io = qdt.dtype
        dot = ct.astype(block_rows(do_seq, c, h, vb, C, BV) * SCALE, io)
        ct.store(
            dh_out,
            (base + c, h, vb, 0),
            ct.reshape(ct.astype(d_state, dh_out.dtype), (1, 1, BV, K)),
            allow_tma=TMA,
        )
        # dv_new = P^T (scale dO) + (k exp(last - gamma)) dS^T, one accumulator chain
        dv_new = ct.mma(
            ct.transpose(pt),
            dot,
            ct.mma(kdt, ct.transpose(ct.astype(d_state, io)), ct.zeros((C, BV), dtype=ct.float32)),
        )
        ct.store(
            dvn_seq, (c, h, vb), ct.reshape(ct.astype(dv_new, dv_new_out.dtype), (C, 1, BV)), allow_tma=TMA
        )
        # one accumulator chain (as GDN's grad scan: tileiras 13.4 rejects a sum of separate products
        # here for sm_80)
        d_state = ct.mma(ct.transpose(ct.astype(-dv_new, io)), wt, d_state * ct.exp(last))
        d_state = ct.mma(ct.transpose(dot), qdt, d_state)
    if HAS_H0 != 0:
        ct.store(dh0, (n, h, vb, 0), ct.reshape(ct.astype(d_state, dh0.dtype), (1, 1, BV, K)), allow_tma=TMA)


@ct.kernel
def kda_grad_output_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    gamma,  # [T, HO, K] fp32, from kda_prepare_kernel
    do,  # [T, HO, V] io
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    h,  # [slots, HO, V, K] io, from kda_state_scan_kernel
    dh,  # [slots, HO, V, K] io, from kda_grad_scan_kernel
    v_new,  # [T, HO, V] io
    dv_new,  # [T, HO, V] io
    dq_out,  # [T, HO, K] fp32: per output head, of the normalized q
    dk_out,  # [T, HO, K] fp32: the output's and the passed state's terms of dk
    dw_out,  # [T, HO, K] fp32: the gradient of w
    dgamma_out,  # [T, HO, K] fp32: those terms' part of d gamma
    K_GROUP,
    L2NORM,
    K: ConstInt,
    V: ConstInt,
    BK: ConstInt,  # key channels of this program (grid axis 2): each channel's gradient is its own
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    slot, head, kb = ct.bid(0), ct.bid(1), ct.bid(2)
    n, c, bos, eos, rows = chunk_at(table, cu_seqlens, slot, C)
    if n < 0:
        return
    r = ct.arange(C, dtype=ct.int32)
    valid = r < rows
    hk = head // K_GROUP
    q_seq, k_seq = q.slice(0, bos, eos), k.slice(0, bos, eos)
    gam, last = gamma_block(gamma.slice(0, bos, eos), c, head, kb, r, rows, C, BK)
    qf = block_rows(q_seq, c, hk, kb, C, BK) * inverse_norms(q_seq, c, hk, L2NORM, K // BK, BK, C)
    kf = block_rows(k_seq, c, hk, kb, C, BK) * inverse_norms(k_seq, c, hk, L2NORM, K // BK, BK, C)
    io = q.dtype

    # the sums over value blocks accumulate in the products' own accumulators (at least two steps)
    dq_state = ct.zeros((C, BK), dtype=ct.float32)  # dO h
    dk_state = ct.zeros((C, BK), dtype=ct.float32)  # v_new dh
    dw = ct.zeros((C, BK), dtype=ct.float32)
    dp = ct.zeros((C, C), dtype=ct.float32)
    d_last = ct.zeros((1, BK), dtype=ct.float32)  # sum_v dh * h
    do_seq, vn_seq, dvn_seq = do.slice(0, bos, eos), v_new.slice(0, bos, eos), dv_new.slice(0, bos, eos)
    for vb in range(V // BV):
        dot = ct.astype(block_rows(do_seq, c, head, vb, C, BV) * SCALE, io)
        vn = ct.astype(block_rows(vn_seq, c, head, vb, C, BV), io)
        dvn = ct.astype(block_rows(dvn_seq, c, head, vb, C, BV), io)
        hs = ct.reshape(ct.load(h, (slot, head, vb, kb), shape=(1, 1, BV, BK), allow_tma=TMA), (BV, BK))
        dhs = ct.reshape(ct.load(dh, (slot, head, vb, kb), shape=(1, 1, BV, BK), allow_tma=TMA), (BV, BK))
        dq_state = ct.mma(dot, hs, dq_state)
        dp = ct.mma(dot, ct.transpose(vn), dp)
        dk_state = ct.mma(vn, dhs, dk_state)
        dw = ct.mma(-dvn, hs, dw)
        d_last = d_last + ct.sum(
            ct.astype(dhs, ct.float32) * ct.astype(hs, ct.float32), axis=0, keepdims=True
        )

    live = (
        (ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)) & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
    )
    dp = ct.where(live, dp, 0.0)
    # o = (q exp(gamma)) h^T + P v_new, P[r, j] = sum_c q_r exp(gamma_r - gamma_j) k_j
    dq = dq_state * ct.exp(gam) + _row_weighted(dp, kf, gam, C, BK)
    # the state passed on: h_out = h exp(last) + v_new^T (k exp(last - gamma))
    dk_tail = dk_state * ct.where(ct.expand_dims(valid, 1), ct.exp(last - gam), 0.0)
    dk = _col_weighted(dp, qf, gam, C, BK) + dk_tail
    dgamma = qf * dq - kf * dk
    d_last = d_last * ct.exp(last) + ct.sum(kf * dk_tail, axis=0, keepdims=True)
    dgamma = dgamma + ct.where(ct.expand_dims(r == ct.minimum(rows, C) - 1, 1), d_last, 0.0)

    ct.store(dq_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dq, (C, 1, BK)), allow_tma=TMA)
    ct.store(dk_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dk, (C, 1, BK)), allow_tma=TMA)
    ct.store(dw_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dw, (C, 1, BK)), allow_tma=TMA)
    ct.store(dgamma_out.slice(0, bos, eos), (c, head, kb), ct.reshape(dgamma, (C, 1, BK)), allow_tma=TMA)


@ct.kernel
def kda_grad_dt_kernel(
    k,  # [T, H, K] io
    v,  # [T, HV, V] io
    beta,  # [T, HB] (KDA) or [T, HB, K] (GDN-2), fp32 or io
    w_gate,  # [T, HW, V] io (read when HAS_W)
    gamma,  # [T, HO, K] fp32, from kda_prepare_kernel
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    t_mat,  # [slots, HO, C, C] fp32: T = (I + A)^-1, from kda_prepare_kernel
    dv_new,  # [T, HO, V] io
    dw,  # [T, HO, K] fp32, from kda_grad_output_kernel
    dv_out,  # [T, HO, V] fp32
    dwg_out,  # [T, HO, V] fp32: the write gate's gradient (written when HAS_W)
    dbeta_out,  # [T, HO] fp32: KDA's beta, its value term (before the options; written unless HAS_W)
    da_out,  # [slots, HO, C, C] fp32: the gradient of A
    K_GROUP,
    V_GROUP,
    B_GROUP,
    W_GROUP,
    L2NORM,
    BETA_SIGMOID,
    NEG_EIGVAL,
    HAS_W: ConstInt,  # GDN-2 (constant: KDA's absent write gate is a stand-in of another rank)
    BETA_PER_CHANNEL: ConstInt,
    K: ConstInt,
    V: ConstInt,
    BK: ConstInt,
    BV: ConstInt,
    C: ConstInt,
):
    slot, head = ct.bid(0), ct.bid(1)
    n, c, bos, eos, rows = chunk_at(table, cu_seqlens, slot, C)
    if n < 0:
        return
    r = ct.arange(C, dtype=ct.int32)
    valid = ct.expand_dims(r < rows, 1)  # [C, 1]
    beta_seq, k_seq = beta.slice(0, bos, eos), k.slice(0, bos, eos)
    gm_seq, dw_seq = gamma.slice(0, bos, eos), dw.slice(0, bos, eos)
    hk, bh = head // K_GROUP, head // B_GROUP
    inv_k = inverse_norms(k_seq, c, hk, L2NORM, K // BK, BK, C)
    io = k.dtype
    tr = ct.transpose(
        ct.astype(
            ct.reshape(ct.load(t_mat, (slot, head, 0, 0), shape=(1, 1, C, C), allow_tma=TMA), (C, C)), io
        )
    )

    # dT = dw kw^T + dv_new vw^T, kw = e exp(gamma), e = beta k: over key blocks, then value blocks
    dt = ct.zeros((C, C), dtype=ct.float32)
    for kb in range(K // BK):
        gam, _ = gamma_block(gm_seq, c, head, kb, r, rows, C, BK)
        wr, _ = write_rows(beta_seq, c, bh, kb, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
        kw = block_rows(k_seq, c, hk, kb, C, BK) * inv_k * wr * ct.exp(gam)
        dt = ct.mma(
            ct.astype(block_rows(dw_seq, c, head, kb, C, BK), io), ct.transpose(ct.astype(kw, io)), dt
        )
    # u = T vw (KDA: vw = beta v; GDN-2: the write gate times v): dv, the gates' value terms
    wr, _ = write_rows(beta_seq, c, bh, 0, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
    d_write = ct.zeros((C, 1), dtype=ct.float32)
    dvn_seq, v_seq, dv_seq = dv_new.slice(0, bos, eos), v.slice(0, bos, eos), dv_out.slice(0, bos, eos)
    hv = head // V_GROUP
    for vb in range(V // BV):
        dvn = ct.astype(block_rows(dvn_seq, c, head, vb, C, BV), io)
        vt = block_rows(v_seq, c, hv, vb, C, BV)
        dvw = ct.mma(tr, dvn, ct.zeros((C, BV), dtype=ct.float32))
        if HAS_W != 0:
            wgt = block_rows(w_gate.slice(0, bos, eos), c, head // W_GROUP, vb, C, BV)
            ct.store(
                dwg_out.slice(0, bos, eos), (c, head, vb), ct.reshape(dvw * vt, (C, 1, BV)), allow_tma=TMA
            )
            vw = vt * wgt
            ct.store(dv_seq, (c, head, vb), ct.reshape(dvw * wgt, (C, 1, BV)), allow_tma=TMA)
        else:
            d_write = d_write + ct.sum(dvw * vt, axis=1, keepdims=True)
            vw = vt * wr
            ct.store(dv_seq, (c, head, vb), ct.reshape(dvw * wr, (C, 1, BV)), allow_tma=TMA)
        dt = ct.mma(dvn, ct.transpose(ct.astype(vw, io)), dt)
    if HAS_W == 0:
        ct.store(dbeta_out.slice(0, bos, eos), (c, head), d_write, allow_tma=TMA)
    # T = (I + A)^-1: dA = -T^T dT T^T, strictly lower
    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    da = ct.where(below, -mm(mm(tr, dt, io), tr, io), 0.0)
    ct.store(da_out, (slot, head, 0, 0), ct.reshape(da, (1, 1, C, C)), allow_tma=TMA)


@ct.kernel
def kda_grad_wy_kernel(
    k,  # [T, H, K] io
    g,  # [T, HG, K] fp32: the raw gate
    beta,  # [T, HB] (KDA) or [T, HB, K] (GDN-2), fp32 or io
    a_log,  # [HA] (read when SAFE_GATE and HAS_A_LOG)
    dt_bias,  # [HD, K] (read when SAFE_GATE and HAS_DT_BIAS)
    gamma,  # [T, HO, K] fp32, from kda_prepare_kernel
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    t_mat,  # [slots, HO, C, C] fp32: T = (I + A)^-1, from kda_prepare_kernel
    da_mat,  # [slots, HO, C, C] fp32: dA, from kda_grad_dt_kernel
    dw,  # [T, HO, K] fp32, from kda_grad_output_kernel
    dk_io,  # [T, HO, K] fp32: read (the output's terms), written with the WY terms added
    dgamma_part,  # [T, HO, K] fp32, from kda_grad_output_kernel
    dg_out,  # [T, HO, K] fp32: of the raw g (what dt_bias's gradient sums too)
    dbeta_out,  # [T, HO] (KDA: read, its value term, and written) or [T, HO, K] fp32: of the raw beta
    da_out,  # [T, HO] fp32: each token's term of d_a_log (written when SAFE_GATE and HAS_A_LOG)
    K_GROUP,
    G_GROUP,
    B_GROUP,
    A_GROUP,
    D_GROUP,
    L2NORM,
    BETA_SIGMOID,
    NEG_EIGVAL,
    SAFE_GATE,
    HAS_A_LOG,
    HAS_DT_BIAS,
    LOWER_BOUND: ConstFloat,
    BETA_PER_CHANNEL: ConstInt,
    K: ConstInt,
    BK: ConstInt,  # key channels per step (each channel's terms are its own)
    C: ConstInt,
):
    slot, head = ct.bid(0), ct.bid(1)
    n, c, bos, eos, rows = chunk_at(table, cu_seqlens, slot, C)
    if n < 0:
        return
    r = ct.arange(C, dtype=ct.int32)
    valid = ct.expand_dims(r < rows, 1)  # [C, 1]
    g_seq, beta_seq, k_seq = g.slice(0, bos, eos), beta.slice(0, bos, eos), k.slice(0, bos, eos)
    gm_seq, dw_seq = gamma.slice(0, bos, eos), dw.slice(0, bos, eos)
    hk, gh, bh, ah, dh = head // K_GROUP, head // G_GROUP, head // B_GROUP, head // A_GROUP, head // D_GROUP
    inv_k = inverse_norms(k_seq, c, hk, L2NORM, K // BK, BK, C)
    io = k.dtype
    tr = ct.transpose(
        ct.astype(
            ct.reshape(ct.load(t_mat, (slot, head, 0, 0), shape=(1, 1, C, C), allow_tma=TMA), (C, C)), io
        )
    )
    da = ct.reshape(ct.load(da_mat, (slot, head, 0, 0), shape=(1, 1, C, C), allow_tma=TMA), (C, C))

    # A = tril(kw kd^T, -1), kd = k exp(-gamma), kw = e exp(gamma), w = T kw: each key block's terms
    d_write = ct.zeros((C, 1), dtype=ct.float32)  # KDA's beta: its key terms
    da_token = ct.zeros((C, 1), dtype=ct.float32)  # sum over channels of d_z z (d_a_log's term)
    dk_seq, dgp_seq = dk_io.slice(0, bos, eos), dgamma_part.slice(0, bos, eos)
    for kb in range(K // BK):
        _, z, rate = gate_block(g_seq, a_log, dt_bias, c, kb, valid, gh, ah, dh, SAFE_GATE, HAS_A_LOG,
                                 HAS_DT_BIAS, LOWER_BOUND, C, BK)  # fmt: skip
        gam, _ = gamma_block(gm_seq, c, head, kb, r, rows, C, BK)
        wr_b, raw_b_k = write_rows(
            beta_seq, c, bh, kb, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK
        )
        kf = block_rows(k_seq, c, hk, kb, C, BK) * inv_k
        erase = kf * wr_b
        dwt = block_rows(dw_seq, c, head, kb, C, BK)
        de = ct.exp(gam) * ct.mma(tr, ct.astype(dwt, io), ct.zeros((C, BK), dtype=ct.float32))
        de = de + _row_weighted(da, kf, gam, C, BK)  # the erase key's gradient (kw = e exp(gamma))
        dk_a = _col_weighted(da, erase, gam, C, BK)  # through kd
        dk = block_rows(dk_seq, c, head, kb, C, BK) + dk_a + wr_b * de
        ct.store(dk_seq, (c, head, kb), ct.reshape(dk, (C, 1, BK)), allow_tma=TMA)
        dgamma = block_rows(dgp_seq, c, head, kb, C, BK) + erase * de - kf * dk_a
        # gamma = cumsum(gate) down the chunk: the gate's gradient is dgamma's reverse cumulative sum
        d_decay = ct.sum(dgamma, axis=0, keepdims=True) - ct.cumsum(dgamma, 0) + dgamma
        d_raw_g = d_decay
        if SAFE_GATE != 0:  # gate = LOWER_BOUND sigmoid(z), z = exp(a_log) (g + dt_bias)
            s = 1.0 / (1.0 + ct.exp(-z))
            d_z = ct.where(valid, d_decay * LOWER_BOUND * s * (1.0 - s), 0.0)
            d_raw_g = d_z * rate
            da_token = da_token + ct.sum(d_z * z, axis=1, keepdims=True)
        ct.store(dg_out.slice(0, bos, eos), (c, head, kb), ct.reshape(d_raw_g, (C, 1, BK)), allow_tma=TMA)
        if BETA_PER_CHANNEL != 0:  # GDN-2: beta per channel, this block's gradient is its own
            d_beta = de * kf
            if NEG_EIGVAL != 0:
                d_beta = d_beta * 2.0
            if BETA_SIGMOID != 0:
                sb = 1.0 / (1.0 + ct.exp(-raw_b_k))
                d_beta = d_beta * sb * (1.0 - sb)
            ct.store(
                dbeta_out.slice(0, bos, eos), (c, head, kb), ct.reshape(d_beta, (C, 1, BK)), allow_tma=TMA
            )
        else:
            d_write = d_write + ct.sum(de * kf, axis=1, keepdims=True)
    if BETA_PER_CHANNEL == 0:  # KDA: beta one value per token, its value term from kda_grad_dt_kernel
        db_seq = dbeta_out.slice(0, bos, eos)
        d_write = d_write + ct.load(db_seq, (c, head), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA)
        _, raw_b = write_rows(beta_seq, c, bh, 0, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
        if NEG_EIGVAL != 0:
            d_write = d_write * 2.0
        if BETA_SIGMOID != 0:
            sb = 1.0 / (1.0 + ct.exp(-raw_b))
            d_write = d_write * sb * (1.0 - sb)
        ct.store(db_seq, (c, head), d_write, allow_tma=TMA)
    if SAFE_GATE != 0:
        if HAS_A_LOG != 0:
            ct.store(da_out.slice(0, bos, eos), (c, head), da_token, allow_tma=TMA)


@ct.kernel
def channel_param_sum_kernel(src, dst, T, GROUP, K: ConstInt, TB: ConstInt):
    """dst[p, :] = the sum over all tokens and the heads p serves of src: src [T, HO, K] fp32, dst
    [HO // GROUP, K] (dt_bias's gradient, one value per head and key channel)."""
    p = ct.bid(0)
    acc = ct.zeros((TB, 1, K), dtype=ct.float32)
    for step in range(ct.cdiv(T, TB)):
        for i in range(GROUP):
            acc = acc + ct.load(
                src, (step, p * GROUP + i, 0), shape=(TB, 1, K), padding_mode=_ZERO, allow_tma=TMA
            )
    ct.store(dst, (p, 0), ct.astype(ct.reshape(ct.sum(acc, axis=0), (1, K)), dst.dtype), allow_tma=TMA)


# the kernels by the names the host side (`kda.cutile_bwd_host`) launches them under
BWD_KERNELS = {
    "table": chunk_table_kernel,
    "prepare": kda_prepare_kernel,
    "offsets": chunk_offsets_kernel,
    "states": kda_state_scan_kernel,
    "grad_scan": kda_grad_scan_kernel,
    "grad_output": kda_grad_output_kernel,
    "grad_dt": kda_grad_dt_kernel,
    "grad_wy": kda_grad_wy_kernel,
    "group_sum": group_sum_kernel,
    "gate_sum": gate_sum_kernel,
    "param_sum": param_sum_kernel,
    "channel_param_sum": channel_param_sum_kernel,
}


def export_signatures(cfg, *, beta: str = "float32", state: str = "float32") -> dict:
    """One (kernel, `KernelSignature`) per launch of the backward for ``cfg`` (a `KdaCutileBwdConfig`),
    for ``cuda.tile.compilation.export_kernel``, with the arguments
    `kda.cutile_bwd_host.backward_arguments` passes (as `gdn.cutile_fwd.export_signatures`)."""
    from pygraph_linear_attention.common.cutile_export import Param, signature
    from pygraph_linear_attention.kda.cutile_bwd_host import KERNEL_OF, backward_arguments

    io, f32, gdn2 = cfg.io_dtype, "float32", cfg.op == "gdn2"
    params = {
        name: Param(io, 3) for name in ("q", "k", "v", "dO", "dQ", "dK", "dV", "w", "u", "v_new", "dv_new")
    }
    params |= {name: Param(f32, 3) for name in ("g", "dG", "gamma", "dq", "dk", "dw", "dgamma", "dv", "dg")}
    params |= {name: Param(io, 4) for name in ("h", "dh")}
    params |= {name: Param(io, 3) for name in ("q_decayed", "k_decayed", "scores")}
    params |= {
        "beta": Param(beta, 3 if gdn2 else 2), "dBeta": Param(beta, 3 if gdn2 else 2),
        "dbeta": Param(f32, 3 if gdn2 else 2), "da": Param(f32, 2), "cu_seqlens": Param("int32", 1),
        "table": Param("int32", 2), "offsets": Param("int32", 1), "t": Param(f32, 4), "da_mat": Param(f32, 4),
        "spare": Param(f32, 1), "spare2": Param(f32, 2), "spare4": Param(f32, 4),
    }  # fmt: skip
    if gdn2:
        params |= {"w_gate": Param(io, 3), "dW": Param(io, 3), "dwg": Param(f32, 3)}
    if cfg.has_a_log:
        params |= {"a_log": Param(f32, 1), "d_a_log": Param(f32, 1)}
    if cfg.has_dt_bias:
        params |= {"dt_bias": Param(f32, 2), "d_dt_bias": Param(f32, 2)}
    if cfg.has_initial_state:
        params |= {"h0": Param(state, 4), "dh0": Param(state, 4)}
    if cfg.has_d_final_state:
        params["dht"] = Param(state, 4)
    args = backward_arguments(cfg, params)
    kernels = {name: BWD_KERNELS[KERNEL_OF[name]] for name in cfg.launches()}
    return {name: (kernel, signature(kernel, args[name])) for name, kernel in kernels.items()}
