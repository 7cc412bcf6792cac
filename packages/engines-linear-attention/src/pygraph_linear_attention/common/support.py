"""The support rules every linear-attention engine applies, gdn's and kda's, cuTile and CuTe DSL: the
facts of a request, the operands' dtypes and layout, the per-head parameters of the safe gate, the
backward's gradient dtypes. Each rule returns the reason a graph is not served (the rule and the
value) or None; an op's own rules (`gdn.support`, `kda.support`) call these around theirs.

Deciding support reads the facts and the graph's declared tensors only: no framework, no DSL.
"""

from __future__ import annotations

import math
from typing import Any

from pygraph.engines.base import EngineRequest
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts

__all__ = [
    "DTYPE_NAMES",
    "HEAD_DIMS",
    "IO_DTYPES",
    "declared_operands",
    "element_count",
    "facts_of",
    "final_state_reason",
    "gradients_reason",
    "heads_of",
    "layout_reason",
    "operand_roles",
    "parameters_reason",
    "row_major",
    "tensors_reason",
]

HEAD_DIMS = (64, 128, 256)  # K and V the cuTile kernels are written for (tiles are powers of two)
IO_DTYPES = {data_type.BFLOAT16: "bfloat16", data_type.HALF: "float16"}
# the dtypes an operand may have, by the name the kernels' configs and compile keys hold
DTYPE_NAMES = {
    data_type.BFLOAT16: "bfloat16",
    data_type.HALF: "float16",
    data_type.FLOAT: "float32",
    data_type.INT32: "int32",
    data_type.INT64: "int64",
}
_FLOATS = (data_type.FLOAT, data_type.BFLOAT16, data_type.HALF)


def facts_of(engine: str, request: EngineRequest) -> LinearAttentionFacts:
    """The request's linear-attention facts (a decline naming ``engine`` if it came with others)."""
    facts = request.facts
    if not isinstance(facts, LinearAttentionFacts):
        raise GraphNotSupportedError(
            f"{engine}: graph {request.graph.name!r} came with no linear-attention facts "
            f"(got {type(facts).__name__})"
        )
    request.refuse_contradicting_geometry(engine)
    return facts


def declared_operands(engine: str, request: EngineRequest, operands: dict[str, Any]) -> tuple[dict, dict]:
    """The operands' (by role) pack positions and declared tensors; an operand whose dtype no
    kernel takes is declined naming ``engine``, the role and the dtype."""
    layout = request.layout
    positions = {role: layout.position(t) for role, t in operands.items()}
    declared = {role: layout.declared[p] for role, p in positions.items()}
    for role, d in declared.items():
        if d.dtype not in DTYPE_NAMES:
            raise GraphNotSupportedError(f"{engine}: operand {role} has dtype {d.dtype.name}, not served")
    return positions, declared


def row_major(shape: tuple) -> tuple:
    """The strides of a contiguous row-major tensor of ``shape``."""
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return tuple(reversed(stride))


def heads_of(tensor: Any) -> int:
    """The head count of a per-head tensor: a per-token gate's ([T, heads] or [T, heads, K]), a
    parameter's ([heads] or [heads, K]); 1 for a scalar."""
    dim = tensor.dim
    return int(dim[1]) if len(dim) >= 2 else int(dim[0]) if dim else 1


def element_count(tensor: Any) -> int:
    return math.prod(int(d) for d in tensor.dim)


def operand_roles(facts: LinearAttentionFacts) -> dict[str, Any]:
    """The node's tensors by kernel role, absent optionals left out (a gdn node has no write gate ``w``
    and no ``dW``: GDN-2's)."""
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


def tensors_reason(facts: LinearAttentionFacts) -> str | None:
    """The rules on the node's tensors every kernel shares: a lone node; q, k and v in one io dtype;
    beta FLOAT or the io dtype and g FLOAT; head dims the tiles take (`HEAD_DIMS`); a token and a
    sequence at least; head counts dividing the output's; g the log decay (no other gate domain)."""
    if facts.stray_nodes:
        return f"serves a lone {facts.node.op} node; the graph also has {list(facts.stray_nodes)}"
    q, k, v = facts.dtypes
    if q not in IO_DTYPES or k is not q or v is not q:
        names = [getattr(d, "name", d) for d in facts.dtypes]
        return f"q, k and v must all be BFLOAT16 or all HALF, got {names}"
    if facts.beta_dtype not in (data_type.FLOAT, q):
        return f"beta must be FLOAT or the io dtype {q.name}, got {getattr(facts.beta_dtype, 'name', None)}"
    if facts.gate_dtype is not data_type.FLOAT:
        return f"g must be FLOAT, got {getattr(facts.gate_dtype, 'name', None)}"
    if facts.head_dim_k not in HEAD_DIMS or facts.head_dim_v not in HEAD_DIMS:
        return f"head dims K={facts.head_dim_k}, V={facts.head_dim_v}: each must be one of {HEAD_DIMS}"
    if facts.tokens < 1 or facts.sequences < 1:
        return f"needs at least one token and one sequence, got T={facts.tokens}, N={facts.sequences}"
    ho = facts.heads_out
    if ho % facts.heads_qk or ho % facts.heads_v:
        return f"q/k heads {facts.heads_qk} and v heads {facts.heads_v} must both divide the output's {ho}"
    if facts.gate_domain is not None:
        return f"gate_domain={facts.gate_domain!r} is not served (g is the log decay)"
    return None


def parameters_reason(facts: LinearAttentionFacts) -> str | None:
    """a_log and dt_bias (the safe gate's per-head parameters): read only with safe_gate, each
    FLOAT, BFLOAT16 or HALF. Their layouts are the op's rules."""
    inputs = facts.node.inputs
    a_log, dt_bias = inputs.get("a_log"), inputs.get("dt_bias")
    if not facts.safe_gate and (a_log is not None or dt_bias is not None):
        return "a_log and dt_bias are read only with safe_gate=True"
    for port, t in (("a_log", a_log), ("dt_bias", dt_bias)):
        if t is not None and t.data_type not in _FLOATS:
            return f"{port} must be FLOAT, BFLOAT16 or HALF, got {t.data_type.name}"
    return None


def gradients_reason(facts: LinearAttentionFacts, gate_gradients: tuple[str, ...] = ()) -> str | None:
    """The backward's dtypes: dO, dQ, dK and dV in the io dtype; d_initial_state and d_final_state
    FLOAT or BFLOAT16; the other gradients (dG, dBeta, ``gate_gradients`` such as GDN-2's dW, d_a_log,
    d_dt_bias) FLOAT, BFLOAT16 or HALF: the kernels sum them in fp32 and store them in whatever dtype
    the graph gives."""
    node, io = facts.node, facts.dtypes[0]
    d_o = node.inputs["dO"]
    if d_o.data_type is not io:
        return f"dO must be the io dtype {io.name}, got {d_o.data_type.name}"
    ports = ("dQ", "dK", "dV", "dG", "dBeta", *gate_gradients, "d_initial_state", "d_a_log", "d_dt_bias")
    for port in ports:
        out = node.outputs.get(port)
        allowed = (
            (io,) if port in ("dQ", "dK", "dV") else _FLOATS[:2] if port == "d_initial_state" else _FLOATS
        )
        if out is not None and out.data_type not in allowed:
            return f"{port} must be one of {[d.name for d in allowed]}, got {out.data_type.name}"
    state = node.inputs.get("d_final_state")
    if state is not None and state.data_type not in _FLOATS[:2]:
        return f"d_final_state must be FLOAT or BFLOAT16, got {state.data_type.name}"
    return None


def final_state_reason(facts: LinearAttentionFacts) -> str | None:
    """The forward's final state, where the graph asks for it: FLOAT or BFLOAT16."""
    state = facts.node.outputs.get("final_state")
    if facts.output_final_state and state is not None and state.data_type not in _FLOATS[:2]:
        return f"final_state must be FLOAT or BFLOAT16, got {state.data_type.name}"
    return None


def layout_reason(operands: dict[str, Any]) -> str | None:
    """The kernels read rows: every operand (``operands`` by role) has a contiguous last dim."""
    for role, t in operands.items():
        stride = tuple(t.stride or ())
        if stride and stride[-1] != 1 and t.dim[-1] != 1:
            return f"operand {role} ({t.name}) must have a contiguous last dim, got stride {list(stride)}"
    return None
