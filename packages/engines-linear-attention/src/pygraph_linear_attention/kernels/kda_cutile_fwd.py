"""The KDA and GDN-2 forward in cuTile: `chunked.py`'s steps with the decay per key channel.

The chunk table, the 64 x 64 unit lower-triangular inverse and the row helpers are
`gdn_cutile_fwd`'s (imported, not copied); what differs from GDN is every product that carries a
decay. gamma is [C, K] (the cumulative log decay per key channel), so the decay-weighted products
``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) y_j[c]`` are taken as matrix products by sub-chunks of
`SUB` rows (`chunked._attenuated_by_sub_chunks`): rows of sub-chunk i against keys up to its end as
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

from pygraph_linear_attention.kernels.gdn_cutile_fwd import (
    _ZERO,
    SUB,
    TMA,
    _constants,
    _constraint,
    _l2_normalized,
    _Param,
    _rows_at,
    _unit_lower_inverse,
    chunk_table_kernel,
)

__all__ = ["KERNELS", "export_signatures", "kda_prepare_kernel", "kda_scan_kernel"]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]


def _sub_chunk_pairs(x, y, gamma, keys, i, C: ConstInt, K: ConstInt):
    """Rows ``i * SUB ..`` of `_weighted_pairs` ([SUB, C], unmasked): ``(x_i exp(gamma_i - ref))
    (y exp(ref - gamma))^T`` with ``ref`` the sub-chunk's first gamma, keys past it weighted 0."""
    ref = ct.extract(gamma, (i * SUB, 0), (1, K))  # [1, K]
    left = ct.extract(x, (i, 0), (SUB, K)) * ct.exp(ct.extract(gamma, (i, 0), (SUB, K)) - ref)
    # keys past the sub-chunk (masked anyway) weighted 0 before the exp: their gap is a growth
    seen = keys < (i + 1) * SUB
    right = ct.where(seen, y * ct.exp(ct.where(seen, ref - gamma, 0.0)), 0.0)
    return ct.mma(left, ct.transpose(right), ct.zeros((SUB, C), dtype=ct.float32))


def _weighted_pairs(x, y, gamma, mask, C: ConstInt, K: ConstInt):
    """[C, C]: ``sum_c x_r[c] exp(gamma_r[c] - gamma_j[c]) y_j[c]`` where ``mask`` holds, else 0;
    x, y [C, K] fp32, gamma [C, K] fp32 non-increasing down the rows, C = 4 SUB (module docstring)."""
    keys = ct.expand_dims(ct.arange(C, dtype=ct.int32), 1)  # [C, 1]
    top = ct.cat(
        (_sub_chunk_pairs(x, y, gamma, keys, 0, C, K), _sub_chunk_pairs(x, y, gamma, keys, 1, C, K)), 0
    )
    bottom = ct.cat(
        (_sub_chunk_pairs(x, y, gamma, keys, 2, C, K), _sub_chunk_pairs(x, y, gamma, keys, 3, C, K)), 0
    )
    return ct.where(mask, ct.cat((top, bottom), 0), 0.0)


def _channel_rows(view, c, h, C: ConstInt, D: ConstInt):
    """A gate's [C, D] fp32 rows of chunk ``c``, head ``h`` (0 past the view's end)."""
    return ct.astype(_rows_at(view, (c, h, 0), C, D), ct.float32)


def _chunk_gamma(g_seq, c, h, r, rows, C: ConstInt, K: ConstInt):
    """(gamma [C, K] of chunk ``c``, head ``h``, its rows past the sequence's end reading the last
    real row's, so that every exp of a gap stays a decay or a bounded growth; that last row [1, K]).
    ``rows``: the chunk's real rows (more than C for all but a sequence's last chunk)."""
    last_row = ct.expand_dims(r == ct.minimum(rows, C) - 1, 1)
    gam = _channel_rows(g_seq, c, h, C, K)
    last = ct.sum(ct.where(last_row, gam, 0.0), axis=0, keepdims=True)  # [1, K]
    return ct.where(ct.expand_dims(r < rows, 1), gam, last), last


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
    table,  # [slots, 2] int32, from gdn_cutile_fwd.chunk_table_kernel
    gamma_out,  # [T, HO, K] fp32
    w_out,  # [T, HO, K] io
    u_out,  # [T, HO, V] io
    t_out,  # [slots, HO, C, C] fp32: T, for the backward (written when STORE_T)
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
    STORE_T: ConstInt,  # 1: the backward's launch, which reads T again
    K: ConstInt,
    V: ConstInt,
    C: ConstInt,
):
    h = ct.bid(1)
    n = ct.load(table, (ct.bid(0), 0), shape=())
    if n < 0:
        return
    c = ct.load(table, (ct.bid(0), 1), shape=())
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    r = ct.arange(C, dtype=ct.int32)
    valid = ct.expand_dims(r < (eos - bos - c * C), 1)  # [C, 1]

    gate = _channel_rows(g.slice(0, bos, eos), c, h // G_GROUP, C, K)  # [C, K]
    if SAFE_GATE != 0:
        if HAS_DT_BIAS != 0:
            bias = ct.load(dt_bias, (h // D_GROUP, 0), shape=(1, K))
            gate = gate + ct.astype(bias, ct.float32)
        if HAS_A_LOG != 0:
            gate = gate * ct.exp(ct.astype(ct.load(a_log, (h // A_GROUP,), shape=()), ct.float32))
        gate = ct.where(valid, LOWER_BOUND / (1.0 + ct.exp(-gate)), 0.0)
    beta_seq = beta.slice(0, bos, eos)
    if BETA_PER_CHANNEL != 0:
        wr = _channel_rows(beta_seq, c, h // B_GROUP, C, K)  # [C, K]
    else:
        wr = ct.load(beta_seq, (c, h // B_GROUP), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA)
        wr = ct.astype(wr, ct.float32)  # [C, 1]
    if BETA_SIGMOID != 0:
        wr = ct.where(valid, 1.0 / (1.0 + ct.exp(-wr)), 0.0)
    if NEG_EIGVAL != 0:
        wr = wr * 2.0
    gamma = ct.cumsum(gate, 0)  # [C, K]

    kt = _rows_at(k.slice(0, bos, eos), (c, h // K_GROUP, 0), C, K)
    if L2NORM != 0:
        kt = _l2_normalized(kt)
    kf = ct.astype(kt, ct.float32)
    erase = kf * wr  # the erase read's key, beta per token or per channel
    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    a = _weighted_pairs(erase, kf, gamma, below, C, K)
    inverse = _unit_lower_inverse(a)
    if STORE_T != 0:
        ct.store(t_out, (ct.bid(0), h, 0, 0), ct.reshape(inverse, (1, 1, C, C)), allow_tma=TMA)
    t = ct.astype(inverse, kt.dtype)

    w = ct.mma(t, ct.astype(erase * ct.exp(gamma), kt.dtype), ct.zeros((C, K), dtype=ct.float32))
    ct.store(
        w_out.slice(0, bos, eos), (c, h, 0), ct.reshape(ct.astype(w, w_out.dtype), (C, 1, K)), allow_tma=TMA
    )
    vt = ct.astype(_rows_at(v.slice(0, bos, eos), (c, h // V_GROUP, 0), C, V), ct.float32)
    if HAS_W != 0:
        vt = vt * _channel_rows(w_gate.slice(0, bos, eos), c, h // W_GROUP, C, V)
    else:
        vt = vt * wr  # KDA: beta [C, 1] scales the value
    u = ct.mma(t, ct.astype(vt, kt.dtype), ct.zeros((C, V), dtype=ct.float32))
    ct.store(
        u_out.slice(0, bos, eos), (c, h, 0), ct.reshape(ct.astype(u, u_out.dtype), (C, 1, V)), allow_tma=TMA
    )
    ct.store(gamma_out.slice(0, bos, eos), (c, h, 0), ct.reshape(gamma, (C, 1, K)), allow_tma=TMA)


@ct.kernel
def kda_scan_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    w,  # [T, HO, K] io, from kda_prepare_kernel
    u,  # [T, HO, V] io
    gamma,  # [T, HO, K] fp32
    cu_seqlens,  # [N + 1]
    h0,  # [N, HO, V, K] fp32 or bf16 (read when HAS_H0)
    o,  # [T, HO, V] out
    ht,  # [N, HO, V, K] out (written when STORE_HT)
    K_GROUP,  # output heads per q/k head
    L2NORM,  # 0 or 1 (runtime)
    HAS_H0,
    STORE_HT,
    K: ConstInt,
    BV: ConstInt,
    C: ConstInt,
    SCALE: ConstFloat,
):
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos = ct.astype(ct.load(cu_seqlens, (n,), shape=()), ct.int32)
    eos = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32)
    length = eos - bos
    state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_H0 != 0:
        state = ct.astype(ct.reshape(ct.load(h0, (n, h, vb, 0), shape=(1, 1, BV, K)), (BV, K)), ct.float32)
    r = ct.arange(C, dtype=ct.int32)
    causal = ct.expand_dims(r, 1) >= ct.expand_dims(r, 0)
    hk = h // K_GROUP
    for c in range(ct.cdiv(length, C)):
        # sliced inside the loop: an empty last sequence (bos == T) must not slice
        q_seq, k_seq, o_seq = q.slice(0, bos, eos), k.slice(0, bos, eos), o.slice(0, bos, eos)
        w_seq, u_seq, g_seq = w.slice(0, bos, eos), u.slice(0, bos, eos), gamma.slice(0, bos, eos)
        rows = length - c * C
        valid = r < rows
        qt = _rows_at(q_seq, (c, hk, 0), C, K)
        kt = _rows_at(k_seq, (c, hk, 0), C, K)
        if L2NORM != 0:
            qt = _l2_normalized(qt)
            kt = _l2_normalized(kt)
        wt = _rows_at(w_seq, (c, h, 0), C, K)
        ut = _rows_at(u_seq, (c, h, vb), C, BV)
        gam, last = _chunk_gamma(g_seq, c, h, r, rows, C, K)
        state_t = ct.transpose(ct.astype(state, kt.dtype))  # [K, BV]
        v_new = ct.astype(ut, ct.float32) - ct.mma(wt, state_t, ct.zeros((C, BV), dtype=ct.float32))

        live = causal & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
        qf, kf = ct.astype(qt, ct.float32), ct.astype(kt, ct.float32)
        scores = _weighted_pairs(qf, kf, gam, live, C, K)
        q_decayed = ct.astype(qf * ct.exp(gam), kt.dtype)
        inter = ct.mma(q_decayed, state_t, ct.zeros((C, BV), dtype=ct.float32))
        out = ct.mma(ct.astype(scores, kt.dtype), ct.astype(v_new, kt.dtype), inter) * SCALE
        ct.store(o_seq, (c, h, vb), ct.reshape(ct.astype(out, o.dtype), (C, 1, BV)), allow_tma=TMA)

        # the state leaving the chunk: its columns decay by exp(last), the chunk's writes land
        # along their keys, each decayed from its row to the last real one (padded rows: k is 0)
        keys = kf * ct.exp(last - gam)
        state = ct.mma(
            ct.transpose(ct.astype(v_new, kt.dtype)), ct.astype(keys, kt.dtype), state * ct.exp(last)
        )
    if STORE_HT != 0:
        ct.store(ht, (n, h, vb, 0), ct.reshape(ct.astype(state, ht.dtype), (1, 1, BV, K)), allow_tma=TMA)


# the launches of `kda_cutile_host.launch_forward`, by name
KERNELS = {"table": chunk_table_kernel, "prepare": kda_prepare_kernel, "scan": kda_scan_kernel}


def export_signatures(cfg, *, beta: str = "float32", state: str = "float32") -> dict:
    """One `KernelSignature` per kernel for ``cfg`` (a `KdaCutileConfig`), for
    ``cuda.tile.compilation.export_kernel`` (compiling for a named target without a GPU), with the
    arguments `kda_cutile_host.kernel_arguments` passes (as `gdn_cutile_fwd.export_signatures`)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature

    from pygraph_linear_attention.kernels.kda_cutile_host import kernel_arguments

    io, gdn2 = cfg.io_dtype, cfg.op == "gdn2"
    params = {
        "q": _Param(io, 3), "k": _Param(io, 3), "v": _Param(io, 3), "g": _Param("float32", 3),
        "beta": _Param(beta, 3 if gdn2 else 2), "cu_seqlens": _Param("int32", 1), "o": _Param(io, 3),
        "table": _Param("int32", 2), "gamma": _Param("float32", 3), "w": _Param(io, 3), "u": _Param(io, 3),
        "spare": _Param("float32", 1), "spare2": _Param("float32", 2), "spare4": _Param("float32", 4),
    }  # fmt: skip
    if gdn2:
        params["w_gate"] = _Param(io, 3)
    if cfg.has_a_log:
        params["a_log"] = _Param("float32", 1)
    if cfg.has_dt_bias:
        params["dt_bias"] = _Param("float32", 2)
    if cfg.has_initial_state:
        params["h0"] = _Param(state, 4)
    if cfg.output_final_state:
        params["ht"] = _Param(state, 4)
    convention = CallingConvention.cutile_python_v1()
    return {
        name: KernelSignature(
            [_constraint(x, c) for x, c in zip(args, _constants(KERNELS[name]))], convention
        )
        for name, args in kernel_arguments(cfg, params).items()
    }
