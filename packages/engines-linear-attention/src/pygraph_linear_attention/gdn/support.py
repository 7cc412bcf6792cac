"""What gdn's engines (`gdn.engine_cutile`, `gdn.engine_sm90`) decide support and bind from: the
features they serve, gdn's own rules on top of the shared ones (`common.support`), and the kernels'
view of the problem (`GdnCutileConfig`; the CuTe DSL hosts take it too).
"""

from __future__ import annotations

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
from pygraph_linear_attention.gdn.cutile_bwd_host import GdnCutileBwdConfig
from pygraph_linear_attention.gdn.cutile_host import GdnCutileConfig

__all__ = ["FEATURES", "config_for", "support_reason"]

FEATURES = frozenset(
    {"qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "initial_state", "final_state", "gva", "gqa"}
)


def support_reason(facts: LinearAttentionFacts) -> str | None:
    """Why gdn's kernels cannot serve these facts (the rule and the value), or None: the shared rules
    and gdn's own (g and beta one value per token and head, a_log required by the safe gate, the
    parameters' heads dividing the output's)."""
    if facts.op != "gdn":
        return f"serves gdn graphs, this is a {facts.op} graph"
    reason = (
        tensors_reason(facts)
        or _gates_reason(facts)
        or parameters_reason(facts)
        or _parameter_sizes_reason(facts)
    )
    if reason is not None:
        return reason
    if facts.backward:
        reason = gradients_reason(facts)
    else:
        reason = final_state_reason(facts)
    return reason or layout_reason(operand_roles(facts))


def _gates_reason(facts: LinearAttentionFacts) -> str | None:
    """g's and beta's heads dividing the output's; the safe gate's a_log given."""
    node, ho = facts.node, facts.heads_out
    for port in ("g", "beta"):
        heads = heads_of(node.inputs[port])
        if ho % heads:
            return f"{port} has {heads} heads, which does not divide the output's {ho}"
    if facts.safe_gate and node.inputs.get("a_log") is None:
        return "safe_gate needs a_log (the per-head log decay rate)"
    return None


def _parameter_sizes_reason(facts: LinearAttentionFacts) -> str | None:
    """a_log's and dt_bias's values (one per head they serve) dividing the output's heads."""
    node, ho = facts.node, facts.heads_out
    for port in ("a_log", "dt_bias"):
        t = node.inputs.get(port)
        if t is not None and ho % element_count(t):
            return f"{port} has {element_count(t)} values, which does not divide the output's {ho} heads"
    return None


def config_for(facts: LinearAttentionFacts, block_v: int, segment: int = 0) -> GdnCutileConfig:
    """The kernels' view of a supported gdn or gdn_bwd graph (a `GdnCutileBwdConfig` for the
    backward), for ``block_v`` value rows per scan program and ``segment`` chunks per segment of
    the cuTile split scans (0: none)."""
    node = facts.node
    a_log, dt_bias = node.inputs.get("a_log"), node.inputs.get("dt_bias")
    extra = {"has_d_final_state": facts.output_final_state} if facts.backward else {}
    return (GdnCutileBwdConfig if facts.backward else GdnCutileConfig)(
        tokens=facts.tokens, sequences=facts.sequences, heads_qk=facts.heads_qk, heads_v=facts.heads_v,
        heads_g=heads_of(node.inputs["g"]), heads_beta=heads_of(node.inputs["beta"]),
        heads_a_log=element_count(a_log) if a_log is not None else 1,
        heads_dt_bias=element_count(dt_bias) if dt_bias is not None else 1,
        key_dim=facts.head_dim_k, value_dim=facts.head_dim_v, io_dtype=IO_DTYPES[facts.dtypes[0]],
        scale=facts.scale if facts.scale is not None else facts.head_dim_k**-0.5,
        use_qk_l2norm=facts.use_qk_l2norm, use_beta_sigmoid=facts.use_beta_sigmoid,
        allow_neg_eigval=facts.allow_neg_eigval, safe_gate=facts.safe_gate,
        has_dt_bias=facts.safe_gate and dt_bias is not None, has_initial_state=facts.initial_state,
        output_final_state=facts.output_final_state and not facts.backward, block_v=block_v, segment=segment,
        **extra,
    )  # fmt: skip
