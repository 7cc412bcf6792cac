"""What kda's and gdn2's engines (`kda.engine_cutile`, `kda.engine_sm90`) decide support and bind
from: the features they serve, the ops' own rules on top of the shared ones (`common.support`), and
the kernels' view of the problem (`KdaCutileConfig`; the CuTe DSL hosts take it too). The two ops
differ in the graphs they take: a ``kda`` node's beta is [T, HB]; a ``gdn2`` node's beta is
[T, HB, K] and it has the write gate w [T, HW, V].
"""

from __future__ import annotations

import math

from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.common.support import (
    IO_DTYPES,
    element_count,
    final_state_reason,
    gradients_reason,
    heads_of,
    layout_reason,
    operand_roles,
    parameters_reason,
    tensors_reason,
)
from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig
from pygraph_linear_attention.kda.cutile_host import DEFAULT_LOWER_BOUND, KdaCutileConfig

__all__ = ["FEATURES", "config_for", "support_reason"]

FEATURES = frozenset(
    {
        "qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "gate_lower_bound", "initial_state",
        "final_state", "gva", "gqa",
    }
)  # fmt: skip


def support_reason(facts: LinearAttentionFacts, op: str, backward: bool = False) -> str | None:
    """Why the ``op`` (kda or gdn2) kernels' forward (or, with ``backward``, backward) cannot serve
    these facts (the rule and the value), or None."""
    served = f"{op}_bwd" if backward else op
    if facts.op != op or facts.backward != backward:
        this = f"{facts.op}_bwd" if facts.backward else facts.op
        other = f"{facts.op}_cutile_bwd" if facts.backward else f"{facts.op}_cutile"
        return f"serves {served} graphs, this is a {this} graph (served by {other})"
    reason = (
        tensors_reason(facts)
        or _gates_reason(facts, op)
        or parameters_reason(facts)
        or _parameter_layouts_reason(facts)
    )
    if reason is not None:
        return reason
    if backward:
        reason = gradients_reason(facts, ("dW",) if op == "gdn2" else ())
    else:
        reason = final_state_reason(facts)
    return reason or layout_reason(operand_roles(facts))


def _gates_reason(facts: LinearAttentionFacts, op: str) -> str | None:
    """g one value per key channel, beta per token (kda) or per key channel (gdn2), gdn2's write
    gate per value channel in the io dtype; each gate's heads dividing the output's."""
    node, q, ho = facts.node, facts.dtypes[0], facts.heads_out
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
        if ho % heads_of(t):
            return f"{port} has {heads_of(t)} heads, which does not divide the output's {ho}"
    return None


def _parameter_layouts_reason(facts: LinearAttentionFacts) -> str | None:
    """a_log [heads] and dt_bias [heads, K], their heads dividing the output's; the safe gate's
    lower bound a negative finite float."""
    node, ho = facts.node, facts.heads_out
    for port, per in (("a_log", 1), ("dt_bias", facts.head_dim_k)):
        t = node.inputs.get(port)
        if t is None:
            continue
        if len(t.dim) != (1 if port == "a_log" else 2):
            layout = "[heads]" if port == "a_log" else "[heads, K]"
            return f"{port} must be {layout}, got {[int(d) for d in t.dim]}"
        count = element_count(t)
        if count % per or ho % (count // per):
            return f"{port} has {count} values: {per} per head for heads dividing the output's {ho}"
    bound = node.params.get("gate_lower_bound")
    if bound is not None and not (isinstance(bound, (int, float)) and -math.inf < float(bound) < 0):
        return f"gate_lower_bound must be a negative finite float, got {bound!r}"
    return None


def config_for(facts: LinearAttentionFacts, block_v: int) -> KdaCutileConfig:
    """The kernels' view of a supported kda or gdn2 graph (a `KdaCutileBwdConfig` for the backward),
    ``block_v`` value rows a scan program."""
    node = facts.node
    a_log, dt_bias, w = node.inputs.get("a_log"), node.inputs.get("dt_bias"), node.inputs.get("w")
    bound = node.params.get("gate_lower_bound")
    backward = {"has_d_final_state": facts.output_final_state} if facts.backward else {}
    return (KdaCutileBwdConfig if facts.backward else KdaCutileConfig)(
        op=facts.op, tokens=facts.tokens, sequences=facts.sequences, heads_qk=facts.heads_qk,
        heads_v=facts.heads_v, key_dim=facts.head_dim_k, value_dim=facts.head_dim_v,
        io_dtype=IO_DTYPES[facts.dtypes[0]], scale=facts.scale if facts.scale is not None else facts.head_dim_k**-0.5,
        heads_g=heads_of(node.inputs["g"]), heads_beta=heads_of(node.inputs["beta"]),
        heads_w=heads_of(w) if w is not None else 0, heads_a_log=element_count(a_log) if a_log is not None else 0,
        heads_dt_bias=element_count(dt_bias) // facts.head_dim_k if dt_bias is not None else 0,
        use_qk_l2norm=facts.use_qk_l2norm, use_beta_sigmoid=facts.use_beta_sigmoid,
        allow_neg_eigval=facts.allow_neg_eigval, safe_gate=facts.safe_gate,
        has_a_log=facts.safe_gate and a_log is not None, has_dt_bias=facts.safe_gate and dt_bias is not None,
        gate_lower_bound=DEFAULT_LOWER_BOUND if bound is None else float(bound),
        has_initial_state=facts.initial_state, output_final_state=facts.output_final_state and not facts.backward,
        block_v=block_v, **backward,
    )  # fmt: skip
