"""Read an ``sdpa_fwd`` or ``sdpa_bwd`` graph once into facts: shapes, dtypes, masks, layout, requests.

One analyzer serves both families: the forward's node (SDPA) and the backward's (SDPA_BWD) share
their ports and mask attributes. Facts describe; they never reject. What a kernel may not serve
(dropout, a bias, paged KV, a score modifier, ...) is a name in ``features``, and an engine's
capabilities turn it into a decline with the reason.

The masks are resolved the way the backend reads the attributes: ``use_causal_mask`` /
``use_causal_mask_bottom_right`` fix the right bound at 0 and the alignment;
``diagonal_band_left_bound`` overrides ``sliding_window_length``. Bounds count as the backend's
do (see `pygraph_sdpa.reference`): ``window_left`` keys visible including the diagonal one,
``window_right`` keys past it (0 is causal), None unbounded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pygraph.ir.tensor import Tensor
from pygraph.node_types import NodeType

__all__ = ["ANCHORS", "SdpaFacts", "analyze"]

ANCHORS = (NodeType.SDPA, NodeType.SDPA_BWD)

# optional input port -> the feature it names when it is wired
_PORT_FEATURES = {
    "bias": "bias",
    "block_mask": "block_mask",
    "paged_attention_k_table": "paged_kv",
    "paged_attention_v_table": "paged_kv",
    "sink_token": "sink_token",
}
# keyword outputs (given by the caller, written by the op) -> the feature they name
_OUTPUT_FEATURES = {
    "rng_dump": "rng_dump",
    "score_max": "score_max",
    "score_sum_exp": "score_sum_exp",
    "dBias": "bias_grad",
    "dSink_token": "sink_token",
}


@dataclasses.dataclass(frozen=True)
class SdpaFacts:
    """One attention node, as written in the graph. Dims are the graph's [B, H, S, D]."""

    node: Any
    backward: bool
    q: Any
    k: Any
    v: Any
    o: Any  # the forward's O (an output of SDPA, an input of SDPA_BWD)
    stats: Any  # the forward's Stats output if requested, the backward's stats input; else None
    batch: int
    heads_q: int
    heads_k: int
    heads_v: int
    seq_q: int
    seq_kv: int
    head_dim_qk: int
    head_dim_v: int
    dtypes: tuple[Any, ...]  # q, k, v (what Capabilities.mismatch reads)
    causal: bool  # the right bound is 0
    bottom_right: bool  # the diagonal is aligned bottom-right (only meaningful with a bound)
    window_left: int | None
    window_right: int | None
    padded: bool  # per-sequence lengths (seq_len_q / seq_len_kv) mask the dense batch
    ragged: bool  # THD: ragged offsets on q/k/v or cu_seq_len ports
    stats_requested: bool
    dropout: bool
    scale: float | None  # attn_scale as a number; None when not given (the op's default) or a tensor
    scale_is_tensor: bool
    deterministic: bool  # the backward's use_deterministic_algorithm
    features: frozenset[str]
    stray_nodes: tuple[str, ...]  # nodes other than the attention node
    sm: int | None = None

    @property
    def gqa_ratio(self) -> int | None:
        """Query heads per K head (1: plain attention, heads_q: MQA), None when K's heads do not divide."""
        if self.heads_k <= 0 or self.heads_q % self.heads_k:
            return None
        return self.heads_q // self.heads_k


def _dims(tensor: Any) -> tuple[int, ...]:
    return tuple(tensor.dim) if tensor is not None and tensor.dim else ()


def _mask(params: Any) -> tuple[bool, bool, int | None, int | None]:
    """(causal, bottom_right, window_left, window_right) from the node's attributes."""
    causal_tl = bool(params.get("use_causal_mask"))
    causal_br = bool(params.get("use_causal_mask_bottom_right"))
    right = 0 if (causal_tl or causal_br) else params.get("diagonal_band_right_bound")
    left = params.get("diagonal_band_left_bound")
    if left is None:
        left = params.get("sliding_window_length")
    if causal_br:
        bottom_right = True
    elif causal_tl:
        bottom_right = False
    else:
        alignment = getattr(params.get("diagonal_alignment"), "name", "TOP_LEFT")
        bottom_right = alignment == "BOTTOM_RIGHT" and (left is not None or right is not None)
    return right == 0, bottom_right, left, right


def _features(facts: dict[str, Any], node: Any) -> frozenset[str]:
    feats = {name for port, name in _PORT_FEATURES.items() if node.inputs.get(port) is not None}
    feats |= {name for port, name in _OUTPUT_FEATURES.items() if node.outputs.get(port) is not None}
    params = node.params
    if params.get("use_alibi_mask"):
        feats.add("alibi")
    if params.get("score_mod") is not None or params.get("score_mod_bprop") is not None:
        feats.add("score_mod")
    if facts["dropout"]:
        feats.add("dropout")
    if facts["causal"]:
        feats.add("causal_bottom_right" if facts["bottom_right"] else "causal")
    elif facts["bottom_right"]:
        feats.add("bottom_right")
    if facts["window_left"] is not None:
        feats.add("window_left")
    if facts["window_right"] not in (None, 0):
        feats.add("window_right")
    if facts["heads_k"] != facts["heads_q"] or facts["heads_v"] != facts["heads_q"]:
        feats.add("gqa")
    # fact -> feature name, for the flags that are features as they stand
    for flag, feature in (
        ("padded", "padding"),
        ("ragged", "ragged"),
        ("scale_is_tensor", "scale_tensor"),
        ("deterministic", "deterministic"),
    ):
        if facts[flag]:
            feats.add(feature)
    if facts["stats_requested"] and not facts["backward"]:
        feats.add("stats")
    if params.get("stats_use_log2"):
        feats.add("stats_log2")
    return frozenset(feats)


def analyze(graph: Any) -> SdpaFacts:
    """Parse the graph once. Reads its first SDPA or SDPA_BWD node; every other node is a stray."""
    anchors = [n for n in graph.nodes if n.type in ANCHORS]
    if not anchors:
        raise ValueError(f"sdpa analyzer: graph {graph.name!r} has no SDPA or SDPA_BWD node")
    node = anchors[0]
    backward = node.type is NodeType.SDPA_BWD
    q, k, v = node.inputs["q"], node.inputs["k"], node.inputs["v"]
    o = node.inputs["o"] if backward else node.outputs["O"]
    stats = node.inputs["stats"] if backward else node.outputs.get("Stats")
    qd, kd, vd = _dims(q), _dims(k), _dims(v)
    params = node.params
    causal, bottom_right, window_left, window_right = _mask(params)
    # a tensor attn_scale is wired as an input port; a number stays an attribute
    scale = node.inputs.get("attn_scale")
    if scale is None:
        scale = params.get("attn_scale")
    seq_lens = node.inputs.get("seq_len_q") is not None or node.inputs.get("seq_len_kv") is not None
    cu_seq_lens = any(node.inputs.get(p) is not None for p in ("cu_seq_len_q", "cu_seq_len_kv"))
    ragged = cu_seq_lens or any(t is not None and t.ragged_offset is not None for t in (q, k, v))
    facts: dict[str, Any] = {
        "node": node,
        "backward": backward,
        "q": q,
        "k": k,
        "v": v,
        "o": o,
        "stats": stats,
        "batch": qd[0] if qd else 0,
        "heads_q": qd[1] if len(qd) > 1 else 0,
        "heads_k": kd[1] if len(kd) > 1 else 0,
        "heads_v": vd[1] if len(vd) > 1 else 0,
        "seq_q": qd[2] if len(qd) > 2 else 0,
        "seq_kv": kd[2] if len(kd) > 2 else 0,
        "head_dim_qk": qd[-1] if qd else 0,
        "head_dim_v": vd[-1] if vd else 0,
        "dtypes": tuple(t.data_type for t in (q, k, v)),
        "causal": causal,
        "bottom_right": bottom_right,
        "window_left": window_left,
        "window_right": window_right,
        "padded": bool(params.get("use_padding_mask")) or (seq_lens and not ragged),
        "ragged": ragged,
        "stats_requested": stats is not None,
        "dropout": params.get("dropout") is not None,
        "scale": None if scale is None or isinstance(scale, Tensor) else float(scale),
        "scale_is_tensor": isinstance(scale, Tensor),
        "deterministic": bool(params.get("use_deterministic_algorithm")),
        "stray_nodes": tuple(n.name for n in graph.nodes if n is not node),
        "sm": getattr(graph, "sm_version", None) or None,
    }
    return SdpaFacts(**facts, features=_features(facts, node))
