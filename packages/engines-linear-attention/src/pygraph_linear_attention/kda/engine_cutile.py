"""``kda_cutile`` / ``gdn2_cutile`` and ``kda_cutile_bwd`` / ``gdn2_cutile_bwd``: the ``kda`` and
``gdn2`` families' portable forward and backward (cuTile).

The forwards run ``kernels/kda_cutile_fwd.py`` (the chunk table, ``kda_prepare_kernel`` and
``kda_scan_kernel``) through ``kda_cutile_host``, the backwards ``kernels/kda_cutile_bwd.py``
through ``kda_cutile_bwd_host``; the two ops differ in the graphs they take (a ``kda`` node: beta
[T, HB]; a ``gdn2`` node: beta [T, HB, K] and the write gate w [T, HW, V]). The plan is
gdn_cutile's (`engines.cutile.GdnCutilePlan`: the declared geometry checked per call, device
arrays over the pack's pointers and the workspace's regions, the kernels enqueued on the call's
stream). They ship opt-in (``PYGRAPH_ENABLE_OPT_IN_ENGINES``) until their device suite has run.
"""

from __future__ import annotations

import math
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.gdn.engine_cutile import (
    _INSTALL,
    _IO,
    HEAD_DIMS,
    GdnCutilePlan,
    _cutile_installed,
    _cutile_launch,
    declared_operands,
    facts_of,
)
from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig, launch_backward
from pygraph_linear_attention.kda.cutile_host import (
    BLOCK_V,
    DEFAULT_LOWER_BOUND,
    KdaCutileConfig,
    launch_forward,
)

__all__ = [
    "BLOCK_V",
    "Gdn2CutileBwdEngine",
    "Gdn2CutileEngine",
    "KdaCutileBwdEngine",
    "KdaCutileEngine",
    "config_for",
]

_FEATURES = frozenset(
    {
        "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "gate_lower_bound", "initial_state",
        "final_state", "gva", "gqa",
    }
)  # fmt: skip


def _count(t: Any) -> int:
    return math.prod(int(d) for d in t.dim)


def _heads(t: Any) -> int:
    """A per-token gate's head count ([T, heads, ...]); a parameter's ([heads] or [heads, K])."""
    return int(t.dim[1]) if len(t.dim) >= 2 else int(t.dim[0])


def _support_reason(facts: LinearAttentionFacts, op: str, backward: bool = False) -> str | None:
    """Why the ``op`` cuTile forward (or, with ``backward``, backward) cannot serve these facts (the
    rule and the value), or None."""
    served = f"{op}_bwd" if backward else op
    if facts.op != op or facts.backward != backward:
        this = f"{facts.op}_bwd" if facts.backward else facts.op
        other = f"{facts.op}_cutile_bwd" if facts.backward else f"{facts.op}_cutile"
        return f"serves {served} graphs, this is a {this} graph (served by {other})"
    if facts.stray_nodes:
        return f"serves a lone {facts.node.op} node; the graph also has {list(facts.stray_nodes)}"
    q, k, v = facts.dtypes
    if q not in _IO or k is not q or v is not q:
        return f"q, k and v must all be BFLOAT16 or all HALF, got {[getattr(d, 'name', d) for d in facts.dtypes]}"
    if facts.gate_dtype is not data_type.FLOAT:
        return f"g must be FLOAT, got {getattr(facts.gate_dtype, 'name', None)}"
    if facts.beta_dtype not in (data_type.FLOAT, q):
        return f"beta must be FLOAT or the io dtype {q.name}, got {getattr(facts.beta_dtype, 'name', None)}"
    if facts.head_dim_k not in HEAD_DIMS or facts.head_dim_v not in HEAD_DIMS:
        return f"head dims K={facts.head_dim_k}, V={facts.head_dim_v}: each must be one of {HEAD_DIMS}"
    if facts.tokens < 1 or facts.sequences < 1:
        return f"needs at least one token and one sequence, got T={facts.tokens}, N={facts.sequences}"
    ho = facts.heads_out
    if ho % facts.heads_qk or ho % facts.heads_v:
        return f"q/k heads {facts.heads_qk} and v heads {facts.heads_v} must both divide the output's {ho}"
    if facts.gate_domain is not None:
        return f"gate_domain={facts.gate_domain!r} is not served (g is the log decay)"
    node = facts.node
    gates = {"g": facts.head_dim_k, "beta": facts.head_dim_k if op == "gdn2" else None}
    if op == "gdn2":
        gates["w"] = facts.head_dim_v
        w = node.inputs.get("w")
        if w is None or w.data_type is not q:
            return f"w (the write gate) must be the io dtype {q.name}, got {getattr(getattr(w, 'data_type', None), 'name', None)}"
    for port, channels in gates.items():
        t = node.inputs[port]
        if channels is not None and (len(t.dim) != 3 or int(t.dim[2]) != channels):
            return f"{port} must be [T, heads, {channels}] (one value per channel), got {[int(d) for d in t.dim]}"
        if ho % _heads(t):
            return f"{port} has {_heads(t)} heads, which does not divide the output's {ho}"
    a_log, dt_bias = node.inputs.get("a_log"), node.inputs.get("dt_bias")
    if not facts.safe_gate and (a_log is not None or dt_bias is not None):
        return "a_log and dt_bias are read only with safe_gate=True"
    for port, t, per in (("a_log", a_log, 1), ("dt_bias", dt_bias, facts.head_dim_k)):
        if t is None:
            continue
        if len(t.dim) != (1 if port == "a_log" else 2):
            layout = "[heads]" if port == "a_log" else "[heads, K]"
            return f"{port} must be {layout}, got {[int(d) for d in t.dim]}"
        if t.data_type not in (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF):
            return f"{port} must be FLOAT, BFLOAT16 or HALF, got {t.data_type.name}"
        if _count(t) % per or ho % (_count(t) // per):
            return f"{port} has {_count(t)} values: {per} per head for heads dividing the output's {ho}"
    bound = node.params.get("gate_lower_bound")
    if bound is not None and not (isinstance(bound, (int, float)) and -math.inf < float(bound) < 0):
        return f"gate_lower_bound must be a negative finite float, got {bound!r}"
    reason = _backward_reason(node, q, op) if backward else None
    if reason is not None:
        return reason
    state = None if backward else node.outputs.get("final_state")
    if (
        facts.output_final_state
        and state is not None
        and state.data_type not in (data_type.FLOAT, data_type.BFLOAT16)
    ):
        return f"final_state must be FLOAT or BFLOAT16, got {state.data_type.name}"
    for role, t in _operands(facts).items():
        stride = tuple(t.stride or ())
        if stride and stride[-1] != 1 and t.dim[-1] != 1:
            return f"operand {role} ({t.name}) must have a contiguous last dim, got stride {list(stride)}"
    return None


def _backward_reason(node: Any, io: Any, op: str) -> str | None:
    """The backward's own rules: dO in the io dtype, each gradient in a dtype its store can write."""
    d_o = node.inputs["dO"]
    if d_o.data_type is not io:
        return f"dO must be the io dtype {io.name}, got {d_o.data_type.name}"
    floats = (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF)
    ports = ("dQ", "dK", "dV", "dG", "dBeta", *(("dW",) if op == "gdn2" else ()), "d_initial_state", "d_a_log",
             "d_dt_bias")  # fmt: skip
    for port in ports:
        out = node.outputs.get(port)
        allowed = (io,) if port in ("dQ", "dK", "dV") else floats[:2] if port == "d_initial_state" else floats
        if out is not None and out.data_type not in allowed:
            return f"{port} must be one of {[d.name for d in allowed]}, got {out.data_type.name}"
    state = node.inputs.get("d_final_state")
    if state is not None and state.data_type not in floats[:2]:
        return f"d_final_state must be FLOAT or BFLOAT16, got {state.data_type.name}"
    return None


def _operands(facts: LinearAttentionFacts) -> dict[str, Any]:
    """The node's tensors by kernel role (absent optionals left out)."""
    node = facts.node
    if facts.backward:
        roles = {
            "q": node.inputs["q"], "k": node.inputs["k"], "v": node.inputs["v"], "g": node.inputs["g"],
            "beta": node.inputs["beta"], "w_gate": node.inputs.get("w"), "cu_seqlens": node.inputs["cu_seqlens"],
            "dO": node.inputs["dO"], "a_log": node.inputs.get("a_log"), "dt_bias": node.inputs.get("dt_bias"),
            "h0": node.inputs.get("initial_state"), "dht": node.inputs.get("d_final_state"),
            **{p: node.outputs.get(p) for p in ("dQ", "dK", "dV", "dG", "dBeta", "dW", "d_a_log", "d_dt_bias")},
            "dh0": node.outputs.get("d_initial_state"),
        }  # fmt: skip
        return {role: t for role, t in roles.items() if t is not None}
    roles = {
        "q": node.inputs["q"], "k": node.inputs["k"], "v": node.inputs["v"], "g": node.inputs["g"],
        "beta": node.inputs["beta"], "w_gate": node.inputs.get("w"), "cu_seqlens": node.inputs["cu_seqlens"],
        "a_log": node.inputs.get("a_log"), "dt_bias": node.inputs.get("dt_bias"),
        "h0": node.inputs.get("initial_state"), "o": node.outputs["O"],
        "ht": node.outputs.get("final_state") if facts.output_final_state else None,
    }  # fmt: skip
    return {role: t for role, t in roles.items() if t is not None}


def config_for(facts: LinearAttentionFacts, block_v: int) -> KdaCutileConfig:
    """The kernels' view of a supported kda or gdn2 forward graph, ``block_v`` value rows a program."""
    node = facts.node
    a_log, dt_bias, w = node.inputs.get("a_log"), node.inputs.get("dt_bias"), node.inputs.get("w")
    bound = node.params.get("gate_lower_bound")
    backward = {"has_d_final_state": facts.output_final_state} if facts.backward else {}
    return (KdaCutileBwdConfig if facts.backward else KdaCutileConfig)(
        op=facts.op, tokens=facts.tokens, sequences=facts.sequences, heads_qk=facts.heads_qk,
        heads_v=facts.heads_v, key_dim=facts.head_dim_k, value_dim=facts.head_dim_v,
        io_dtype=_IO[facts.dtypes[0]], scale=facts.scale if facts.scale is not None else facts.head_dim_k**-0.5,
        heads_g=_heads(node.inputs["g"]), heads_beta=_heads(node.inputs["beta"]),
        heads_w=_heads(w) if w is not None else 0, heads_a_log=_count(a_log) if a_log is not None else 0,
        heads_dt_bias=_count(dt_bias) // facts.head_dim_k if dt_bias is not None else 0,
        use_qk_l2norm=facts.use_qk_l2norm, use_beta_sigmoid=facts.use_beta_sigmoid,
        allow_neg_eigval=facts.allow_neg_eigval, safe_gate=facts.safe_gate,
        has_a_log=facts.safe_gate and a_log is not None, has_dt_bias=facts.safe_gate and dt_bias is not None,
        gate_lower_bound=DEFAULT_LOWER_BOUND if bound is None else float(bound),
        has_initial_state=facts.initial_state, output_final_state=facts.output_final_state and not facts.backward,
        block_v=block_v, **backward,
    )  # fmt: skip


class KdaCutileEngine(BaseEngine):
    """``kda_cutile``: kda (forward) graphs."""

    name = "kda_cutile"
    op = "kda"
    serves_backward = False
    capabilities = Capabilities(
        sm_lo=80,
        sm_hi=121,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def _block_v(self, facts: LinearAttentionFacts, plan: PlanConfig) -> int:
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v = knobs.get("BLOCK_V", BLOCK_V[0])
        reason = self.capabilities.mismatch(facts, knobs)
        if reason is None and facts.head_dim_v % block_v:
            reason = f"BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        return block_v

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = _support_reason(facts, self.op, self.serves_backward) or self.capabilities.mismatch(
            facts, device=request.device
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if not _cutile_installed():
            raise ImportError(f"{self.name}: needs cuTile ({_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        return config_for(facts, self._block_v(facts, plan)).workspace_bytes

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        cfg = config_for(facts, self._block_v(facts, plan))
        launch = _cutile_launch()
        positions, declared = declared_operands(self.name, request, _operands(facts))
        if facts.backward:
            from pygraph_linear_attention.kda.cutile_bwd import BWD_KERNELS as kernels

            run = launch_backward
        else:
            from pygraph_linear_attention.kda.cutile_fwd import KERNELS as kernels

            run = launch_forward
        return GdnCutilePlan(
            request.graph.name, cfg, positions, declared, launch, kernels, run, engine=self.name
        )


class Gdn2CutileEngine(KdaCutileEngine):
    """``gdn2_cutile``: gdn2 (forward) graphs, the same kernels with GDN-2's gates."""

    name = "gdn2_cutile"
    op = "gdn2"


class KdaCutileBwdEngine(KdaCutileEngine):
    """``kda_cutile_bwd``: kda_bwd graphs (the backward's kernels, `kernels/kda_cutile_bwd.py`)."""

    name = "kda_cutile_bwd"
    serves_backward = True


class Gdn2CutileBwdEngine(KdaCutileBwdEngine):
    """``gdn2_cutile_bwd``: gdn2_bwd graphs."""

    name = "gdn2_cutile_bwd"
    op = "gdn2"
