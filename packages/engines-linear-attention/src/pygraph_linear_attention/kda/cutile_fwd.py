"""The KDA and GDN-2 forward in cuTile: `common.chunked`'s steps with the decay per key channel.

The chunk table, the 64 x 64 unit lower-triangular inverse and the row helpers are the shared
blocks (`common.cutile_blocks`, GDN's too); what differs from GDN is every product that carries a
decay. gamma is [C, K] (the cumulative log decay per key channel), so the decay-weighted products
``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) y_j[c]`` are taken as matrix products by sub-chunks of
`SUB` rows (`common.chunked._attenuated_by_sub_chunks`): rows of sub-chunk i against keys up to its end as
``(x_i exp(gamma_i - ref_i)) (y exp(ref_i - gamma))^T``, ``ref_i`` sub-chunk i's first gamma, the
keys past sub-chunk i weighted 0. Across sub-chunks both factors are decays; inside one the key
side grows by at most ``exp(-(SUB - 1) min g)``, inside fp32 for gates of at least -5 (the safe
gate's bound).

1. `kda_prepare_kernel` (grid: chunk slots x output heads): the gates (the bounded safe gate
   ``lower_bound * sigmoid(exp(a_log) * (g + dt_bias))`` per channel, beta's sigmoid and 2x
   scaling), gamma, ``A`` (strictly lower, ``sum_c e_r[c] exp(gamma_r[c] - gamma_j[c]) k_j[c]``
   with the erase key ``e = beta * k``: beta one value per token (KDA) or per channel (GDN-2)),
   ``T = (I + A)^-1``, ``w = T (e exp(gamma))`` and ``u = T (beta v)`` (GDN-2: ``T (w_gate v)``).
   gamma (fp32 [T, HO, K]), w and u (the io dtype) go to the workspace.
2. `kda_scan_kernel` (grid: sequences x output heads x value blocks of BV): the state S [BV, K]
   chunk after chunk: ``v_new = u - w S^T``, ``o = scale ((q exp(gamma)) S^T + scores v_new)`` with
   the decay-weighted causal scores, then ``S = S exp(gamma_last) + v_new^T (k exp(gamma_last -
   gamma))`` over the chunk's real rows.
"""

from __future__ import annotations

import cuda.tile as ct

from pygraph_linear_attention.common.cutile_blocks import (
    SUB,
    TMA,
    chunk_offsets_kernel,
    chunk_table_kernel,
    l2_normalized,
    rows_at,
    unit_lower_inverse,
)
from pygraph_linear_attention.common.cutile_export import Param, signature

__all__ = ["KERNELS", "export_signatures", "kda_output_kernel", "kda_prepare_kernel", "kda_state_scan_kernel"]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]
_ZERO = ct.PaddingMode.ZERO


def _rows_of(x, i, K: ConstInt):
    """Sub-chunk ``i``'s rows [SUB, K] of a [C, K] tile, in fp32."""
    return ct.astype(ct.extract(x, (i, 0), (SUB, K)), ct.float32)


def _pair_block(left, y, gamma, ref, j, K: ConstInt):
    """Block (i, j) [SUB, SUB] of `_weighted_pairs`: ``left (y_j exp(ref - gamma_j))^T``, ``left``
    sub-chunk i's rows already scaled by ``exp(gamma_i - ref)``."""
    right = _rows_of(y, j, K) * ct.exp(ref - _rows_of(gamma, j, K))
    return ct.mma(left, ct.transpose(right), ct.zeros((SUB, SUB), dtype=ct.float32))


def _left(x, gamma, i, K: ConstInt):
    """(sub-chunk i's rows of x scaled by exp(gamma_i - ref) [SUB, K], ref = its first gamma [1, K])."""
    ref = ct.extract(gamma, (i * SUB, 0), (1, K))
    return _rows_of(x, i, K) * ct.exp(_rows_of(gamma, i, K) - ref), ref


def _weighted_pairs(x, y, gamma, mask, C: ConstInt, K: ConstInt):
    """[C, C]: ``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) y_j[c]`` where ``mask`` holds, else 0;
    x, y [C, K] (any float dtype: taken to fp32 a sub-chunk at a time), gamma [C, K] fp32
    non-increasing down the rows, C = 4 SUB (module docstring).
    Block (i, j) of SUB x SUB for j <= i, the blocks above the diagonal 0: each a [SUB, K] product,
    so no [C, K] factor is live beside the operands."""
    zero = ct.zeros((SUB, SUB), dtype=ct.float32)
    l0, r0 = _left(x, gamma, 0, K)
    row0 = ct.cat((ct.cat((_pair_block(l0, y, gamma, r0, 0, K), zero), 1), ct.cat((zero, zero), 1)), 1)
    l1, r1 = _left(x, gamma, 1, K)
    b10, b11 = _pair_block(l1, y, gamma, r1, 0, K), _pair_block(l1, y, gamma, r1, 1, K)
    row1 = ct.cat((ct.cat((b10, b11), 1), ct.cat((zero, zero), 1)), 1)
    l2, r2 = _left(x, gamma, 2, K)
    b20, b21 = _pair_block(l2, y, gamma, r2, 0, K), _pair_block(l2, y, gamma, r2, 1, K)
    row2 = ct.cat((ct.cat((b20, b21), 1), ct.cat((_pair_block(l2, y, gamma, r2, 2, K), zero), 1)), 1)
    l3, r3 = _left(x, gamma, 3, K)
    b30, b31 = _pair_block(l3, y, gamma, r3, 0, K), _pair_block(l3, y, gamma, r3, 1, K)
    b32, b33 = _pair_block(l3, y, gamma, r3, 2, K), _pair_block(l3, y, gamma, r3, 3, K)
    row3 = ct.cat((ct.cat((b30, b31), 1), ct.cat((b32, b33), 1)), 1)
    return ct.where(mask, ct.cat((ct.cat((row0, row1), 0), ct.cat((row2, row3), 0)), 0), 0.0)


def sequence_bounds(cu_seqlens, n):
    """Sequence ``n``'s first token and the token past its last (int32)."""
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    return bos, eos


def block_rows(view, c, h, kb, C: ConstInt, BK: ConstInt):
    """Block ``kb`` [C, BK] fp32 of chunk ``c``'s rows of a [T, heads, D] view at head ``h`` (0 past
    the view's end)."""
    x = ct.load(view, (c, h, kb), shape=(C, 1, BK), padding_mode=_ZERO, allow_tma=TMA)
    return ct.astype(ct.reshape(x, (C, BK)), ct.float32)


def gate_block(g_seq, a_log, dt_bias, c, kb, valid, gh, ah, dh, SAFE_GATE, HAS_A_LOG, HAS_DT_BIAS,
                LOWER_BOUND: ConstFloat, C: ConstInt, BK: ConstInt):  # fmt: skip
    """(the gate [C, BK] of key block ``kb``, 0 past the sequence's end; under the safe gate its
    logit z = exp(a_log) (g + dt_bias) and rate exp(a_log), for the chain rule; else the gate twice
    and 1). ``gh``, ``ah``, ``dh``: the heads of g, a_log and dt_bias the output head reads."""
    gate = block_rows(g_seq, c, gh, kb, C, BK)
    z, rate = gate, ct.zeros((1, 1), dtype=ct.float32) + 1.0
    if SAFE_GATE != 0:
        if HAS_DT_BIAS != 0:
            z = z + ct.astype(ct.load(dt_bias, (dh, kb), shape=(1, BK), allow_tma=TMA), ct.float32)
        if HAS_A_LOG != 0:
            rate = rate * ct.exp(ct.astype(ct.load(a_log, (ah,), shape=()), ct.float32))
        z = z * rate
        gate = ct.where(valid, LOWER_BOUND / (1.0 + ct.exp(-z)), 0.0)
    return gate, z, rate


def write_rows(beta_seq, c, bh, kb, valid, BETA_PER_CHANNEL: ConstInt, BETA_SIGMOID, NEG_EIGVAL, C: ConstInt,
                BK: ConstInt):  # fmt: skip
    """(beta after the options: [C, 1] per token, or [C, BK] key block ``kb`` for GDN-2; the raw beta)."""
    if BETA_PER_CHANNEL != 0:
        raw = block_rows(beta_seq, c, bh, kb, C, BK)
    else:
        raw = ct.astype(
            ct.load(beta_seq, (c, bh), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA), ct.float32
        )
    wr = raw
    if BETA_SIGMOID != 0:
        wr = ct.where(valid, 1.0 / (1.0 + ct.exp(-raw)), 0.0)
    if NEG_EIGVAL != 0:
        wr = wr * 2.0
    return wr, raw


def inverse_norms(x_seq, c, head, L2NORM, BLOCKS: ConstInt, BK: ConstInt, C: ConstInt):
    """1 / max(|row|, 1e-12) [C, 1] fp32 of chunk ``c``'s rows at ``head`` over its key blocks (the
    norm `l2_normalized` divides a whole row by); 1 without L2NORM."""
    inv = ct.zeros((C, 1), dtype=ct.float32) + 1.0
    if L2NORM != 0:
        squares = ct.zeros((C, 1), dtype=ct.float32)
        for b in range(BLOCKS):
            x = block_rows(x_seq, c, head, b, C, BK)
            squares = squares + ct.sum(x * x, axis=1, keepdims=True)
        inv = 1.0 / ct.maximum(ct.sqrt(squares), 1e-12)
    return inv


def gamma_block(g_seq, c, h, kb, r, rows, C: ConstInt, BK: ConstInt):
    """(gamma [C, BK] of chunk ``c``, head ``h``, key block ``kb``, its rows past the sequence's end
    reading the last real row's, so that every exp of a gap stays a decay or a bounded growth; that
    last row [1, BK]). ``rows``: the chunk's real rows (more than C for all but a sequence's last
    chunk); ``kb`` 0 and BK = K: the whole key dim."""
    gam = block_rows(g_seq, c, h, kb, C, BK)
    last = ct.sum(ct.where(ct.expand_dims(r == ct.minimum(rows, C) - 1, 1), gam, 0.0), axis=0, keepdims=True)
    return ct.where(ct.expand_dims(r < rows, 1), gam, last), last


def chunk_at(table, cu_seqlens, slot, C: ConstInt):
    """(sequence n, its chunk c, the sequence's bounds bos and eos, the chunk's real rows) of a chunk
    slot of the table; n < 0 marks a slot past the last chunk (its bounds then read sequence 0's)."""
    n = ct.load(table, (slot, 0), shape=())
    c = ct.load(table, (slot, 1), shape=())
    bos, eos = sequence_bounds(cu_seqlens, ct.maximum(n, 0))
    return n, c, bos, eos, eos - bos - c * C


@ct.kernel
def kda_prepare_kernel(
    k,  # [T, H, K] io
    v,  # [T, HV, V] io
    g,  # [T, HG, K] fp32: log decay per channel, or safe_gate logits
    beta,  # [T, HB] (KDA) or [T, HB, K] (GDN-2), fp32 or io
    w_gate,  # [T, HW, V] io: GDN-2's write gate (read when HAS_W)
    a_log,  # [HA] (read when SAFE_GATE and HAS_A_LOG)
    dt_bias,  # [HD, K] (read when SAFE_GATE and HAS_DT_BIAS)
    cu_seqlens,  # [N + 1] int32 or int64
    table,  # [slots, 2] int32, from common.cutile_blocks.chunk_table_kernel
    gamma_out,  # [T, HO, K] fp32
    w_out,  # [T, HO, K] io
    u_out,  # [T, HO, V] io
    t_out,  # [slots, HO, C, C] fp32: T, for the backward (written when STORE_T)
    q,  # [T, H, K] io (read when STORE_T)
    qd_out,  # [T, HO, K] io: q exp(gamma), for the backward's gradient scan (written when STORE_T)
    kd_out,  # [T, HO, K] io: k exp(last - gamma) (written when STORE_T)
    p_out,  # [T, HO, C] io: the decay-weighted causal scores P (written when STORE_T)
    K_GROUP,  # output heads per k head (HO // H)
    V_GROUP,  # HO // HV
    G_GROUP,  # HO // HG
    B_GROUP,  # HO // HB
    W_GROUP,  # HO // HW
    A_GROUP,  # HO // HA
    D_GROUP,  # HO // HD
    L2NORM,  # the options, 0 or 1 (runtime)
    BETA_SIGMOID,
    NEG_EIGVAL,
    SAFE_GATE,
    HAS_A_LOG,
    HAS_DT_BIAS,
    HAS_W: ConstInt,  # GDN-2's write gate; constant, as its absent operand's stand-in has another rank
    LOWER_BOUND: ConstFloat,  # the safe gate's bound (negative)
    BETA_PER_CHANNEL: ConstInt,  # 1: GDN-2's beta [T, HB, K]
    STORE_T: ConstInt,  # 1: the backward's launch: T, and the gradient scan's decayed operands
    K: ConstInt,
    V: ConstInt,
    BK: ConstInt,  # key channels per step (each channel's decay is its own: the products split by key blocks)
    BV: ConstInt,
    C: ConstInt,
):
    slot, h = ct.bid(0), ct.bid(1)
    n, c, bos, eos, rows = chunk_at(table, cu_seqlens, slot, C)
    if n < 0:
        return
    r = ct.arange(C, dtype=ct.int32)
    valid = ct.expand_dims(r < rows, 1)  # [C, 1]
    g_seq, beta_seq, k_seq = g.slice(0, bos, eos), beta.slice(0, bos, eos), k.slice(0, bos, eos)
    hk, gh, bh, ah, dh = h // K_GROUP, h // G_GROUP, h // B_GROUP, h // A_GROUP, h // D_GROUP
    inv_k = inverse_norms(k_seq, c, hk, L2NORM, K // BK, BK, C)
    io = k.dtype

    # A = tril(sum over channels of e_r exp(gamma_r - gamma_j) k_j, -1), e = beta k: key block by block
    # (with STORE_T, the scores P the same way, and the decayed q and k: the gradient scan then takes
    # plain products; computed inside its sequential loop they spilled 3.5 KB per thread at K = 128)
    a = ct.zeros((C, C), dtype=ct.float32)
    scores = ct.zeros((C, C), dtype=ct.float32)
    inv_q = inv_k
    if STORE_T != 0:
        inv_q = inverse_norms(q.slice(0, bos, eos), c, hk, L2NORM, K // BK, BK, C)
    for kb in range(K // BK):
        gate, _, _ = gate_block(g_seq, a_log, dt_bias, c, kb, valid, gh, ah, dh, SAFE_GATE, HAS_A_LOG,
                                 HAS_DT_BIAS, LOWER_BOUND, C, BK)  # fmt: skip
        gamma = ct.cumsum(gate, 0)  # [C, BK]; past the end the gate reads 0: the last real row's
        ct.store(gamma_out.slice(0, bos, eos), (c, h, kb), ct.reshape(gamma, (C, 1, BK)), allow_tma=TMA)
        wr, _ = write_rows(beta_seq, c, bh, kb, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
        kf = block_rows(k_seq, c, hk, kb, C, BK) * inv_k
        a = a + _weighted_pairs(kf * wr, kf, gamma, ct.expand_dims(r, 1) >= 0, C, BK)
        if STORE_T != 0:
            qf = block_rows(q.slice(0, bos, eos), c, hk, kb, C, BK) * inv_q
            scores = scores + _weighted_pairs(qf, kf, gamma, ct.expand_dims(r, 1) >= 0, C, BK)
            last = ct.extract(gamma, (C - 1, 0), (1, BK))  # past the end the gate is 0: the last real row
            qd = ct.reshape(ct.astype(qf * ct.exp(gamma), io), (C, 1, BK))
            ct.store(qd_out.slice(0, bos, eos), (c, h, kb), qd, allow_tma=TMA)
            kd = ct.reshape(ct.astype(kf * ct.exp(last - gamma), io), (C, 1, BK))
            ct.store(kd_out.slice(0, bos, eos), (c, h, kb), kd, allow_tma=TMA)
    if STORE_T != 0:
        live = (ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)) & valid & ct.expand_dims(r < rows, 0)
        p = ct.reshape(ct.astype(ct.where(live, scores, 0.0), io), (C, 1, C))
        ct.store(p_out.slice(0, bos, eos), (c, h, 0), p, allow_tma=TMA)
    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    inverse = unit_lower_inverse(ct.where(below, a, 0.0))
    if STORE_T != 0:
        ct.store(t_out, (slot, h, 0, 0), ct.reshape(inverse, (1, 1, C, C)), allow_tma=TMA)
    t = ct.astype(inverse, io)

    # w = T (e exp(gamma)), key block by block (gamma recomputed: cheaper than a round trip)
    for kb in range(K // BK):
        gate, _, _ = gate_block(g_seq, a_log, dt_bias, c, kb, valid, gh, ah, dh, SAFE_GATE, HAS_A_LOG,
                                 HAS_DT_BIAS, LOWER_BOUND, C, BK)  # fmt: skip
        wr, _ = write_rows(beta_seq, c, bh, kb, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
        kf = block_rows(k_seq, c, hk, kb, C, BK) * inv_k
        w = ct.mma(
            t, ct.astype(kf * wr * ct.exp(ct.cumsum(gate, 0)), io), ct.zeros((C, BK), dtype=ct.float32)
        )
        ct.store(w_out.slice(0, bos, eos), (c, h, kb), ct.reshape(ct.astype(w, w_out.dtype), (C, 1, BK)),
                 allow_tma=TMA)  # fmt: skip
    # u = T (beta v) (GDN-2: T (w_gate v)), value block by value block
    v_seq = v.slice(0, bos, eos)
    wr, _ = write_rows(beta_seq, c, bh, 0, valid, BETA_PER_CHANNEL, BETA_SIGMOID, NEG_EIGVAL, C, BK)
    for vb in range(V // BV):
        vt = block_rows(v_seq, c, h // V_GROUP, vb, C, BV)
        if HAS_W != 0:
            vt = vt * block_rows(w_gate.slice(0, bos, eos), c, h // W_GROUP, vb, C, BV)
        else:
            vt = vt * wr  # KDA: beta [C, 1] scales the value
        u = ct.mma(t, ct.astype(vt, io), ct.zeros((C, BV), dtype=ct.float32))
        ct.store(u_out.slice(0, bos, eos), (c, h, vb), ct.reshape(ct.astype(u, u_out.dtype), (C, 1, BV)),
                 allow_tma=TMA)  # fmt: skip


@ct.kernel
def kda_state_scan_kernel(
    k,  # [T, H, K] io
    w,  # [T, HO, K] io, from kda_prepare_kernel
    u,  # [T, HO, V] io
    gamma,  # [T, HO, K] fp32
    cu_seqlens,  # [N + 1]
    offsets,  # [N] int32, from chunk_offsets_kernel
    h0,  # [N, HO, V, K] (read when HAS_H0)
    h_out,  # [slots, HO, V, K] io: the state entering each chunk
    v_new_out,  # [T, HO, V] io
    ht,  # [N, HO, V, K] out (written when STORE_HT)
    K_GROUP,
    L2NORM,
    HAS_H0,
    STORE_HT,
    K: ConstInt,
    BV: ConstInt,
    C: ConstInt,
):
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos, eos = sequence_bounds(cu_seqlens, n)
    base = ct.load(offsets, (n,), shape=())
    length = eos - bos
    state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_H0 != 0:
        state = ct.astype(
            ct.reshape(ct.load(h0, (n, h, vb, 0), shape=(1, 1, BV, K), allow_tma=TMA), (BV, K)), ct.float32
        )
    r = ct.arange(C, dtype=ct.int32)
    hk = h // K_GROUP
    for c in range(ct.cdiv(length, C)):
        # sliced inside the loop: an empty last sequence (bos == T) must not slice
        k_seq, w_seq, u_seq = k.slice(0, bos, eos), w.slice(0, bos, eos), u.slice(0, bos, eos)
        g_seq, vn_seq = gamma.slice(0, bos, eos), v_new_out.slice(0, bos, eos)
        rows = length - c * C
        kt = rows_at(k_seq, (c, hk, 0), C, K)
        if L2NORM != 0:
            kt = l2_normalized(kt)
        wt = rows_at(w_seq, (c, h, 0), C, K)
        ut = rows_at(u_seq, (c, h, vb), C, BV)
        gam, last = gamma_block(g_seq, c, h, 0, r, rows, C, K)
        ct.store(
            h_out,
            (base + c, h, vb, 0),
            ct.reshape(ct.astype(state, h_out.dtype), (1, 1, BV, K)),
            allow_tma=TMA,
        )
        state_t = ct.transpose(ct.astype(state, kt.dtype))
        v_new = ct.astype(ut, ct.float32) - ct.mma(wt, state_t, ct.zeros((C, BV), dtype=ct.float32))
        ct.store(vn_seq, (c, h, vb), ct.reshape(ct.astype(v_new, v_new_out.dtype), (C, 1, BV)), allow_tma=TMA)
        # the state leaving the chunk: its columns decay by exp(last), the chunk's writes land
        # along their keys, each decayed from its row to the last real one (padded rows: k is 0)
        keys = ct.astype(kt, ct.float32) * ct.exp(last - gam)
        state = ct.mma(
            ct.transpose(ct.astype(v_new, kt.dtype)), ct.astype(keys, kt.dtype), state * ct.exp(last)
        )
    if STORE_HT != 0:
        ct.store(ht, (n, h, vb, 0), ct.reshape(ct.astype(state, ht.dtype), (1, 1, BV, K)), allow_tma=TMA)


@ct.kernel
def kda_output_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    gamma,  # [T, HO, K] fp32, from kda_prepare_kernel
    cu_seqlens,  # [N + 1]
    table,  # [slots, 2] int32
    h,  # [slots, HO, V, K] io: the state entering each chunk, from kda_state_scan_kernel
    v_new,  # [T, HO, V] io
    o,  # [T, HO, V] out
    K_GROUP,
    L2NORM,
    K: ConstInt,
    BK: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    slot, head, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    n, c, bos, eos, rows = chunk_at(table, cu_seqlens, slot, C)
    if n < 0:
        return
    r = ct.arange(C, dtype=ct.int32)
    valid = r < rows
    hk = head // K_GROUP
    q_seq, k_seq, g_seq = q.slice(0, bos, eos), k.slice(0, bos, eos), gamma.slice(0, bos, eos)
    inv_q = inverse_norms(q_seq, c, hk, L2NORM, K // BK, BK, C)
    inv_k = inverse_norms(k_seq, c, hk, L2NORM, K // BK, BK, C)
    io = q.dtype
    # o = scale ((q exp(gamma)) h^T + P v_new): P and the state's term summed over key blocks (each
    # channel's decay is its own; a whole [C, K] of fp32 factors spilled 3.2 KB per thread at K 128)
    scores = ct.zeros((C, C), dtype=ct.float32)
    inter = ct.zeros((C, BV), dtype=ct.float32)
    for kb in range(K // BK):
        qf = block_rows(q_seq, c, hk, kb, C, BK) * inv_q
        kf = block_rows(k_seq, c, hk, kb, C, BK) * inv_k
        gam, _ = gamma_block(g_seq, c, head, kb, r, rows, C, BK)
        scores = scores + _weighted_pairs(qf, kf, gam, ct.expand_dims(r, 1) >= 0, C, BK)
        hs = ct.reshape(ct.load(h, (slot, head, vb, kb), shape=(1, 1, BV, BK), allow_tma=TMA), (BV, BK))
        inter = ct.mma(ct.astype(qf * ct.exp(gam), io), ct.transpose(hs), inter)
    live = (
        (ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)) & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
    )
    vn = rows_at(v_new.slice(0, bos, eos), (c, head, vb), C, BV)
    out = ct.mma(ct.astype(ct.where(live, scores, 0.0), io), vn, inter) * SCALE
    ct.store(
        o.slice(0, bos, eos), (c, head, vb), ct.reshape(ct.astype(out, o.dtype), (C, 1, BV)), allow_tma=TMA
    )


# the launches of `kda.cutile_host.launch_forward`, by name
KERNELS = {
    "table": chunk_table_kernel,
    "offsets": chunk_offsets_kernel,
    "prepare": kda_prepare_kernel,
    "states": kda_state_scan_kernel,
    "output": kda_output_kernel,
}


def export_signatures(cfg, *, beta: str = "float32", state: str = "float32") -> dict:
    """One `KernelSignature` per kernel for ``cfg`` (a `KdaCutileConfig`), for
    ``cuda.tile.compilation.export_kernel`` (compiling for a named target without a GPU), with the
    arguments `kda.cutile_host.kernel_arguments` passes (as `gdn.cutile_fwd.export_signatures`)."""
    from pygraph_linear_attention.kda.cutile_host import kernel_arguments

    io, gdn2 = cfg.io_dtype, cfg.op == "gdn2"
    params = {
        "q": Param(io, 3), "k": Param(io, 3), "v": Param(io, 3), "g": Param("float32", 3),
        "beta": Param(beta, 3 if gdn2 else 2), "cu_seqlens": Param("int32", 1), "o": Param(io, 3),
        "table": Param("int32", 2), "gamma": Param("float32", 3), "w": Param(io, 3), "u": Param(io, 3),
        "spare": Param("float32", 1), "spare2": Param("float32", 2), "spare4": Param("float32", 4),
        "offsets": Param("int32", 1), "h": Param(io, 4), "v_new": Param(io, 3),
    }  # fmt: skip
    if gdn2:
        params["w_gate"] = Param(io, 3)
    if cfg.has_a_log:
        params["a_log"] = Param("float32", 1)
    if cfg.has_dt_bias:
        params["dt_bias"] = Param("float32", 2)
    if cfg.has_initial_state:
        params["h0"] = Param(state, 4)
    if cfg.output_final_state:
        params["ht"] = Param(state, 4)
    return {name: signature(KERNELS[name], args) for name, args in kernel_arguments(cfg, params).items()}
