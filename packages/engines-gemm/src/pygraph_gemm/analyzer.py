"""Read a ``gemm`` graph once into facts: the matmul, its operands' layouts, and the epilogue chain.

Facts describe; they never reject. A chain step the kernels cannot express is recorded as an
``unsupported`` step with what it saw, and the engine's capabilities turn that into a decline.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from pygraph.node_types import NodeType

__all__ = ["EpilogueStep", "GemmFacts", "analyze"]

# Pointwise modes that are an activation on the chain, and the kernel's name for each.
ACTIVATION_OPS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_approx_tanh": "gelu_approx_tanh",
    "swish": "silu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "identity": "none",
}
_ADD_OPS = ("add", "bias")
_SCALE_OPS = ("mul", "scale")


@dataclasses.dataclass(frozen=True)
class EpilogueStep:
    """One pointwise op on the chain from the matmul's C to the graph's output."""

    kind: str  # bias | row_scale | col_scale | residual | activation | unsupported
    op: str  # the pointwise mode
    operand: Any = None  # the side tensor (bias / scale / residual), if any
    detail: str = ""  # activation name, or what made the step unsupported
    output: Any = None  # the tensor this step produces


@dataclasses.dataclass(frozen=True)
class GemmFacts:
    matmul: Any
    a: Any
    b: Any
    c: Any
    out: Any  # the chain's last tensor (C itself for a plain matmul)
    aux: Any  # the pre-activation tensor when the graph also outputs it, else None
    steps: tuple[EpilogueStep, ...]
    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    a_major: str | None  # "k" (row-major A) | "m" (column-major A) | None (neither)
    b_major: str | None  # "n" (row-major B) | "k" (column-major B) | None
    dtypes: tuple[Any, ...]  # A, B, out (what Capabilities.mismatch reads)
    stray_nodes: tuple[str, ...]  # nodes that are not on the matmul's chain
    sm: int | None = None

    @property
    def features(self) -> frozenset[str]:
        feats = {step.kind for step in self.steps if step.kind != "unsupported"}
        if self.aux is not None:
            feats.add("aux_output")
        if self.batch:
            feats.add("batched")
        return frozenset(feats)


def _major(tensor: Any, inner: str, outer: str) -> str | None:
    """Which of the last two dims is contiguous: ``inner`` for stride[-1] == 1, ``outer`` for stride[-2] == 1."""
    dim, stride = tensor.dim, tensor.stride
    if len(dim) < 2 or len(stride) != len(dim):
        return None
    if stride[-1] == 1 and (dim[-2] == 1 or stride[-2] >= dim[-1]):
        return inner
    if stride[-2] == 1 and (dim[-1] == 1 or stride[-1] >= dim[-2]):
        return outer
    return None


def _classify_side(op: str, side: Any, rows: int, cols: int, batch: tuple[int, ...]) -> tuple[str, str]:
    """(kind, detail) for a binary op whose other operand is ``side``, against a [..., rows, cols] chain."""
    dim = tuple(side.dim)
    lead, tail = dim[:-2], dim[-2:] if len(dim) >= 2 else (1, *dim)
    if any(d != 1 for d in lead) and tuple(lead) != tuple(batch[-len(lead) :] if lead else ()):
        return (
            "unsupported",
            f"operand {side.name!r} dim {list(dim)} does not broadcast as a vector or like C",
        )
    per_batch = any(d != 1 for d in lead)
    if op in _ADD_OPS:
        if tail == (rows, cols):
            return "residual", ""
        if tail == (1, cols) and not per_batch:
            return "bias", ""
        return (
            "unsupported",
            f"{op} operand {side.name!r} dim {list(dim)} is neither a bias along N nor shaped like C",
        )
    if tail == (rows, 1) and not per_batch:
        return "row_scale", ""
    if tail == (1, cols) and not per_batch:
        return "col_scale", ""
    return "unsupported", f"{op} operand {side.name!r} dim {list(dim)} is not a per-row or per-column scale"


def _chain_step(node: Any, current: Any, rows: int, cols: int, batch: tuple[int, ...]) -> EpilogueStep:
    op = node.params.get("mode", node.op)
    out = node.outputs.get("OUT_0")
    others = [t for t in node.input_tensors() if t is not current]
    if op in ACTIVATION_OPS and not others:
        extra = {k: v for k, v in node.params.items() if k != "mode" and v is not None}
        if op == "swish" and extra.get("swish_beta", 1.0) == 1.0:
            extra.pop("swish_beta", None)
        if extra:
            return EpilogueStep("unsupported", op, detail=f"{op} with {extra}", output=out)
        return EpilogueStep("activation", op, detail=ACTIVATION_OPS[op], output=out)
    if op in (*_ADD_OPS, *_SCALE_OPS) and len(others) == 1:
        side = others[0]
        kind, detail = _classify_side(op, side, rows, cols, batch)
        return EpilogueStep(kind, op, operand=side, detail=detail, output=out)
    return EpilogueStep("unsupported", op, detail=f"pointwise {op} is not a fused epilogue op", output=out)


def analyze(graph: Any) -> GemmFacts:
    """Parse the graph once. Expects exactly one MATMUL; anything else is described, not rejected."""
    matmuls = [n for n in graph.nodes if n.type is NodeType.MATMUL]
    if len(matmuls) != 1:
        raise ValueError(f"gemm analyzer: expected one matmul node, graph {graph.name!r} has {len(matmuls)}")
    mm = matmuls[0]
    a, b, c = mm.inputs["A"], mm.inputs["B"], mm.outputs["C"]
    consumers: dict[int, list[Any]] = defaultdict(list)
    for node in graph.nodes:
        for t in node.input_tensors():
            consumers[id(t)].append(node)

    m, k = a.dim[-2], a.dim[-1]
    n = b.dim[-1]
    batch = tuple(c.dim[:-2])
    steps: list[EpilogueStep] = []
    on_chain = {mm.name}
    current = c
    pre_activation = None
    while True:
        users = consumers.get(id(current), [])
        if not users:
            break
        if len(users) > 1 or users[0].type is not NodeType.POINTWISE:
            steps.append(
                EpilogueStep(
                    "unsupported",
                    users[0].op,
                    detail=f"tensor {current.name!r} feeds {[u.name for u in users]}, not a single pointwise op",
                )
            )
            break
        node = users[0]
        step = _chain_step(node, current, m, n, batch)
        if step.kind == "activation":
            pre_activation = current
        steps.append(step)
        on_chain.add(node.name)
        if step.output is None:
            break
        current = step.output
    aux = pre_activation if pre_activation is not None and not pre_activation.is_virtual else None
    return GemmFacts(
        matmul=mm,
        a=a,
        b=b,
        c=c,
        out=current,
        aux=aux,
        steps=tuple(steps),
        batch=batch,
        m=m,
        n=n,
        k=k,
        a_major=_major(a, "k", "m"),
        b_major=_major(b, "n", "k"),
        dtypes=(a.data_type, b.data_type, current.data_type),
        stray_nodes=tuple(node.name for node in graph.nodes if node.name not in on_chain),
        sm=getattr(graph, "sm_version", None) or None,
    )
