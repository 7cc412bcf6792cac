"""The host side of the CuTe DSL KDA / GDN-2 forward (`kda.sm90_fwd`) and backward (`kda.sm90_bwd`):
the compile keys, the workspace carves and the compiles (kept per process and on disk:
`common.sm90_compile`).

The compiled function takes raw device addresses, 32-bit sizes, the scale and the stream. Its
pointer arguments, in order, are `POINTERS`: q, k, v, g, beta, the write gate (GDN-2), a_log,
dt_bias, cu_seqlens, initial state, o, final state, then the workspace's glast, qd, kd, w, u, p, hs
and vnew; then tokens, sequences, the slot search's halvings and the head counts of q/k, v, the
output, g, beta, w, a_log and dt_bias; then the scale (fp32: a run-time argument, so the keys hold
none and one compile serves every scale); then the stream. An absent optional operand is passed as
the workspace's spare address: the branches that would read it are compiled out. The backward's are
`BWD_POINTERS` (the inputs, dO and d_final_state, the gradients, then its workspace's regions) and
the same sizes and scale.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pygraph_linear_attention.common.host import CHUNK, Region, layout_regions, prepare_slots, regions_bytes
from pygraph_linear_attention.common.sm90_compile import ARCH, compiled, cute_compile
from pygraph_linear_attention.gdn.sm90_host import BLOCK_V_SM90, STAGES_SM90
from pygraph_linear_attention.kda.cutile_host import KdaCutileConfig

__all__ = [
    "BLOCK_V_KDA_SM90",
    "BWD_FN_NAME",
    "BWD_POINTERS",
    "FN_NAME",
    "POINTERS",
    "STAGES_KDA_SM90",
    "KdaSm90BwdKey",
    "KdaSm90Key",
    "backward_regions",
    "bwd_key_for",
    "compiled_backward",
    "compiled_forward",
    "key_for",
    "workspace_bytes",
    "workspace_regions",
]

# the scan's value rows per CTA and its shared buffers (gdn_sm90's knobs, the same scan kernel);
# untimed on KDA: the order is gdn_sm90's measured one (BLOCK_V 32, STAGES 1 first). BLOCK_V 16 too
# (wgmma n16, 32-byte rows): twice the scan CTAs of 32, for a long single sequence whose scan grid
# at 32 leaves half the SMs idle (B1 T32768 H16: 64 CTAs on 132 SMs); compiled, not yet timed
BLOCK_V_KDA_SM90 = (*BLOCK_V_SM90, 16)
STAGES_KDA_SM90 = STAGES_SM90
FN_NAME = "pygraph_kda_sm90_fwd"
POINTERS = (
    "q", "k", "v", "g", "beta", "w_gate", "a_log", "dt_bias", "cu_seqlens", "h0", "o", "ht",
    "glast", "qd", "kd", "w", "u", "p", "hs", "vnew",
)  # fmt: skip
BWD_FN_NAME = "pygraph_kda_sm90_bwd"
BWD_POINTERS = (
    "q", "k", "v", "g", "beta", "w_gate", "a_log", "dt_bias", "cu_seqlens", "h0", "dO", "dht",
    "dQ", "dK", "dV", "dG", "dBeta", "dW", "dh0", "d_a_log", "d_dt_bias",
    "glast", "qd", "kd", "w", "u", "p", "t", "hs", "vnew", "dh", "dvnew", "dq", "dk", "dw", "de", "dgp", "dg",
    "dv", "db", "dwg", "pa", "pb",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class KdaSm90Key:
    """What one compiled KDA / GDN-2 forward is specialised for: dims, the scan's value block and
    stages, dtypes (by name) and options."""

    gdn2: bool
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
    has_a_log: bool
    has_dt_bias: bool
    lower_bound: float
    has_h0: bool
    store_ht: bool
    stages: int = 1


def key_for(cfg: KdaCutileConfig, names: dict[str, str], stages: int = 1) -> KdaSm90Key:
    """The key of ``cfg`` with the operands' dtype names by role (beta, cu_seqlens, h0, ht)."""
    f32 = "float32"
    return KdaSm90Key(
        gdn2=cfg.op == "gdn2", key_dim=cfg.key_dim, value_dim=cfg.value_dim, block_v=cfg.block_v,
        io_dtype=cfg.io_dtype, beta_dtype=names["beta"], h0_dtype=names.get("h0", f32),
        ht_dtype=names.get("ht", f32), cu_dtype=names["cu_seqlens"], l2norm=cfg.use_qk_l2norm,
        beta_sigmoid=cfg.use_beta_sigmoid, neg_eigval=cfg.allow_neg_eigval,
        safe_gate=cfg.safe_gate, has_a_log=cfg.has_a_log, has_dt_bias=cfg.has_dt_bias,
        lower_bound=float(cfg.gate_lower_bound), has_h0=cfg.has_initial_state, store_ht=cfg.output_final_state,
        stages=stages,
    )  # fmt: skip


def workspace_regions(cfg: KdaCutileConfig) -> tuple[Region, ...]:
    """Each chunk's last gamma (fp32 [slots, HO, K]); q exp(gamma), k exp(last - gamma), w, u, the
    chunks' scores P [T, HO, 64], the per-chunk states and v_new (io dtype); the spare."""
    t, ho, k, v, io = cfg.tokens, cfg.heads_out, cfg.key_dim, cfg.value_dim, cfg.io_dtype
    slots = prepare_slots(cfg)
    rows = [
        ("glast", "float32", (slots, ho, k)), ("qd", io, (t, ho, k)), ("kd", io, (t, ho, k)),
        ("w", io, (t, ho, k)), ("u", io, (t, ho, v)), ("p", io, (t, ho, CHUNK)),
        ("hs", io, (slots, ho, v, k)), ("vnew", io, (t, ho, v)),
    ]  # fmt: skip
    return layout_regions([*rows, ("spare", "float32", (64,))])


def workspace_bytes(cfg: KdaCutileConfig) -> int:
    return regions_bytes(workspace_regions(cfg))


def compiled_forward(key: KdaSm90Key, arch: str = ARCH) -> Any:
    """The compiled forward for ``key``, kept per process and on disk (`common.sm90_compile.compiled`)."""
    return compiled(key, arch, FN_NAME, _compile)


def _gate_align(gdn2: bool) -> int:
    """The alignment the compiled functions assume of beta and the write gate: 16 bytes for GDN-2,
    whose kernels read them 8 channels a load (the engines check it: `kda.engine_sm90`), 2 for
    KDA's one-a-row beta."""
    return 16 if gdn2 else 2


def _compile(key: KdaSm90Key, arch: str) -> Any:
    from pygraph_linear_attention.kda.sm90_fwd import KdaSm90Fwd

    kernel = KdaSm90Fwd(
        key_dim=key.key_dim, value_dim=key.value_dim, block_v=key.block_v, io_dtype=key.io_dtype,
        beta_dtype=key.beta_dtype, h0_dtype=key.h0_dtype, ht_dtype=key.ht_dtype, cu_dtype=key.cu_dtype,
        gdn2=key.gdn2, l2norm=key.l2norm, beta_sigmoid=key.beta_sigmoid,
        neg_eigval=key.neg_eigval, safe_gate=key.safe_gate, has_a_log=key.has_a_log,
        has_dt_bias=key.has_dt_bias, lower_bound=key.lower_bound, has_h0=key.has_h0, store_ht=key.store_ht,
        stages=key.stages,
    )  # fmt: skip
    io, f32 = key.io_dtype, "float32"
    gate_align = _gate_align(key.gdn2)
    pointers = [
        # q k v g beta w_gate a_log dt_bias
        (io, 16), (io, 16), (io, 16), (f32, 4), (key.beta_dtype, gate_align), (io, gate_align), (f32, 4), (f32, 4),
        # cu_seqlens h0 o ht
        ("cu", 4), (key.h0_dtype, 4), (io, 16), (key.ht_dtype, 4),
        # the workspace: glast qd kd w u p hs vnew
        (f32, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16),
    ]  # fmt: skip
    return cute_compile(kernel, pointers, key.cu_dtype, 11, arch, roles=POINTERS)


@dataclasses.dataclass(frozen=True)
class KdaSm90BwdKey:
    """What one compiled KDA / GDN-2 backward is specialised for: the forward's fields it recomputes,
    the gradients' dtypes (by name) and which of them the chunk kernels write themselves."""

    gdn2: bool
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
    dw_dtype: str  # GDN-2's write gate's gradient ("float32" for KDA: unused)
    da_log_dtype: str
    ddt_bias_dtype: str
    l2norm: bool
    beta_sigmoid: bool
    neg_eigval: bool
    safe_gate: bool
    has_a_log: bool
    has_dt_bias: bool
    lower_bound: float
    has_h0: bool
    has_dht: bool
    direct_qk: bool  # one output head per q/k head and no l2 norm: dQ, dK written by the chunk kernels
    direct_v: bool  # one output head per v head: dV likewise
    stages: int = 1
    # one output head per g head: dG written by grad_wy itself, no head sum (GDN-2: beta's and the
    # write gate's, per their heads, likewise)
    direct_g: bool = False
    direct_beta: bool = False
    direct_w: bool = False


def bwd_key_for(cfg: Any, names: dict[str, str], stages: int = 1) -> KdaSm90BwdKey:
    """The backward's key for ``cfg`` (a `KdaCutileBwdConfig`) and the operands' dtypes by role."""
    f32, ho = "float32", cfg.heads_out
    return KdaSm90BwdKey(
        gdn2=cfg.op == "gdn2", key_dim=cfg.key_dim, value_dim=cfg.value_dim, block_v=cfg.block_v,
        io_dtype=cfg.io_dtype, beta_dtype=names["beta"], h0_dtype=names.get("h0", f32),
        dh0_dtype=names.get("dh0", f32), dht_dtype=names.get("dht", f32), cu_dtype=names["cu_seqlens"],
        dg_dtype=names["dG"], dbeta_dtype=names["dBeta"], dw_dtype=names.get("dW", f32),
        da_log_dtype=names.get("d_a_log", f32), ddt_bias_dtype=names.get("d_dt_bias", f32),
        l2norm=cfg.use_qk_l2norm, beta_sigmoid=cfg.use_beta_sigmoid,
        neg_eigval=cfg.allow_neg_eigval, safe_gate=cfg.safe_gate, has_a_log=cfg.has_a_log,
        has_dt_bias=cfg.has_dt_bias, lower_bound=float(cfg.gate_lower_bound), has_h0=cfg.has_initial_state,
        has_dht=cfg.has_d_final_state, direct_qk=cfg.heads_qk == cfg.heads_out and not cfg.use_qk_l2norm,
        direct_v=cfg.heads_v == cfg.heads_out, stages=stages, direct_g=(cfg.heads_g or ho) == ho,
        direct_beta=cfg.op == "gdn2" and (cfg.heads_beta or ho) == ho,
        direct_w=cfg.op == "gdn2" and (cfg.heads_w or ho) == ho,
    )  # fmt: skip


def backward_regions(cfg: Any) -> tuple[Region, ...]:
    """The backward's workspace: the forward's operands (`workspace_regions`) and each chunk's T (io);
    the per-chunk state gradients and dv_new (io); the per-output-head gradients in fp32 (dw in the io
    dtype: an operand), the erase key's and d gamma's staged terms, the raw gate's gradient, beta's
    ([T, HO] for KDA, [T, HO, K] for GDN-2), GDN-2's write gate's; the per-chunk shares of d_a_log and
    d_dt_bias; the spare."""
    t, ho, k, v, io, f32 = cfg.tokens, cfg.heads_out, cfg.key_dim, cfg.value_dim, cfg.io_dtype, "float32"
    slots = prepare_slots(cfg)
    gdn2 = cfg.op == "gdn2"
    rows = [
        ("glast", f32, (slots, ho, k)), ("qd", io, (t, ho, k)), ("kd", io, (t, ho, k)), ("w", io, (t, ho, k)),
        ("u", io, (t, ho, v)), ("p", io, (t, ho, CHUNK)), ("t", io, (slots, ho, CHUNK, CHUNK)),
        ("hs", io, (slots, ho, v, k)), ("vnew", io, (t, ho, v)), ("dh", io, (slots, ho, v, k)),
        ("dvnew", io, (t, ho, v)), ("dq", f32, (t, ho, k)), ("dk", f32, (t, ho, k)), ("dw", io, (t, ho, k)),
        ("de", f32, (t, ho, k)), ("dgp", f32, (t, ho, k)), ("dg", f32, (t, ho, k)), ("dv", f32, (t, ho, v)),
        ("db", f32, (t, ho, k) if gdn2 else (t, ho)), ("dwg", f32, (t, ho, v) if gdn2 else (1,)),
        ("pa", f32, (slots, ho, k)), ("pb", f32, (slots, ho, k)),
    ]  # fmt: skip
    return layout_regions([*rows, ("spare", "float32", (64,))])


def compiled_backward(key: KdaSm90BwdKey, arch: str = ARCH) -> Any:
    """The compiled backward for ``key``, kept as `compiled_forward` keeps the forward."""
    return compiled(key, arch, BWD_FN_NAME, _compile_backward)


def _compile_backward(key: KdaSm90BwdKey, arch: str) -> Any:
    from pygraph_linear_attention.kda.sm90_bwd import KdaSm90Bwd

    kernel = KdaSm90Bwd(
        key_dim=key.key_dim, value_dim=key.value_dim, block_v=key.block_v, io_dtype=key.io_dtype,
        beta_dtype=key.beta_dtype, h0_dtype=key.h0_dtype, cu_dtype=key.cu_dtype, gdn2=key.gdn2,
        l2norm=key.l2norm, beta_sigmoid=key.beta_sigmoid, neg_eigval=key.neg_eigval, safe_gate=key.safe_gate,
        has_a_log=key.has_a_log, has_dt_bias=key.has_dt_bias, lower_bound=key.lower_bound, has_h0=key.has_h0,
        has_dht=key.has_dht, direct_qk=key.direct_qk, direct_v=key.direct_v, stages=key.stages,
        direct_g=key.direct_g, direct_beta=key.direct_beta, direct_w=key.direct_w,
    )  # fmt: skip
    io, f32 = key.io_dtype, "float32"
    gate_align = _gate_align(key.gdn2)
    pointers = [
        # q k v g beta w_gate a_log dt_bias cu_seqlens h0 dO dht
        (io, 16), (io, 16), (io, 16), (f32, 4), (key.beta_dtype, gate_align), (io, gate_align), (f32, 4), (f32, 4),
        ("cu", 4),
        (key.h0_dtype, 4), (io, 16), (key.dht_dtype, 4),
        # dQ dK dV dG dBeta dW d_initial_state d_a_log d_dt_bias
        (io, 16), (io, 16), (io, 16), (key.dg_dtype, 2), (key.dbeta_dtype, 2), (key.dw_dtype, 2),
        (key.dh0_dtype, 4), (key.da_log_dtype, 2), (key.ddt_bias_dtype, 2),
        # the workspace: glast qd kd w u p t hs vnew dh dvnew
        (f32, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16), (io, 16),
        (io, 16),
        # dq dk dw de dgp dg dv db dwg pa pb
        (f32, 16), (f32, 16), (io, 16), (f32, 16), (f32, 16), (f32, 16), (f32, 16), (f32, 16), (f32, 16),
        (f32, 16), (f32, 16),
    ]  # fmt: skip
    return cute_compile(kernel, pointers, key.cu_dtype, 11, arch, roles=BWD_POINTERS)
