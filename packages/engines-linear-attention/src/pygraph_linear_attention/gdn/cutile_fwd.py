"""The Gated DeltaNet forward in cuTile: three kernels, the steps of `common.chunked` on the device.

1. `common.cutile_blocks.chunk_table_kernel` (grid: blocks of chunk slots): the chunk index table, built on the device
   from ``cu_seqlens``, so nothing reads the sequence lengths on the host. Slot ``j`` of the table
   (``[chunk_slots, 2]`` int32) names (sequence, chunk of that sequence), or (-1, -1) past the
   last chunk; ``chunk_slots = cdiv(T, CHUNK) + N`` bounds the count for any lengths.
2. `chunk_prepare_kernel` (grid: chunk slots x output heads): per chunk, the options applied to
   g, beta and k, the cumulative log decay gamma, ``A`` (strictly lower, decay-weighted
   ``beta k k^T``), ``T = (I + A)^-1`` and from it ``w = T (beta exp(gamma) k)`` and
   ``u = T (beta v)``. gamma (fp32), w and u (the io dtype) go to the workspace.
3. `chunk_scan_kernel` (grid: sequences x output heads x value blocks of ``BV``): the state
   ``S`` [BV, K] (fp32, in registers) carried chunk after chunk; per chunk the new values
   ``v_new = u - w S^T``, the output ``o`` and the state update. The output is computed here,
   beside the state it reads, so no per-chunk state is ever stored.

Every tile is CHUNK = 64 tokens of one sequence: a sequence's slice of each [T, ...] array
(``Array.slice``) is loaded in tiles of 64 rows with zero padding past its end, and stores past
its end are dropped, which is the zero-token padding `common.chunked` relies on. The inverse of the
64 x 64 unit lower-triangular ``I + A`` is `common.cutile_blocks.unit_lower_inverse` (blocked, fp32).
Matrix products take io-dtype operands with fp32 accumulation, except the inverse's (fp32).
"""

from __future__ import annotations

from typing import Any

import cuda.tile as ct

from pygraph_linear_attention.common.cutile_blocks import (
    TMA,
    chunk_offsets_kernel,
    chunk_table_kernel,
    l2_normalized,
    rows_at,
    unit_lower_inverse,
)
from pygraph_linear_attention.common.cutile_export import Param, signature

__all__ = [
    "KERNELS",
    "chunk_prepare_kernel",
    "chunk_scan_kernel",
    "export_signatures",
    "hinted",
]

ConstInt = ct.Constant[int]
ConstFloat = ct.Constant[float]

_ZERO = ct.PaddingMode.ZERO


def softplus(x):
    """log(1 + exp(x)) without overflow."""
    return ct.maximum(x, 0.0) + ct.log(1.0 + ct.exp(-ct.abs(x)))


def keys_at(k_seq, c, hk, L2NORM, C: ConstInt, K: ConstInt):
    """k [C, K] of chunk ``c``, head ``hk`` (0 past the slice's end), L2-normalized where L2NORM."""
    kt = rows_at(k_seq, (c, hk, 0), C, K)
    if L2NORM != 0:
        kt = l2_normalized(kt)
    return kt


def gamma_at(g_seq, c, h, C: ConstInt):
    """gamma [C] of chunk ``c``, head ``h``, of a sequence's slice (0 past its end)."""
    return ct.reshape(ct.load(g_seq, (c, h), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA), (C,))


def carry_state(state, v_new, kt, gam, valid, rows, r, C: ConstInt):
    """The state leaving a chunk (step 4): exp(last) S + (v_new exp(last - gamma))^T k over the
    chunk's real rows, ``last`` the gamma of its last real row."""
    last = ct.sum(ct.where(r == ct.minimum(rows, C) - 1, gam, 0.0))
    carried = ct.astype(v_new * ct.expand_dims(ct.where(valid, ct.exp(last - gam), 0.0), 1), kt.dtype)
    return ct.mma(ct.transpose(carried), kt, state * ct.exp(last))


@ct.kernel
def chunk_prepare_kernel(
    k,  # [T, H, K] io
    v,  # [T, HV, V] io
    g,  # [T, HG] fp32: log decay, or safe_gate logits
    beta,  # [T, HB] fp32 or io
    a_log,  # [HA] (read when SAFE_GATE)
    dt_bias,  # [HD] (read when SAFE_GATE and HAS_DT_BIAS)
    cu_seqlens,  # [N + 1] int32 or int64
    table,  # [slots, 2] int32, from chunk_table_kernel
    gamma_out,  # [T, HO] fp32
    w_out,  # [T, HO, K] io
    u_out,  # [T, HO, V] io
    t_out,  # [slots, HO, C, C] fp32: T, for the backward (written when STORE_T)
    K_GROUP,  # output heads per k head (HO // H)
    V_GROUP,  # HO // HV
    G_GROUP,  # HO // HG
    B_GROUP,  # HO // HB
    A_GROUP,  # HO // HA
    D_GROUP,  # HO // HD
    L2NORM,  # the options, 0 or 1 (runtime: one compiled kernel serves them all)
    BETA_SIGMOID,
    NEG_EIGVAL,
    SAFE_GATE,
    HAS_DT_BIAS,
    STORE_T,
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
    valid = r < (eos - bos - c * C)

    gate = ct.load(g.slice(0, bos, eos), (c, h // G_GROUP), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA)
    gate = ct.astype(ct.reshape(gate, (C,)), ct.float32)
    if SAFE_GATE != 0:
        rate = ct.exp(ct.astype(ct.load(a_log, (h // A_GROUP,), shape=()), ct.float32))
        if HAS_DT_BIAS != 0:
            gate = gate + ct.astype(ct.load(dt_bias, (h // D_GROUP,), shape=()), ct.float32)
        gate = ct.where(valid, -rate * softplus(gate), 0.0)
    wr = ct.load(beta.slice(0, bos, eos), (c, h // B_GROUP), shape=(C, 1), padding_mode=_ZERO, allow_tma=TMA)
    wr = ct.astype(ct.reshape(wr, (C,)), ct.float32)
    if BETA_SIGMOID != 0:
        wr = ct.where(valid, 1.0 / (1.0 + ct.exp(-wr)), 0.0)
    if NEG_EIGVAL != 0:
        wr = wr * 2.0
    gamma = ct.cumsum(gate, 0)

    kt = ct.load(
        k.slice(0, bos, eos), (c, h // K_GROUP, 0), shape=(C, 1, K), padding_mode=_ZERO, allow_tma=TMA
    )
    kt = ct.reshape(kt, (C, K))
    if L2NORM != 0:
        kt = l2_normalized(kt)
    gram = ct.mma(kt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
    below = ct.expand_dims(r, 1) > ct.expand_dims(r, 0)
    gap = ct.expand_dims(gamma, 1) - ct.expand_dims(gamma, 0)
    # the exp only where it is used: above the diagonal the gap is a growth and may overflow
    a = ct.where(below, gram * ct.exp(ct.where(below, gap, 0.0)), 0.0) * ct.expand_dims(wr, 1)
    t = unit_lower_inverse(a)
    if STORE_T != 0:
        ct.store(t_out, (ct.bid(0), h, 0, 0), ct.reshape(t, (1, 1, C, C)), allow_tma=TMA)
    t = ct.astype(t, kt.dtype)

    kw = ct.astype(ct.astype(kt, ct.float32) * ct.expand_dims(wr * ct.exp(gamma), 1), kt.dtype)
    w = ct.mma(t, kw, ct.zeros((C, K), dtype=ct.float32))
    ct.store(
        w_out.slice(0, bos, eos), (c, h, 0), ct.reshape(ct.astype(w, w_out.dtype), (C, 1, K)), allow_tma=TMA
    )
    vt = ct.load(
        v.slice(0, bos, eos), (c, h // V_GROUP, 0), shape=(C, 1, V), padding_mode=_ZERO, allow_tma=TMA
    )
    vw = ct.astype(ct.astype(ct.reshape(vt, (C, V)), ct.float32) * ct.expand_dims(wr, 1), kt.dtype)
    u = ct.mma(t, vw, ct.zeros((C, V), dtype=ct.float32))
    ct.store(
        u_out.slice(0, bos, eos), (c, h, 0), ct.reshape(ct.astype(u, u_out.dtype), (C, 1, V)), allow_tma=TMA
    )
    ct.store(gamma_out.slice(0, bos, eos), (c, h), ct.reshape(gamma, (C, 1)), allow_tma=TMA)


@ct.kernel
def chunk_scan_kernel(
    q,  # [T, H, K] io
    k,  # [T, H, K] io
    w,  # [T, HO, K] io, from chunk_prepare_kernel
    u,  # [T, HO, V] io
    gamma,  # [T, HO] fp32
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
        # sliced inside the loop: an empty last sequence (bos == T) must not slice (start < T is required)
        q_seq, k_seq, o_seq = q.slice(0, bos, eos), k.slice(0, bos, eos), o.slice(0, bos, eos)
        w_seq, u_seq, g_seq = w.slice(0, bos, eos), u.slice(0, bos, eos), gamma.slice(0, bos, eos)
        rows = length - c * C
        valid = r < rows
        qt = rows_at(q_seq, (c, hk, 0), C, K)
        kt = rows_at(k_seq, (c, hk, 0), C, K)
        if L2NORM != 0:
            qt = l2_normalized(qt)
            kt = l2_normalized(kt)
        wt = rows_at(w_seq, (c, h, 0), C, K)
        ut = rows_at(u_seq, (c, h, vb), C, BV)
        gam = gamma_at(g_seq, c, h, C)
        state_t = ct.transpose(ct.astype(state, kt.dtype))  # [K, BV]
        v_new = ct.astype(ut, ct.float32) - ct.mma(wt, state_t, ct.zeros((C, BV), dtype=ct.float32))
        v_new_io = ct.astype(v_new, kt.dtype)

        # rows and columns both real: a padded row's gamma reads 0, so its gap to a real
        # column is a growth that overflows under strong gates (inf * 0 = NaN in the products)
        live = causal & ct.expand_dims(valid, 0) & ct.expand_dims(valid, 1)
        gap = ct.expand_dims(gam, 1) - ct.expand_dims(gam, 0)
        scores = ct.mma(qt, ct.transpose(kt), ct.zeros((C, C), dtype=ct.float32))
        scores = ct.where(live, scores * ct.exp(ct.where(live, gap, 0.0)), 0.0)
        inter = ct.mma(qt, state_t, ct.zeros((C, BV), dtype=ct.float32)) * ct.expand_dims(ct.exp(gam), 1)
        out = ct.mma(ct.astype(scores, kt.dtype), v_new_io, inter) * SCALE
        ct.store(o_seq, (c, h, vb), ct.reshape(ct.astype(out, o.dtype), (C, 1, BV)), allow_tma=TMA)

        state = carry_state(state, v_new, kt, gam, valid, rows, r, C)
    if STORE_HT != 0:
        ct.store(ht, (n, h, vb, 0), ct.reshape(ct.astype(state, ht.dtype), (1, 1, BV, K)), allow_tma=TMA)


# --- the split scan: a long sequence's chunks in segments, scanned in parallel ----------------------
# One chunk maps the state S [V, K] to S (e^L I - W^T D K) + (D U)^T K (L the chunk's last gamma,
# D = diag(e^(L - gamma_i)) over its real rows): affine in S, each row of S on its own. A segment of
# chunks composes to S M + N; M (K x K) is what the same recurrence makes of the K rows of the
# identity with u = 0, and N what it makes of zero rows with the chunk's u. `segment_scan_kernel`
# computes N and M for every segment at once (V / BV programs for N, K / BV for M);
# `segment_combine_kernel` walks each sequence's segments (S_next = S M + N: a few steps, not one
# per chunk) to the state entering each (and, for the backward, the gradient's walk back); the fused scan then runs over the segments as over
# sequences of their own, from those states.


@ct.kernel
def segment_bounds_kernel(cu_seqlens, seg_table, seg_cu, SEGMENTS, T, SEG: ConstInt, BJ: ConstInt):
    """seg_cu[j] = the first token of segment slot j (from `chunk_table_kernel` run with C = SEG
    tokens: (sequence, segment within it)); unused slots and seg_cu[SEGMENTS] read T, so they are
    empty and the used ones end where the next begins."""
    slot = ct.bid(0) * BJ + ct.arange(BJ, dtype=ct.int32)
    n = ct.reshape(
        ct.load(seg_table, (ct.bid(0), 0), shape=(BJ, 1), padding_mode=_ZERO, allow_tma=TMA), (BJ,)
    )
    p = ct.reshape(
        ct.load(seg_table, (ct.bid(0), 1), shape=(BJ, 1), padding_mode=_ZERO, allow_tma=TMA), (BJ,)
    )
    used = (slot < SEGMENTS) & (n >= 0)
    bos = ct.astype(ct.gather(cu_seqlens, ct.maximum(n, 0), mask=used, padding_value=0), ct.int32)
    ct.store(seg_cu, (ct.bid(0),), ct.where(used, bos + p * SEG, T), allow_tma=TMA)


@ct.kernel
def segment_scan_kernel(
    k,  # [T, H, K] io
    w,  # [T, HO, K] io, from chunk_prepare_kernel
    u,  # [T, HO, V] io
    gamma,  # [T, HO] fp32
    seg_cu,  # [SEGMENTS + 1] int32, from segment_bounds_kernel
    seg_n,  # [SEGMENTS, HO, V, K] fp32 out: each segment's N
    seg_m,  # [SEGMENTS, HO, K, K] fp32 out: each segment's M
    K_GROUP,
    L2NORM,
    K: ConstInt,
    V: ConstInt,
    BV: ConstInt,
    C: ConstInt,
):
    s, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    bos = ct.load(seg_cu, (s,), shape=())
    eos = ct.load(seg_cu, (s + 1,), shape=())
    length = eos - bos
    value_rows = vb < V // BV  # N's rows (the chunk's u) or M's (the identity's, u = 0)
    rows_id = (vb - V // BV) * BV + ct.arange(BV, dtype=ct.int32)
    eye = ct.expand_dims(rows_id, 1) == ct.expand_dims(ct.arange(K, dtype=ct.int32), 0)
    state = ct.where(eye, 1.0, 0.0)  # N's programs: rows_id < 0, no diagonal, zero rows
    r = ct.arange(C, dtype=ct.int32)
    hk = h // K_GROUP
    ub = ct.minimum(vb, V // BV - 1)  # the u block N's programs read (M's read one and drop it)
    keep_u = ct.where(value_rows, 1.0, 0.0)
    for c in range(ct.cdiv(length, C)):
        k_seq, w_seq, u_seq, g_seq = (
            k.slice(0, bos, eos),
            w.slice(0, bos, eos),
            u.slice(0, bos, eos),
            gamma.slice(0, bos, eos),
        )
        rows = length - c * C
        valid = r < rows
        kt = keys_at(k_seq, c, hk, L2NORM, C, K)
        wt = rows_at(w_seq, (c, h, 0), C, K)
        ut = rows_at(u_seq, (c, h, ub), C, BV)
        gam = gamma_at(g_seq, c, h, C)
        state_t = ct.transpose(ct.astype(state, kt.dtype))  # [K, BV]
        v_new = ct.astype(ut, ct.float32) * keep_u - ct.mma(wt, state_t, ct.zeros((C, BV), dtype=ct.float32))
        state = carry_state(state, v_new, kt, gam, valid, rows, r, C)
    if vb < V // BV:
        ct.store(seg_n, (s, h, vb, 0), ct.reshape(state, (1, 1, BV, K)), allow_tma=TMA)
    else:
        ct.store(seg_m, (s, h, vb - V // BV, 0), ct.reshape(state, (1, 1, BV, K)), allow_tma=TMA)


@ct.kernel
def segment_combine_kernel(
    seg_add,  # [SEGMENTS, HO, V, K] fp32: each segment's N (forward) or G (REVERSE)
    seg_m,  # [SEGMENTS, HO, K, K] fp32, from segment_scan_kernel
    seg_offsets,  # [N] int32: each sequence's first segment slot (chunk_offsets_kernel, C = SEG)
    cu_seqlens,  # [N + 1]
    start,  # [N, HO, V, K] (read when HAS_START): initial_state, or d_final_state (REVERSE)
    seg_out,  # [SEGMENTS, HO, V, K] fp32 out: the state entering each segment (the gradient leaving it)
    end,  # [N, HO, V, K] out (written when STORE_END): the final state (d_initial_state)
    HAS_START,
    STORE_END,
    K: ConstInt,
    V: ConstInt,
    BV: ConstInt,
    SEG: ConstInt,
    BK: ConstInt,  # key rows of M per product: min(32, K)
    REVERSE: ConstInt,
):
    """Per sequence, segment after segment: S -> S M + N from the first (the forward), or, with
    REVERSE, the gradient dS -> dS M^T + G from the last (its transpose), storing what enters each
    segment's scan."""
    n, h, vb = ct.bid(0), ct.bid(1), ct.bid(2)
    length = ct.astype(ct.load(cu_seqlens, (n + 1,), shape=()), ct.int32) - ct.astype(
        ct.load(cu_seqlens, (n,), shape=()), ct.int32
    )
    first = ct.load(seg_offsets, (n,), shape=())
    state = ct.zeros((BV, K), dtype=ct.float32)
    if HAS_START != 0:
        state = ct.astype(ct.reshape(ct.load(start, (n, h, vb, 0), shape=(1, 1, BV, K)), (BV, K)), ct.float32)
    count = ct.cdiv(length, SEG)
    for i in range(count):
        s = first + i
        if REVERSE != 0:
            s = first + count - 1 - i
        ct.store(seg_out, (s, h, vb, 0), ct.reshape(state, (1, 1, BV, K)), allow_tma=TMA)
        # in fp32 (a handful of steps per sequence, each carrying a whole segment), M in blocks of BK
        # key rows (columns for M^T): whole, its product spilled 8.5-12 KB per thread at K = 128 on
        # sm_90, in blocks 0.8-1.1 KB
        acc = ct.reshape(ct.load(seg_add, (s, h, vb, 0), shape=(1, 1, BV, K), allow_tma=TMA), (BV, K))
        for kb in range(K // BK):
            if REVERSE != 0:
                m_cols = ct.load(seg_m, (s, h, 0, kb), shape=(1, 1, K, BK), allow_tma=TMA)
                m = ct.transpose(ct.reshape(m_cols, (K, BK)))
            else:
                m = ct.reshape(ct.load(seg_m, (s, h, kb, 0), shape=(1, 1, BK, K), allow_tma=TMA), (BK, K))
            acc = ct.mma(ct.extract(state, (0, kb), (BV, BK)), m, acc)
        state = acc
    if STORE_END != 0:
        ct.store(end, (n, h, vb, 0), ct.reshape(ct.astype(state, end.dtype), (1, 1, BV, K)), allow_tma=TMA)


_HINTED: dict[tuple, Any] = {}


def hinted(kernel: Any, **hints: Any) -> Any:
    """``kernel`` recompiled with cuTile's kernel hints (``occupancy``, ``num_worker_warps``), one
    kernel object per (kernel, hints), so cuTile's per-kernel compile cache is kept."""
    key = (kernel, tuple(sorted(hints.items())))
    found = _HINTED.get(key)
    if found is None:
        found = _HINTED[key] = ct.kernel(kernel._pyfunc, **hints)
    return found


# the kernels by the names the host side (`gdn.cutile_host`) launches them under
KERNELS = {
    "table": chunk_table_kernel, "prepare": chunk_prepare_kernel, "scan": chunk_scan_kernel,
    "seg_table": chunk_table_kernel, "seg_offsets": chunk_offsets_kernel, "seg_bounds": segment_bounds_kernel,
    "segment_scan": segment_scan_kernel, "segment_combine": segment_combine_kernel,
}  # fmt: skip


def export_signatures(
    cfg: Any, *, cu_seqlens: str = "int32", beta: str = "float32", state: str = "float32"
) -> dict:
    """One `KernelSignature` per kernel for ``cfg`` (a `GdnCutileConfig`), for
    ``cuda.tile.compilation.export_kernel``: compiling for a named target without a GPU.

    Arrays are described as the engine passes them (last dim contiguous, int32 indexing, no
    aliasing), runtime scalars as int32, and the constants are the ones
    `gdn.cutile_host.kernel_arguments` passes, so the compiled code is the code a launch runs.
    """

    from pygraph_linear_attention.gdn.cutile_host import kernel_arguments

    io = cfg.io_dtype
    params = {
        "q": Param(io, 3), "k": Param(io, 3), "v": Param(io, 3), "g": Param("float32", 2), "beta": Param(beta, 2),
        "cu_seqlens": Param(cu_seqlens, 1), "o": Param(io, 3), "table": Param("int32", 2),
        "gamma": Param("float32", 2), "w": Param(io, 3), "u": Param(io, 3), "spare": Param("float32", 1),
        "spare4": Param("float32", 4), "seg_table": Param("int32", 2), "seg_offsets": Param("int32", 1),
        "seg_cu": Param("int32", 1), "seg_n": Param("float32", 4), "seg_m": Param("float32", 4),
        "seg_h0": Param("float32", 4),
    }  # fmt: skip
    if cfg.safe_gate:
        params["a_log"] = Param("float32", 1)
        if cfg.has_dt_bias:
            params["dt_bias"] = Param("float32", 1)
    if cfg.has_initial_state:
        params["h0"] = Param(state, 4)
    if cfg.output_final_state:
        params["ht"] = Param(state, 4)

    return {name: signature(KERNELS[name], args) for name, args in kernel_arguments(cfg, params).items()}
