"""The Gated DeltaNet backward in cuTile: the steps of `chunked_bwd.py` on the device.

Nothing of the forward is stored by the graph, so the backward recomputes it. The launches, in
stream order (the host side is `gdn_cutile_bwd_host.launch_backward`):

1. The forward's `chunk_table_kernel` and `chunk_prepare_kernel` (gamma, w, u to the workspace),
   and `chunk_offsets_kernel`: each sequence's first chunk slot, so the scans can index the
   per-chunk states by the table's slots.
2. `state_scan_kernel` (grid: sequences x heads x value blocks): the forward's state scan again,
   storing the state entering each chunk (``h``, [slots, HO, V, K], io dtype) and ``v_new``.
3. `grad_scan_kernel` (same grid), chunks in reverse from d_final_state: stores the gradient of
   the state leaving each chunk (``dh``) and ``dv_new``; its last state is d_initial_state.
4. `chunk_grad_kernel` (grid: chunk slots x heads): per chunk, everything else of
   `chunked_bwd.chunk_grads` with A and T recomputed, then the options' chain rules, giving
   per-output-head fp32 gradients of the graph's inputs (dq, dk, dv, dg, dbeta, and per token
   the a_log term) in the workspace; the value dim is walked in blocks of BV (two or more
   blocks) so the state tiles stay [BV, K].
5. `group_sum_kernel`, `gate_sum_kernel`, `param_sum_kernel`: the per-output-head gradients summed
   over the heads each input head serves (GQA/GVA, per-head gates), and over tokens for a_log
   and dt_bias, cast to the graph's dtypes.

Matrix products take io-dtype operands with fp32 accumulation, except those of the inverse and of
its gradient (fp32), as in the forward.
"""

from __future__ import annotations

from typing import Any

import cuda.tile as ct

from pygraph_linear_attention.kernels.gdn_cutile_fwd import _l2_normalized, _softplus, _unit_lower_inverse

__all__ = [
    "BWD_KERNELS",
    "chunk_grad_kernel",
    "chunk_offsets_kernel",
    "export_signatures",
    "gate_sum_kernel",
    "grad_scan_kernel",
    "group_sum_kernel",
    "param_sum_kernel",
    "state_scan_kernel",
]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]
_ZERO = ct.PaddingMode.ZERO


def _mm(x, y, dtype):
    """x @ y with ``dtype`` operands and fp32 accumulation."""
    acc = ct.zeros((x.shape[0], y.shape[1]), dtype=ct.float32)
    return ct.mma(ct.astype(x, dtype), ct.astype(y, dtype), acc)


def _rows(x, C: ConstInt, D: ConstInt):
    """A [C, 1, D] tile as [C, D] fp32."""
    return ct.astype(ct.reshape(x, (C, D)), ct.float32)


@ct.kernel
def chunk_offsets_kernel(cu_seqlens, offsets, N, C: ConstInt, BN: ConstInt):
    """offsets[n] = the table slot of sequence n's first chunk (the chunks of the sequences before it)."""
    carry = ct.zeros((), dtype=ct.int32)
    for step in range(ct.cdiv(N, BN)):
        m = step * BN + ct.arange(BN, dtype=ct.int32)
        inside = m < N
        lo = ct.astype(ct.gather(cu_seqlens, m, mask=inside, padding_value=0), ct.int32)
        hi = ct.astype(ct.gather(cu_seqlens, m + 1, mask=inside, padding_value=0), ct.int32)
        counts = ct.cdiv(hi - lo, C)
        ct.store(offsets, (step,), ct.cumsum(counts, 0) + carry - counts)
        carry = carry + ct.sum(counts)


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
        kt = ct.reshape(ct.load(k_seq, (c, hk, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
        if L2NORM != 0:
            kt = _l2_normalized(kt)
        wt = ct.reshape(ct.load(w_seq, (c, h, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
        ut = ct.reshape(ct.load(u_seq, (c, h, vb), shape=(C, 1, BV), padding_mode=_ZERO), (C, BV))
        gam = ct.reshape(ct.load(g_seq, (c, h), shape=(C, 1), padding_mode=_ZERO), (C,))
        state_io = ct.astype(state, kt.dtype)
        ct.store(h_out, (base + c, h, vb, 0), ct.reshape(ct.astype(state, h_out.dtype), (1, 1, BV, K)))
        v_new = ct.astype(ut, ct.float32) - ct.mma(
            wt, ct.transpose(state_io), ct.zeros((C, BV), dtype=ct.float32)
        )
        ct.store(vn_seq, (c, h, vb), ct.reshape(ct.astype(v_new, v_new_out.dtype), (C, 1, BV)))
        last = ct.sum(ct.where(r == ct.minimum(rows, C) - 1, gam, 0.0))
        carried = ct.astype(v_new * ct.expand_dims(ct.where(valid, ct.exp(last - gam), 0.0), 1), kt.dtype)
        state = ct.mma(ct.transpose(carried), kt, state * ct.exp(last))


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
        qt = ct.reshape(ct.load(q_seq, (c, hk, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
        kt = ct.reshape(ct.load(k_seq, (c, hk, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
        if L2NORM != 0:
            qt = _l2_normalized(qt)
            kt = _l2_normalized(kt)
        io = kt.dtype
        wt = ct.reshape(ct.load(w_seq, (c, h, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
        gam = ct.reshape(ct.load(g_seq, (c, h), shape=(C, 1), padding_mode=_ZERO), (C,))
        dot = _rows(ct.load(do_seq, (c, h, vb), shape=(C, 1, BV), padding_mode=_ZERO), C, BV) * SCALE
        ct.store(dh_out, (base + c, h, vb, 0), ct.reshape(ct.astype(d_state, dh_out.dtype), (1, 1, BV, K)))

        last = ct.sum(ct.where(r == ct.minimum(rows, C) - 1, gam, 0.0))
        # rows and columns both real: a padded row's gamma reads 0, so its gap to a real
        # column is a growth that overflows under strong gates (inf * 0 = NaN in the products)
        live = causal & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
        gap = ct.expand_dims(gam, 1) - ct.expand_dims(gam, 0)
        scores = ct.mma(qt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
        scores = ct.where(live, scores * ct.exp(ct.where(live, gap, 0.0)), 0.0)
        tail = ct.where(valid, ct.exp(last - gam), 0.0)
        dv_new = _mm(ct.transpose(scores), dot, io) + ct.expand_dims(tail, 1) * _mm(
            kt, ct.transpose(d_state), io
        )
        ct.store(dvn_seq, (c, h, vb), ct.reshape(ct.astype(dv_new, dv_new_out.dtype), (C, 1, BV)))
        decayed_do = dot * ct.expand_dims(ct.where(valid, ct.exp(gam), 0.0), 1)
        # one accumulator chain (as the forward's state update): tileiras 13.4 rejects the sum of
        # separate products here for sm_80 ("invalid use-def chain in LoopSchedule")
        d_state = ct.mma(ct.transpose(ct.astype(-dv_new, io)), wt, d_state * ct.exp(last))
        d_state = ct.mma(ct.transpose(ct.astype(decayed_do, io)), qt, d_state)
    if HAS_H0 != 0:
        ct.store(dh0, (n, h, vb, 0), ct.reshape(ct.astype(d_state, dh0.dtype), (1, 1, BV, K)))


def _l2norm_backward(x, dy):
    """Gradient through y = x / max(|x|, 1e-12), rows of ``x`` [R, D] (raw) and ``dy`` fp32."""
    xf = ct.astype(x, ct.float32)
    norm = ct.sqrt(ct.sum(xf * xf, axis=1, keepdims=True))
    floored = ct.maximum(norm, 1e-12)
    y = xf / floored
    return ct.where(norm > 1e-12, (dy - y * ct.sum(dy * y, axis=1, keepdims=True)) / floored, dy / 1e-12)


@ct.kernel
def chunk_grad_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    v,  # [T, HV, V] io
    g,  # [T, HG] fp32
    beta,  # [T, HB] fp32 or io
    a_log,  # [HA] (read when SAFE_GATE)
    dt_bias,  # [HD] (read when SAFE_GATE and HAS_DT_BIAS)
    do,  # [T, HO, V] io
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    h,  # [slots, HO, V, K] io, from state_scan_kernel
    dh,  # [slots, HO, V, K] io, from grad_scan_kernel
    v_new,  # [T, HO, V] io
    dv_new,  # [T, HO, V] io
    dq_out,  # [T, HO, K] fp32: per output head, of the raw q
    dk_out,  # [T, HO, K] fp32
    dv_out,  # [T, HO, V] fp32
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
    K: ConstInt,
    V: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
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
    raw_g = ct.load(g.slice(0, bos, eos), (c, head // G_GROUP), shape=(C, 1), padding_mode=_ZERO)
    raw_g = ct.astype(ct.reshape(raw_g, (C,)), ct.float32)
    gate = raw_g
    biased = raw_g  # g + dt_bias: safe_gate's softplus argument
    rate = ct.zeros((), dtype=ct.float32)
    if SAFE_GATE != 0:
        rate = ct.exp(ct.astype(ct.load(a_log, (head // A_GROUP,), shape=()), ct.float32))
        if HAS_DT_BIAS != 0:
            biased = raw_g + ct.astype(ct.load(dt_bias, (head // D_GROUP,), shape=()), ct.float32)
        gate = ct.where(valid, -rate * _softplus(biased), 0.0)
    raw_b = ct.load(beta.slice(0, bos, eos), (c, head // B_GROUP), shape=(C, 1), padding_mode=_ZERO)
    raw_b = ct.astype(ct.reshape(raw_b, (C,)), ct.float32)
    wr = raw_b
    if BETA_SIGMOID != 0:
        wr = ct.where(valid, 1.0 / (1.0 + ct.exp(-raw_b)), 0.0)
    if NEG_EIGVAL != 0:
        wr = wr * 2.0
    gamma = ct.cumsum(gate, 0)

    hk = head // K_GROUP
    raw_q = ct.reshape(ct.load(q.slice(0, bos, eos), (c, hk, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
    raw_k = ct.reshape(ct.load(k.slice(0, bos, eos), (c, hk, 0), shape=(C, 1, K), padding_mode=_ZERO), (C, K))
    qt, kt = raw_q, raw_k
    if L2NORM != 0:
        qt = _l2_normalized(raw_q)
        kt = _l2_normalized(raw_k)
    io = kt.dtype
    kf, qf = ct.astype(kt, ct.float32), ct.astype(qt, ct.float32)

    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    causal = ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)
    gap = ct.expand_dims(gamma, 1) - ct.expand_dims(gamma, 0)
    att = ct.where(below, ct.exp(ct.where(below, gap, 0.0)), 0.0)
    decay_mask = ct.where(causal, ct.exp(ct.where(causal, gap, 0.0)), 0.0)
    gram = ct.mma(kt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
    a = gram * att * ct.expand_dims(wr, 1)
    t = _unit_lower_inverse(a)
    tr = ct.transpose(t)
    e = ct.exp(gamma)
    last = ct.sum(ct.where(r == C - 1, gamma, 0.0))  # the padding decays nothing: the last real token's
    tail = ct.where(valid, ct.exp(last - gamma), 0.0)
    kw = kf * ct.expand_dims(wr * e, 1)

    dq_inter = ct.zeros((C, K), dtype=ct.float32)
    dk_state = ct.zeros((C, K), dtype=ct.float32)
    dw = ct.zeros((C, K), dtype=ct.float32)
    dp = ct.zeros((C, C), dtype=ct.float32)
    dt = ct.zeros((C, C), dtype=ct.float32)
    d_write = ct.zeros((C,), dtype=ct.float32)
    d_last = ct.zeros((), dtype=ct.float32)
    do_seq, vn_seq, dvn_seq = do.slice(0, bos, eos), v_new.slice(0, bos, eos), dv_new.slice(0, bos, eos)
    v_seq, dv_seq = v.slice(0, bos, eos), dv_out.slice(0, bos, eos)
    hv = head // V_GROUP
    for vb in range(V // BV):
        dot = _rows(ct.load(do_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO), C, BV) * SCALE
        vn = _rows(ct.load(vn_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO), C, BV)
        dvn = _rows(ct.load(dvn_seq, (c, head, vb), shape=(C, 1, BV), padding_mode=_ZERO), C, BV)
        vt = _rows(ct.load(v_seq, (c, hv, vb), shape=(C, 1, BV), padding_mode=_ZERO), C, BV)
        hs = ct.reshape(ct.load(h, (slot, head, vb, 0), shape=(1, 1, BV, K)), (BV, K))
        dhs = ct.reshape(ct.load(dh, (slot, head, vb, 0), shape=(1, 1, BV, K)), (BV, K))
        # the sums over value blocks accumulate in the products' own accumulators (the loop runs
        # at least twice: `GdnCutileBwdConfig.grad_block_v` says why)
        dot_io, hs_io = ct.astype(dot, io), ct.astype(hs, io)
        dq_inter = ct.mma(dot_io, hs_io, dq_inter)
        dp = ct.mma(dot_io, ct.transpose(ct.astype(vn, io)), dp)
        dk_state = ct.mma(ct.astype(vn, io), ct.astype(dhs, io), dk_state)
        dw = ct.mma(ct.astype(-dvn, io), hs_io, dw)
        d_last = d_last + ct.sum(ct.astype(dhs, ct.float32) * ct.astype(hs, ct.float32))
        dvw = ct.mma(tr, dvn, ct.zeros((C, BV), dtype=ct.float32))
        ct.store(dv_seq, (c, head, vb), ct.reshape(dvw * ct.expand_dims(wr, 1), (C, 1, BV)))
        d_write = d_write + ct.sum(dvw * vt, axis=1)
        dt = ct.mma(dvn, ct.transpose(vt * ct.expand_dims(wr, 1)), dt)

    # the output: o = e (q h^T) + (q k^T * M) v_new
    dq = dq_inter * ct.expand_dims(e, 1)
    dgamma = ct.sum(qf * dq, axis=1)
    qk = ct.mma(qt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
    dp = dp * decay_mask
    dq = dq + _mm(dp, kt, io)
    dk = _mm(ct.transpose(dp), qt, io)
    dgamma = dgamma + ct.sum(dp * qk, axis=1) - ct.sum(dp * qk, axis=0)
    # the state passed on
    dks = dk_state * ct.expand_dims(tail, 1)
    dk = dk + dks
    dgamma = dgamma - ct.sum(kf * dks, axis=1)
    d_last = d_last * ct.exp(last) + ct.sum(kf * dks)
    # the WY solve (fp32)
    dkw = ct.mma(tr, dw, ct.zeros((C, K), dtype=ct.float32))
    dt = dt + ct.mma(dw, ct.transpose(kw), ct.zeros((C, C), dtype=ct.float32))
    zero_cc = ct.zeros((C, C), dtype=ct.float32)
    da = ct.where(below, -ct.mma(ct.mma(tr, dt, zero_cc), tr, zero_cc), 0.0)
    d_write = d_write + ct.sum(dkw * kf * ct.expand_dims(e, 1), axis=1) + ct.sum(da * gram * att, axis=1)
    dk = dk + dkw * ct.expand_dims(wr * e, 1)
    dgamma = dgamma + ct.sum(dkw * kw, axis=1)
    daa = da * a
    dgamma = dgamma + ct.sum(daa, axis=1) - ct.sum(daa, axis=0)
    dgram = da * att * ct.expand_dims(wr, 1)
    dk = dk + ct.mma(dgram + ct.transpose(dgram), kf, ct.zeros((C, K), dtype=ct.float32))
    dgamma = dgamma + ct.where(r == C - 1, d_last, 0.0)
    # gamma_r = g_0 + ... + g_r: the decay's gradient is dgamma's reverse cumulative sum
    d_decay = ct.sum(dgamma) - ct.cumsum(dgamma, 0) + dgamma

    # the options' chain rules
    if L2NORM != 0:
        dq = _l2norm_backward(raw_q, dq)
        dk = _l2norm_backward(raw_k, dk)
    if NEG_EIGVAL != 0:
        d_write = d_write * 2.0
    if BETA_SIGMOID != 0:
        s = 1.0 / (1.0 + ct.exp(-raw_b))
        d_write = d_write * s * (1.0 - s)
    d_raw_g = d_decay
    if SAFE_GATE != 0:
        d_raw_g = ct.where(valid, d_decay * -rate / (1.0 + ct.exp(-biased)), 0.0)
        ct.store(da_out.slice(0, bos, eos), (c, head), ct.reshape(d_decay * gate, (C, 1)))
    ct.store(dq_out.slice(0, bos, eos), (c, head, 0), ct.reshape(dq, (C, 1, K)))
    ct.store(dk_out.slice(0, bos, eos), (c, head, 0), ct.reshape(dk, (C, 1, K)))
    ct.store(dg_out.slice(0, bos, eos), (c, head), ct.reshape(d_raw_g, (C, 1)))
    ct.store(dbeta_out.slice(0, bos, eos), (c, head), ct.reshape(d_write, (C, 1)))


@ct.kernel
def group_sum_kernel(src, dst, GROUP, D: ConstInt, TB: ConstInt):
    """dst[t, j] = sum of src[t, j * GROUP + i] over i < GROUP: src [T, HO, D] fp32, dst [T, HO // GROUP, D]."""
    tb, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TB, 1, D), dtype=ct.float32)
    for i in range(GROUP):
        acc = acc + ct.load(src, (tb, j * GROUP + i, 0), shape=(TB, 1, D), padding_mode=_ZERO)
    ct.store(dst, (tb, j, 0), ct.astype(acc, dst.dtype))


@ct.kernel
def gate_sum_kernel(src, dst, GROUP, TB: ConstInt):
    """`group_sum_kernel` for [T, heads] gates: src [T, HO] fp32, dst [T, HO // GROUP]."""
    tb, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TB, 1), dtype=ct.float32)
    for i in range(GROUP):
        acc = acc + ct.load(src, (tb, j * GROUP + i), shape=(TB, 1), padding_mode=_ZERO)
    ct.store(dst, (tb, j), ct.astype(acc, dst.dtype))


@ct.kernel
def param_sum_kernel(src, dst, T, GROUP, TB: ConstInt):
    """dst[p] = sum over all tokens and the heads p serves of src: src [T, HO] fp32, dst [HO // GROUP]."""
    p = ct.bid(0)
    acc = ct.zeros((TB, 1), dtype=ct.float32)
    for step in range(ct.cdiv(T, TB)):
        for i in range(GROUP):
            acc = acc + ct.load(src, (step, p * GROUP + i), shape=(TB, 1), padding_mode=_ZERO)
    ct.store(dst, (p,), ct.reshape(ct.astype(ct.sum(acc), dst.dtype), (1,)))


# the kernels by the names the host side (`gdn_cutile_bwd_host`) launches them under
BWD_KERNELS = {
    "offsets": chunk_offsets_kernel,
    "states": state_scan_kernel,
    "grad_scan": grad_scan_kernel,
    "chunk_grad": chunk_grad_kernel,
    "group_sum": group_sum_kernel,
    "gate_sum": gate_sum_kernel,
    "param_sum": param_sum_kernel,
}


def export_signatures(
    cfg: Any, *, cu_seqlens: str = "int32", beta: str = "float32", state: str = "float32"
) -> dict:
    """One `KernelSignature` per launch of the backward for ``cfg`` (a `GdnCutileBwdConfig`), for
    ``cuda.tile.compilation.export_kernel``, as `gdn_cutile_fwd.export_signatures` describes them:
    the arrays as the engine passes them, runtime scalars int32, the host side's constants."""

    from cuda.tile.compilation import CallingConvention, KernelSignature

    from pygraph_linear_attention.kernels.gdn_cutile_bwd_host import _KERNEL_OF, backward_arguments
    from pygraph_linear_attention.kernels.gdn_cutile_fwd import KERNELS, _constants, _constraint, _Param

    io, f32 = cfg.io_dtype, "float32"
    params = {
        name: _Param(io, 3) for name in ("q", "k", "v", "dO", "dQ", "dK", "dV", "w", "u", "v_new", "dv_new")
    }
    params |= {name: _Param(f32, 3) for name in ("dq", "dk", "dv")}
    params |= {name: _Param(f32, 2) for name in ("g", "dG", "gamma", "dg", "dbeta", "da")}
    params |= {name: _Param(io, 4) for name in ("h", "dh")}
    params |= {
        "beta": _Param(beta, 2), "dBeta": _Param(beta, 2), "cu_seqlens": _Param(cu_seqlens, 1),
        "table": _Param("int32", 2), "offsets": _Param("int32", 1), "spare": _Param(f32, 1), "spare4": _Param(f32, 4),
    }  # fmt: skip
    if cfg.safe_gate:
        params |= {"a_log": _Param(f32, 1), "d_a_log": _Param(f32, 1)}
        if cfg.has_dt_bias:
            params |= {"dt_bias": _Param(f32, 1), "d_dt_bias": _Param(f32, 1)}
    if cfg.has_initial_state:
        params |= {"h0": _Param(state, 4), "dh0": _Param(state, 4)}
    if cfg.has_d_final_state:
        params["dht"] = _Param(state, 4)
    kernels = {**KERNELS, **BWD_KERNELS}

    convention = CallingConvention.cutile_python_v1()
    args = backward_arguments(cfg, params)
    return {
        name: (
            kernels[_KERNEL_OF[name]],
            KernelSignature(
                [_constraint(x, c) for x, c in zip(args[name], _constants(kernels[_KERNEL_OF[name]]))],
                convention,
            ),
        )
        for name in cfg.launches()
    }
