"""Read a linear-attention graph (gdn, kda, gdn2 and their backwards) once into facts.

The six ops share their layout (THD: q/k [T, H, K], v [T, HV, V], a required ``cu_seqlens``
[N + 1]) and their flags, so one analyzer serves the three families. Facts describe; they never
reject: an option a kernel does not serve is a name in ``features``, and the engine's
capabilities turn it into a decline with the reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pygraph.node_types import NodeType

__all__ = ["ANCHORS", "LinearAttentionFacts", "analyze"]

# anchor node type -> (op, is the backward)
ANCHORS: dict[NodeType, tuple[str, bool]] = {
    NodeType.GDN: ("gdn", False),
    NodeType.GDN_BWD: ("gdn", True),
    NodeType.KDA: ("kda", False),
    NodeType.KDA_BWD: ("kda", True),
    NodeType.GDN2: ("gdn2", False),
    NodeType.GDN2_BWD: ("gdn2", True),
}

# boolean attribute -> the feature it names when set
_FLAG_FEATURES = {
    "use_qk_l2norm": "qk_l2norm",
    "use_beta_sigmoid": "beta_sigmoid",
    "allow_neg_eigval": "neg_eigval",
    "safe_gate": "safe_gate",
    "output_final_state": "final_state",
}


@dataclasses.dataclass(frozen=True)
class LinearAttentionFacts:
    """One linear-attention node, as written in the graph."""

    node: Any
    op: str  # gdn | kda | gdn2
    backward: bool
    tokens: int  # T
    sequences: int  # N, from cu_seqlens' length
    heads_qk: int  # H
    heads_v: int  # HV
    heads_out: int  # HO = max(H, HV)
    head_dim_k: int  # K
    head_dim_v: int  # V
    dtypes: tuple[Any, ...]  # q, k, v (what Capabilities.mismatch reads)
    gate_dtype: Any
    beta_dtype: Any
    state_dtype: Any  # of initial_state, or None without one
    cu_seqlens_dtype: Any
    scale: float | None  # None: K ** -0.5
    use_qk_l2norm: bool
    use_beta_sigmoid: bool
    allow_neg_eigval: bool
    safe_gate: bool
    initial_state: bool
    output_final_state: bool  # the forward's flag; a backward: d_final_state is given
    gate_domain: Any  # the gate_domain attribute as given (None: the op's default)
    features: frozenset[str]
    stray_nodes: tuple[str, ...]  # nodes other than the linear-attention node
    sm: int | None = None
    # the max_seqlen attribute (the longest sequence's tokens, at most T), None where not given: the
    # ranking's hint; no plan relies on it
    max_seqlen: int | None = None

    @property
    def gva_ratio(self) -> int | None:
        """Output heads per q/k head (1: every head has its own q/k), None when H does not divide HO."""
        if self.heads_qk <= 0 or self.heads_out % self.heads_qk:
            return None
        return self.heads_out // self.heads_qk


def _dims(tensor: Any) -> tuple[int, ...]:
    return tuple(tensor.dim) if tensor is not None and tensor.dim else ()


def _dtype(tensor: Any) -> Any:
    return tensor.data_type if tensor is not None else None


def analyze(graph: Any) -> LinearAttentionFacts:
    """Parse the graph once. Reads its first linear-attention node; every other node is a stray."""
    anchors = [n for n in graph.nodes if n.type in ANCHORS]
    if not anchors:
        raise ValueError(f"linear-attention analyzer: graph {graph.name!r} has no gdn, kda or gdn2 node")
    node = anchors[0]
    op, backward = ANCHORS[node.type]
    inputs, params = node.inputs, node.params
    q, k, v, cu = inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens"]
    qd, vd, cud = _dims(q), _dims(v), _dims(cu)
    heads_qk, heads_v = (qd[1] if len(qd) > 1 else 0), (vd[1] if len(vd) > 1 else 0)
    initial = inputs.get("initial_state")
    final = inputs.get("d_final_state") is not None if backward else bool(params.get("output_final_state"))
    flags = {name: bool(params.get(name)) for name in _FLAG_FEATURES if name != "output_final_state"}
    features = {feature for name, feature in _FLAG_FEATURES.items() if flags.get(name)}
    if final:
        features.add("final_state")
    if initial is not None:
        features.add("initial_state")
    if heads_qk != heads_v:
        features.add("gva" if heads_v > heads_qk else "gqa")
    if params.get("gate_domain") is not None:
        features.add("gate_domain")
    if params.get("gate_lower_bound") is not None:
        features.add("gate_lower_bound")
    return LinearAttentionFacts(
        node=node,
        op=op,
        backward=backward,
        tokens=qd[0] if qd else 0,
        sequences=cud[0] - 1 if cud else 0,
        heads_qk=heads_qk,
        heads_v=heads_v,
        heads_out=max(heads_qk, heads_v),
        head_dim_k=qd[-1] if qd else 0,
        head_dim_v=vd[-1] if vd else 0,
        dtypes=tuple(_dtype(t) for t in (q, k, v)),
        gate_dtype=_dtype(inputs["g"]),
        beta_dtype=_dtype(inputs["beta"]),
        state_dtype=_dtype(initial),
        cu_seqlens_dtype=_dtype(cu),
        scale=params.get("scale"),
        **flags,
        initial_state=initial is not None,
        output_final_state=final,
        gate_domain=params.get("gate_domain"),
        features=frozenset(features),
        stray_nodes=tuple(n.name for n in graph.nodes if n is not node),
        sm=getattr(graph, "sm_version", None) or None,
        max_seqlen=min(params["max_seqlen"], qd[0]) if params.get("max_seqlen") and qd else None,
    )
