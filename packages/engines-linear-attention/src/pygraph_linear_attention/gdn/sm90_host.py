"""The host side of gdn's CuTe DSL forward and backward (`gdn.sm90_fwd`, `gdn.sm90_bwd`): the knobs,
the compile keys, the compiles (kept per process and on disk: `common.sm90_compile`) and the
workspace carves.

The compiled function is a TVM-FFI function of raw device addresses, 32-bit sizes, the scale and
the stream, so a call converts no tensor. Its arguments, in order: q, k, v, g, beta, a_log, dt_bias,
cu_seqlens, initial state, o, final state, and the workspace's gamma, w, u, hs and vnew (the
last two only with SPLIT), tb and p (only for the fused warpgroup scan, which has no w and u; p at
WGMMA 3), and with SEGMENT seg_mb, seg_st and con (the segments' transitions, entering states and
each chunk's largest beta ||k||^2); then tokens,
sequences, the slot search's halvings, and the head counts of q/k, v, the output, g, beta, a_log
and dt_bias; then the scale (fp32: a run-time argument, so the keys hold none and one compile
serves every scale); then the stream. An absent optional operand is passed as the workspace's spare
address: the kernels' branches that would read it are compiled out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pygraph_linear_attention.common.host import CHUNK, Region, layout_regions, prepare_slots, regions_bytes
from pygraph_linear_attention.common.sm90_compile import ARCH, compiled, cute_compile
from pygraph_linear_attention.gdn.cutile_host import GdnCutileConfig

__all__ = [
    "BLOCK_V_SM90",
    "SEGMENT_SM90",
    "SPLIT_SM90",
    "STAGES_SM90",
    "WGMMA_BWD_SM90",
    "WGMMA_SM90",
    "Sm90BwdKey",
    "Sm90Key",
    "backward_regions",
    "bwd_key_for",
    "compiled_backward",
    "compiled_forward",
    "key_for",
    "segment_regions",
    "segment_slots",
    "segment_state_elements",
    "workspace_bytes",
    "workspace_regions",
]

BLOCK_V_SM90 = (32, 64)  # value rows of the state one scan CTA carries; the first is the default
# STAGES: the scan's shared buffers of a chunk's q, k, w, u and gamma; 2 loads chunk c + 1 while
# chunk c computes (about 130 KB of shared memory at BLOCK_V 32: one CTA per SM; 1: 76 KB, two).
# 1 first, by measurement (H200, BLOCK_V 32, scan ms): B4 T4096 0.372 against 0.603 at 2 (half
# the resident CTAs), varlen8 1.135 against 1.586, B1 T32768 2.419 against 2.356: the chunk step
# waits on its chain of products and barriers, not on its loads
STAGES_SM90 = (1, 2)
# SPLIT: 1 moves the output out of the scan: the scan stores each chunk's entering state ([chunk
# slots, HO, V, K], io dtype) and v_new (the backward's state scan is this pass), and the `output`
# kernel computes every chunk's output at once, so the scan's chunk step is two products instead of
# five. Measured on the H200 (BLOCK_V 32, whole forward, ms, SPLIT 0 / 1): B1 T32768 3.048 / 2.400
# at STAGES 1 and 2.933 / 2.338 at STAGES 2; B4 T4096 0.689 / 0.795 (STAGES 1); varlen8 1.708 /
# 1.737 (1.702 at STAGES 2). With the output on warpgroup MMAs too (WGMMA 2) the split scan leads in
# every timed cell (`heuristics.sm90_order`; benchmarks/RESULTS.md, Linear attention).
SPLIT_SM90 = (0, 1)
# WGMMA: 1 runs the split scan (the forward's with SPLIT 1, the backward's recompute) and the
# backward's gradient scan on warpgroup MMAs (wgmma.m64nNk16, operands straight from shared
# memory, the state carried transposed in the accumulators) instead of warp-level mma.sync: a chunk
# step's products issue as a few asynchronous instructions rather than 4 warps' chains of 16x8x16
# tiles with their ldmatrix loads. Measured on the H200 (BLOCK_V 32, ms, WGMMA 0 / 1):
# forward B1 T32768 2.265 / 1.659 (SPLIT 1, STAGES 2), varlen8 1.651 (fused) / 1.403, B4 T4096
# 0.643 (fused) / 0.685; the backward alone 6.88 / 5.82 (B1), 4.81 / 4.13 (varlen8), 2.10 / 1.99 (B4).
# The forward's 2 also runs the split scan's output kernel on warpgroup MMAs, one CTA per chunk and
# head over the whole value dim (q k^T once per chunk, not once per value block): the output kernel
# 0.439 -> 0.206 ms at B1 T32768 (H200), the forward 1.652 -> 1.424 (STAGES 2); benchmarks/
# RESULTS.md, Linear attention (its gdn table and History).
# With SPLIT 0, WGMMA 1 is the fused scan on warpgroup MMAs (`gdn.sm90_fused`): the state on chip
# from the first chunk to the last and each chunk's output in its step, prepare storing one 64 x 64
# Tb per chunk and head instead of w and u, so no per-chunk state or v_new goes through HBM.
# 3 reads each chunk's decayed causal scores P from prepare (q k^T and its exps off the chain), 4 also
# splits the fused scan over two warpgroups: the state's chain on one, the output on the other
# (`gdn.sm90_fused_ws`).
WGMMA_SM90 = (0, 1, 2, 3, 4)
# SEGMENT: chunks a segment of the fused warpgroup scan (0: one CTA walks a whole sequence). A
# sequence's chunks split into segments run as the segments' transitions (phase 1, from zero rows and
# from the identity), their combine (a step a segment) and the fused scan over every segment from the
# state entering it (`gdn.sm90_fused`): segments x heads x blocks CTAs for a long sequence instead of
# heads x blocks, for about twice the state arithmetic. The backward's SEGMENT (with WGMMA 1 or 2) segments
# both of its serial scans, the state recompute and the gradient scan, the same way (`gdn.sm90_bwd`).
SEGMENT_SM90 = (0, 16, 32, 64)
# The backward's WGMMA 2 also fuses its chunk gradients into one kernel on two warpgroups split by
# dependency (`gdn.sm90_bwd_chunk_ws`): grad_output's and grad_wy's products on warpgroup MMAs over
# the whole key and value dims, dk's first terms and dw on chip rather than through HBM.
WGMMA_BWD_SM90 = (0, 1, 2)

FN_NAME = "pygraph_gdn_sm90_fwd"
BWD_FN_NAME = "pygraph_gdn_sm90_bwd"


@dataclasses.dataclass(frozen=True)
class Sm90Key:
    """What one compiled forward is specialised for: dims, value block, dtypes (by name) and options."""

    key_dim: int
    value_dim: int
    block_v: int
    io_dtype: str
    beta_dtype: str
    h0_dtype: str  # "float32" when there is no initial state
    ht_dtype: str  # "float32" when there is no final state
    cu_dtype: str
    l2norm: bool
    beta_sigmoid: bool
    neg_eigval: bool
    safe_gate: bool
    has_dt_bias: bool
    has_h0: bool
    store_ht: bool
    stages: int = 2
    split: bool = False
    wgmma: int = 0  # WGMMA: 1 the split scan on warpgroup MMAs, 2 its output kernel too; 3, 4 (`WGMMA_SM90`)
    segment: int = 0  # SEGMENT: chunks a segment of the fused warpgroup scan (0: unsegmented)


def key_for(
    cfg: GdnCutileConfig,
    *,
    beta: str,
    h0: str,
    ht: str,
    cu: str,
    stages: int,
    split: bool = False,
    wgmma: int = 0,
    segment: int = 0,
) -> Sm90Key:
    return Sm90Key(
        key_dim=cfg.key_dim, value_dim=cfg.value_dim, block_v=cfg.block_v, io_dtype=cfg.io_dtype,
        beta_dtype=beta, h0_dtype=h0, ht_dtype=ht, cu_dtype=cu, l2norm=cfg.use_qk_l2norm,
        beta_sigmoid=cfg.use_beta_sigmoid, neg_eigval=cfg.allow_neg_eigval, safe_gate=cfg.safe_gate,
        has_dt_bias=cfg.has_dt_bias, has_h0=cfg.has_initial_state,
        store_ht=cfg.output_final_state, stages=stages, split=split, wgmma=wgmma, segment=segment,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Sm90BwdKey:
    """What one compiled backward is specialised for: the forward's fields it recomputes, the
    gradients' dtypes (by name) and which of them the chunk kernels write themselves."""

    key_dim: int
    value_dim: int
    block_v: int
    io_dtype: str
    beta_dtype: str
    h0_dtype: str  # "float32" when there is no initial state
    dh0_dtype: str
    dht_dtype: str  # "float32" when there is no d_final_state
    cu_dtype: str
    dg_dtype: str
    dbeta_dtype: str
    da_log_dtype: str
    ddt_bias_dtype: str
    l2norm: bool
    beta_sigmoid: bool
    neg_eigval: bool
    safe_gate: bool
    has_dt_bias: bool
    has_h0: bool
    has_dht: bool
    direct_qk: bool
    direct_v: bool
    wgmma: int = 0  # WGMMA (`WGMMA_BWD_SM90`): 1 the scans on warpgroup MMAs, 2 the chunk gradients fused too
    stages: int = 1  # both scans' shared buffers (with wgmma): 2 prefetches the next chunk
    segment: int = 0  # SEGMENT (with wgmma): chunks a segment of both scans (0: unsegmented)


def bwd_key_for(
    cfg: Any, names: dict[str, str], wgmma: int = 0, stages: int = 1, segment: int = 0
) -> Sm90BwdKey:
    """The backward's key for ``cfg`` (a `GdnCutileBwdConfig`) and the operands' dtypes by role."""
    f32 = "float32"
    return Sm90BwdKey(
        key_dim=cfg.key_dim, value_dim=cfg.value_dim, block_v=cfg.block_v, io_dtype=cfg.io_dtype,
        beta_dtype=names["beta"], h0_dtype=names.get("h0", f32), dh0_dtype=names.get("dh0", f32),
        dht_dtype=names.get("dht", f32), cu_dtype=names["cu_seqlens"], dg_dtype=names["dG"],
        dbeta_dtype=names["dBeta"], da_log_dtype=names.get("d_a_log", f32),
        ddt_bias_dtype=names.get("d_dt_bias", f32), l2norm=cfg.use_qk_l2norm,
        beta_sigmoid=cfg.use_beta_sigmoid, neg_eigval=cfg.allow_neg_eigval, safe_gate=cfg.safe_gate,
        has_dt_bias=cfg.has_dt_bias, has_h0=cfg.has_initial_state, has_dht=cfg.has_d_final_state,
        direct_qk=cfg.direct_qk, direct_v=cfg.direct_v, wgmma=wgmma, stages=stages, segment=segment,
    )  # fmt: skip


def backward_regions(cfg: Any, segment: int = 0) -> tuple[Region, ...]:
    """The backward's workspace: the forward's gamma, w and u, each chunk's T, entering state and its
    gradient (io dtype), v_new and dv_new; the per-output-head gradients (fp32, dw in the io dtype:
    an operand), d gamma's output terms, dg, dbeta and the a_log terms; with ``segment`` the
    segments' rows (`segment_regions`); the spare."""
    t, ho, k, v, io, f32 = cfg.tokens, cfg.heads_out, cfg.key_dim, cfg.value_dim, cfg.io_dtype, "float32"
    slots = prepare_slots(cfg)
    rows = [
        ("gamma", f32, (t, ho)), ("w", io, (t, ho, k)), ("u", io, (t, ho, v)),
        ("t", io, (slots, ho, CHUNK, CHUNK)), ("hs", io, (slots, ho, v, k)), ("vnew", io, (t, ho, v)),
        ("dh", io, (slots, ho, v, k)), ("dvnew", io, (t, ho, v)), ("dq", f32, (t, ho, k)),
        ("dk", f32, (t, ho, k)), ("dw", io, (t, ho, k)), ("dv", f32, (t, ho, v)), ("dgp", f32, (t, ho)),
        ("dg", f32, (t, ho)), ("dbeta", f32, (t, ho)), ("da", f32, (t, ho)),
    ]  # fmt: skip
    return layout_regions([*rows, *segment_regions(cfg, segment), ("spare", "float32", (64,))])


def segment_regions(cfg: Any, segment: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """The segmented scans' rows (none without ``segment``): each segment's B and M rows ([slots, HO,
    V + K, K]) and entering state ([slots, HO, V, K]), fp32 (the backward reuses them for each
    segment's G and the gradient at its end), and each chunk's largest beta ||k||^2 ([chunk slots,
    HO], fp32: the warmup's test)."""
    if not segment:
        return []
    t, ho, k, v = cfg.tokens, cfg.heads_out, cfg.key_dim, cfg.value_dim
    slots = segment_slots(t, cfg.sequences, segment)
    return [
        ("seg_mb", "float32", (slots, ho, v + k, k)),
        ("seg_st", "float32", (slots, ho, v, k)),
        ("con", "float32", (prepare_slots(cfg), ho)),
    ]


def segment_slots(tokens: int, sequences: int, segment: int) -> int:
    """The segmented scan's segment slots: sequence n's segments of ``segment`` chunks start at
    cu_seqlens[n] // (64 segment) + n, so T // (64 segment) + N + 1 slots hold any lengths."""
    return tokens // (CHUNK * segment) + sequences + 1


def segment_state_elements(facts: Any, segment: int) -> int:
    """Elements of the segments' transitions ([segment slots, HO, V + K, K]), which the kernels index
    with 32-bit offsets (below 2^31)."""
    slots = segment_slots(facts.tokens, facts.sequences, segment)
    return slots * facts.heads_out * (facts.head_dim_v + facts.head_dim_k) * facts.head_dim_k


def workspace_regions(
    cfg: GdnCutileConfig,
    split: bool = False,
    fused_wg: bool = False,
    segment: int = 0,
    stored_p: bool = False,
) -> tuple[Region, ...]:
    """gamma (fp32), w and u (the io dtype), with ``split`` the chunks' entering states and v_new (io
    dtype), and the spare address absent operands point at; with ``fused_wg`` (the fused warpgroup
    scan) gamma and each token's row of its chunk's Tb (io dtype) instead of w and u, and with
    ``segment`` each segment's B and M rows ([slots, HO, V + K, K]) and entering state ([slots, HO,
    V, K]), fp32, and each chunk's largest beta ||k||^2 ([chunk slots, HO], fp32: the warmup's test)."""
    t, ho, k, v = cfg.tokens, cfg.heads_out, cfg.key_dim, cfg.value_dim
    if fused_wg:
        rows = [("gamma", "float32", (t, ho)), ("tb", cfg.io_dtype, (t, ho, CHUNK))]
        if stored_p:
            rows.append(("p", cfg.io_dtype, (t, ho, CHUNK)))
        return layout_regions([*rows, *segment_regions(cfg, segment), ("spare", "float32", (64,))])
    rows = [("gamma", "float32", (t, ho)), ("w", cfg.io_dtype, (t, ho, k)), ("u", cfg.io_dtype, (t, ho, v))]
    if split:
        rows += [("hs", cfg.io_dtype, (prepare_slots(cfg), ho, v, k)), ("vnew", cfg.io_dtype, (t, ho, v))]
    return layout_regions([*rows, ("spare", "float32", (64,))])


def workspace_bytes(
    cfg: GdnCutileConfig,
    split: bool = False,
    fused_wg: bool = False,
    segment: int = 0,
    stored_p: bool = False,
) -> int:
    """The workspace `workspace_regions` lays out, in bytes."""
    return regions_bytes(workspace_regions(cfg, split, fused_wg, segment, stored_p))


def compiled_forward(key: Sm90Key, arch: str = ARCH) -> Any:
    """The compiled forward for ``key``: kept for the process and on disk (`common.sm90_compile.compiled`),
    so a configuration compiles (about 6 s) once per machine, not once per process."""
    return compiled(key, arch, FN_NAME, _compile)


def compiled_backward(key: Sm90BwdKey, arch: str = ARCH) -> Any:
    """The compiled backward for ``key``, kept as `compiled_forward` keeps the forward."""
    return compiled(key, arch, BWD_FN_NAME, _compile)


def _compile(key: Any, arch: str) -> Any:
    """Build the forward's or the backward's function for ``key`` (the process and disk caches'
    ``build``)."""
    if isinstance(key, Sm90BwdKey):
        return _compile_backward(key, arch)
    from pygraph_linear_attention.gdn.sm90_fwd import GdnSm90Fwd

    kernel = GdnSm90Fwd(
        key_dim=key.key_dim, value_dim=key.value_dim, block_v=key.block_v, io_dtype=key.io_dtype,
        beta_dtype=key.beta_dtype, h0_dtype=key.h0_dtype, ht_dtype=key.ht_dtype, cu_dtype=key.cu_dtype,
        l2norm=key.l2norm, beta_sigmoid=key.beta_sigmoid, neg_eigval=key.neg_eigval,
        safe_gate=key.safe_gate, has_dt_bias=key.has_dt_bias, has_h0=key.has_h0, store_ht=key.store_ht,
        stages=key.stages, split=key.split, wgmma=key.wgmma, segment=key.segment,
    )  # fmt: skip
    io, f32 = key.io_dtype, "float32"
    pointers = [
        (io, 16), (io, 16), (io, 16), (f32, 4), (key.beta_dtype, 2), (f32, 4), (f32, 4), ("cu", 4),
        (key.h0_dtype, 4), (io, 16), (key.ht_dtype, 4), (f32, 4), (io, 16), (io, 16), (io, 16), (io, 16),
        (io, 16), (io, 16), (f32, 16), (f32, 16), (f32, 4),
    ]  # fmt: skip
    return cute_compile(kernel, pointers, key.cu_dtype, 10, arch)


def _compile_backward(key: Sm90BwdKey, arch: str) -> Any:
    from pygraph_linear_attention.gdn.sm90_bwd import GdnSm90Bwd

    kernel = GdnSm90Bwd(
        key_dim=key.key_dim, value_dim=key.value_dim, block_v=key.block_v, io_dtype=key.io_dtype,
        beta_dtype=key.beta_dtype, h0_dtype=key.h0_dtype, cu_dtype=key.cu_dtype, l2norm=key.l2norm,
        beta_sigmoid=key.beta_sigmoid, neg_eigval=key.neg_eigval, safe_gate=key.safe_gate,
        has_dt_bias=key.has_dt_bias, has_h0=key.has_h0, has_dht=key.has_dht, direct_qk=key.direct_qk,
        direct_v=key.direct_v, wgmma=key.wgmma, stages=key.stages, segment=key.segment,
    )  # fmt: skip
    io, f32 = key.io_dtype, "float32"
    pointers = [
        # q k v g beta a_log dt_bias cu_seqlens h0 dO dht
        (io, 16), (io, 16), (io, 16), (f32, 4), (key.beta_dtype, 2), (f32, 4), (f32, 4), ("cu", 4),
        (key.h0_dtype, 4), (io, 16), (key.dht_dtype, 4),
        # dQ dK dV dG dBeta d_initial_state d_a_log d_dt_bias
        (io, 16), (io, 16), (io, 16), (key.dg_dtype, 2), (key.dbeta_dtype, 2), (key.dh0_dtype, 4),
        (key.da_log_dtype, 2), (key.ddt_bias_dtype, 2),
        # the workspace: gamma w u t hs vnew dh dvnew dq dk dw dv dgp dg dbeta da
        (f32, 4), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (f32, 16), (f32, 16),
        (io, 16), (f32, 16), (f32, 4), (f32, 4), (f32, 4), (f32, 4),
        # seg_mb seg_st con
        (f32, 16), (f32, 16), (f32, 4),
    ]  # fmt: skip
    return cute_compile(kernel, pointers, key.cu_dtype, 10, arch)
