"""``kda_cutile`` and ``gdn2_cutile``: the ``kda`` and ``gdn2`` families' portable forward (cuTile).

Both run ``kernels/kda_cutile_fwd.py`` (the chunk table, ``kda_prepare_kernel`` and
``kda_scan_kernel``) through ``kda_cutile_host``; they differ in the graphs they take (a ``kda``
node: beta [T, HB]; a ``gdn2`` node: beta [T, HB, K] and the write gate w [T, HW, V]). The plan is
gdn_cutile's (`engines.cutile.GdnCutilePlan`: the declared geometry checked per call, device
arrays over the pack's pointers and the workspace's regions, the kernels enqueued on the call's
stream). The backwards have no cuTile engine yet, and the forwards ship opt-in
(``PYGRAPH_ENABLE_OPT_IN_ENGINES``) until their device suite has run.
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
from pygraph_linear_attention.engines.cutile import (
    _INSTALL,
    _IO,
    _NAMES,
    HEAD_DIMS,
    GdnCutilePlan,
    _cutile_installed,
    _cutile_launch,
    facts_of,
)
from pygraph_linear_attention.kernels.kda_cutile_host import (
    DEFAULT_LOWER_BOUND,
    KdaCutileConfig,
    launch_forward,
)

__all__ = ["BLOCK_V", "Gdn2CutileEngine", "KdaCutileEngine", "config_for"]

BLOCK_V = (64, 32)  # knob BLOCK_V: value rows of the state one scan program carries
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


def _support_reason(facts: LinearAttentionFacts, op: str) -> str | None:
    """Why the ``op`` cuTile forward cannot serve these facts (the rule and the value), or None."""
    if facts.op != op:
        return f"serves {op} graphs, this is a {facts.op} graph"
    if facts.backward:
        return f"serves the {op} forward; {op}_bwd has no cuTile engine yet"
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
        if t.data_type not in (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF):
            return f"{port} must be FLOAT, BFLOAT16 or HALF, got {t.data_type.name}"
        if _count(t) % per or ho % (_count(t) // per):
            return f"{port} has {_count(t)} values: {per} per head for heads dividing the output's {ho}"
    bound = node.params.get("gate_lower_bound")
    if bound is not None and not (isinstance(bound, (int, float)) and -math.inf < float(bound) < 0):
        return f"gate_lower_bound must be a negative finite float, got {bound!r}"
    state = node.outputs.get("final_state")
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


def _operands(facts: LinearAttentionFacts) -> dict[str, Any]:
    """The node's tensors by kernel role (absent optionals left out)."""
    node = facts.node
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
    return KdaCutileConfig(
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
        has_initial_state=facts.initial_state, output_final_state=facts.output_final_state, block_v=block_v,
    )  # fmt: skip


class KdaCutileEngine(BaseEngine):
    """``kda_cutile``: kda (forward) graphs."""

    name = "kda_cutile"
    op = "kda"
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
        reason = _support_reason(facts, self.op) or self.capabilities.mismatch(facts, device=request.device)
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
        layout = request.layout
        positions = {role: layout.position(t) for role, t in _operands(facts).items()}
        declared = {role: layout.declared[p] for role, p in positions.items()}
        for role, d in declared.items():
            if d.dtype not in _NAMES:
                raise GraphNotSupportedError(
                    f"{self.name}: operand {role} has dtype {d.dtype.name}, not served"
                )
        from pygraph_linear_attention.kernels.kda_cutile_fwd import KERNELS

        return GdnCutilePlan(
            request.graph.name, cfg, positions, declared, launch, KERNELS, launch_forward, engine=self.name
        )


class Gdn2CutileEngine(KdaCutileEngine):
    """``gdn2_cutile``: gdn2 (forward) graphs, the same kernels with GDN-2's gates."""

    name = "gdn2_cutile"
    op = "gdn2"
