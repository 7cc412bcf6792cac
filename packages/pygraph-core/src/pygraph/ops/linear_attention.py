"""Python-only linear attention: gdn, kda, gdn2 and their backwards (no backend lowering).

THD layout: q/k [T, H, K], v [T, HV, V], a required ``cu_seqlens`` [N+1] (a dense batch is
[0, T, 2T, ...]). HO = max(q heads, v heads). O is [T, HO, V]; states are [N, HO, V, K].
Gates: GDN's g is [T, HV]; KDA's is per key channel [T, HV, K]; GDN2's g and beta are [T, HO, K]
plus a per-value write gate w [T, HO, V]. Gates are FLOAT; states FLOAT or BFLOAT16.
"""

from __future__ import annotations

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type
from pygraph.node_types import NodeType
from pygraph.ops._common import (
    FLOAT_ONLY,
    INTS,
    as_bool,
    as_int,
    as_str,
    like,
    like_dtype,
    optional_float,
    port_given,
)
from pygraph.ops.build import dims_of
from pygraph.ops.spec import Attr, OpSpec, Output, Port

__all__ = ["LINEAR_ATTENTION_SPECS"]

_STATES = frozenset({data_type.FLOAT, data_type.BFLOAT16})


def _heads_out(node) -> int:
    return max(dims_of(node, "q")[-2], dims_of(node, "v")[-2])


def _o_dims(node) -> tuple[int, ...]:
    v = dims_of(node, "v")
    return (v[0], _heads_out(node), v[-1])


def _state_dims(node) -> tuple[int, ...]:
    cu = dims_of(node, "cu_seqlens")
    return (cu[0] - 1, _heads_out(node), dims_of(node, "v")[-1], dims_of(node, "q")[-1])


def _state_dtype(node) -> data_type:
    s = node.inputs.get("initial_state")
    return s.data_type if s is not None and s.data_type.is_set else data_type.FLOAT


def _check(node) -> None:
    """The op's geometry, whole: every kernel sizes its reads and writes from q and v, so every
    other operand must have the extents q and v imply (a k with fewer heads than q would be read
    past its end)."""
    op = node.op
    tokens = {}
    for port in ("q", "k", "v", "g", "beta", "w", "dO"):
        t = node.inputs.get(port)
        if t is not None and t.dim:
            tokens[port] = t.dim[0]
    if len(set(tokens.values())) > 1:
        shown = ", ".join(f"{p}: T={n}" for p, n in tokens.items())
        raise OpInputError(f"{op}(): ports disagree on the token count T (dim 0): {shown}")
    q, k, v = node.inputs["q"], node.inputs["k"], node.inputs["v"]
    if q.dim and k.dim and q.dim[-1] != k.dim[-1]:
        raise OpInputError(
            f"{op}(): port 'q' (dim {list(q.dim)}) and port 'k' (dim {list(k.dim)}) differ in head dim K"
        )
    if not (q.dim and k.dim and v.dim):
        return
    if tuple(k.dim) != tuple(q.dim):
        raise OpInputError(
            f"{op}(): port 'k' (tensor {k.name!r}) has dim {list(k.dim)}, port 'q' {list(q.dim)}; k has "
            "q's dims [T, H, K] (the kernels read k with q's head count)"
        )
    (t, h, dk), (hv, dv) = q.dim, v.dim[1:]
    ho = max(h, hv)
    if ho % h or ho % hv:
        raise OpInputError(
            f"{op}(): q/k heads {h} and v heads {hv}: the smaller must divide the larger (the output "
            f"has {ho} heads)"
        )
    # a rank-3 gate has one value per key (g, beta) or value (w) channel; a rank-2 one, one a head
    for port, channels in (("g", dk), ("beta", dk), ("w", dv)):
        gate = node.inputs.get(port)
        if gate is None or not gate.dim:
            continue
        per = channels if len(gate.dim) == 3 else None
        heads = gate.dim[1]
        if ho % heads or (per is not None and gate.dim[2] != per):
            want = f"[{t}, heads, {per}]" if per is not None else f"[{t}, heads]"
            raise OpInputError(
                f"{op}(): port {port!r} (tensor {gate.name!r}) has dim {list(gate.dim)}; it must be {want} "
                f"with heads dividing the output's {ho}"
            )
    n = _sequences(node)
    wants = {"dO": (t, ho, dv), "initial_state": (n, ho, dv, dk), "d_final_state": (n, ho, dv, dk)}
    for port, want in wants.items():
        tensor = node.inputs.get(port)
        if tensor is None or not tensor.dim or None in want:
            continue
        if tuple(tensor.dim) != want:
            raise OpInputError(
                f"{op}(): port {port!r} (tensor {tensor.name!r}) has dim {list(tensor.dim)}; q and v "
                f"imply {list(want)}"
            )


def _sequences(node) -> int | None:
    """N, from cu_seqlens' length (None while its dims are unset)."""
    cu = node.inputs["cu_seqlens"]
    if not cu.dim:
        return None
    if cu.dim[0] < 2:
        raise OpInputError(
            f"{node.op}(): port 'cu_seqlens' (tensor {cu.name!r}) has dim {list(cu.dim)}; it holds N + 1 "
            "offsets for N >= 1 sequences"
        )
    return cu.dim[0] - 1


def _ports(gate_rank: int, beta_rank: int, with_w: bool, backward: bool) -> tuple[Port, ...]:
    ports = [
        Port("q", ranks=(3,)),
        Port("k", ranks=(3,)),
        Port("v", ranks=(3,)),
        Port("g", ranks=(gate_rank,), dtypes=FLOAT_ONLY),
        Port("beta", ranks=(beta_rank,)),
    ]
    if with_w:
        ports.append(Port("w", ranks=(3,)))
    ports.append(Port("cu_seqlens", ranks=(1,), dtypes=INTS))
    if backward:
        ports.append(Port("dO", ranks=(3,)))
    ports.append(Port("initial_state", required=False, ranks=(4,), dtypes=_STATES))
    if backward:
        ports.append(Port("d_final_state", required=False, ranks=(4,), dtypes=_STATES))
    ports += [Port("a_log", required=False), Port("dt_bias", required=False)]
    return tuple(ports)


def _max_seqlen(value):
    """None, or the longest sequence's length the caller promises (an int >= 1): a ranking hint."""
    if value is None:
        return None
    length = as_int(value)
    if length < 1:
        raise ValueError("expected an int >= 1 (the longest sequence's tokens) or None")
    return length


def _attrs(forward: bool, gate_lower_bound: bool) -> tuple[Attr, ...]:
    attrs = [Attr("scale", None, optional_float)]
    if forward:
        attrs.append(Attr("output_final_state", False, as_bool))
    attrs += [
        Attr("use_qk_l2norm", False, as_bool),
        Attr("use_beta_sigmoid", False, as_bool),
        Attr("allow_neg_eigval", False, as_bool),
        Attr("safe_gate", False, as_bool),
        Attr("gate_domain", None, as_str),
    ]
    if gate_lower_bound:
        attrs.append(Attr("gate_lower_bound", None, optional_float))
    # the longest sequence's tokens, where the caller knows it (flash-attn's max_seqlen): only the
    # plans' ranking reads it (segmenting a batch whose longest sequences outlast the rest); a wrong
    # value costs speed, never correctness, as every plan serves any lengths
    attrs.append(Attr("max_seqlen", None, _max_seqlen))
    return tuple(attrs)


def _safe_gate_and(port: str):
    return lambda node: bool(node.params.get("safe_gate")) and node.inputs.get(port) is not None


def _spec(
    name: str, node_type: NodeType, inputs: tuple, forward: bool, glb: bool, outputs: tuple, doc: str
) -> OpSpec:
    """The OpSpec every linear-attention op shares: python-only, required ports positional."""
    return OpSpec(
        name=name,
        node_type=node_type,
        family="linear_attention",
        inputs=inputs,
        attrs=_attrs(forward=forward, gate_lower_bound=glb),
        outputs=outputs,
        positional=tuple(p.name for p in inputs if p.required),
        lowering=None,
        check=_check,
        single_return=False,
        doc=doc,
    )


def _forward(
    name: str, node_type: NodeType, gate_rank: int, beta_rank: int, with_w: bool, glb: bool
) -> OpSpec:
    inputs = _ports(gate_rank, beta_rank, with_w, backward=False)
    outputs = (
        Output("O", dims=_o_dims, dtype=like_dtype("v")),
        Output(
            "final_state",
            dims=_state_dims,
            dtype=_state_dtype,
            when=lambda node: bool(node.params.get("output_final_state")),
            when_doc="output_final_state",
        ),
    )
    doc = f"{name}: python-only linear attention (THD). O [T, HO, V]; final_state [N, HO, V, K]."
    return _spec(name, node_type, inputs, True, glb, outputs, doc)


def _backward(
    name: str, node_type: NodeType, gate_rank: int, beta_rank: int, with_w: bool, glb: bool
) -> OpSpec:
    inputs = _ports(gate_rank, beta_rank, with_w, backward=True)
    grads = [("dQ", "q"), ("dK", "k"), ("dV", "v"), ("dG", "g"), ("dBeta", "beta")]
    if with_w:
        grads.append(("dW", "w"))
    outputs = [Output(out, dims=like(port), dtype=like_dtype(port)) for out, port in grads]
    outputs += [
        Output(
            "d_initial_state",
            dims=like("initial_state"),
            dtype=like_dtype("initial_state"),
            when=port_given("initial_state"),
            when_doc="initial_state given",
        ),
        Output(
            "d_a_log", dims=like("a_log"), dtype=like_dtype("a_log"),
            when=_safe_gate_and("a_log"), when_doc="safe_gate and a_log given",
        ),
        Output(
            "d_dt_bias", dims=like("dt_bias"), dtype=like_dtype("dt_bias"),
            when=_safe_gate_and("dt_bias"), when_doc="safe_gate and dt_bias given",
        ),
    ]  # fmt: skip
    doc = f"{name}: python-only backward of {name.removesuffix('_bwd')} (THD); gradients shaped like their inputs."
    return _spec(name, node_type, inputs, False, glb, tuple(outputs), doc)


LINEAR_ATTENTION_SPECS: tuple[OpSpec, ...] = (
    _forward("gdn", NodeType.GDN, gate_rank=2, beta_rank=2, with_w=False, glb=False),
    _backward("gdn_bwd", NodeType.GDN_BWD, gate_rank=2, beta_rank=2, with_w=False, glb=False),
    _forward("kda", NodeType.KDA, gate_rank=3, beta_rank=2, with_w=False, glb=True),
    _backward("kda_bwd", NodeType.KDA_BWD, gate_rank=3, beta_rank=2, with_w=False, glb=True),
    _forward("gdn2", NodeType.GDN2, gate_rank=3, beta_rank=3, with_w=True, glb=True),
    _backward("gdn2_bwd", NodeType.GDN2_BWD, gate_rank=3, beta_rank=3, with_w=True, glb=True),
)
