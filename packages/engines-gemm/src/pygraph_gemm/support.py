"""What the SM90 kernels can serve, judged from the facts (no DSL import).

The kernel's epilogue order is fixed: ``act(acc * row_scale * col_scale + bias + residual)``, each
piece optional and used at most once. A graph whose chain spells another order is declined here,
with the step that breaks it named, and goes to the backend.
"""

from __future__ import annotations

import itertools
from typing import Any

from pygraph.ir.dtypes import data_type
from pygraph_gemm.analyzer import GemmFacts

__all__ = [
    "EPILOGUE_ORDER",
    "chain_reason",
    "declared_geometry",
    "declared_strides3",
    "dtype_short",
    "epilogue_spec_fields",
    "layout_reason",
    "strides3",
]

# The kernel's epilogue stages in the order it applies them.
EPILOGUE_ORDER = ("row_scale", "col_scale", "bias", "residual", "activation")
_SHORT = {data_type.BFLOAT16: "bf16", data_type.HALF: "fp16", data_type.FLOAT: "fp32"}


def dtype_short(dtype: Any) -> str | None:
    return _SHORT.get(dtype)


def chain_reason(facts: GemmFacts) -> str | None:
    """Why the kernels cannot express the graph, or None."""
    if facts.stray_nodes:
        return f"nodes off the matmul's epilogue chain: {list(facts.stray_nodes)}"
    last = -1
    for step in facts.steps:
        if step.kind == "unsupported":
            return f"epilogue step {step.op}: {step.detail}"
        rank = EPILOGUE_ORDER.index(step.kind)
        if rank <= last:
            order = " -> ".join(EPILOGUE_ORDER)
            return f"epilogue step {step.op} ({step.kind}) out of the kernel's order ({order}) or repeated"
        last = rank
    if facts.a_major is None:
        return f"A {facts.a.name!r} strides {list(facts.a.stride)}: neither K nor M is contiguous"
    if facts.b_major is None:
        return f"B {facts.b.name!r} strides {list(facts.b.stride)}: neither N nor K is contiguous"
    if facts.a.data_type != facts.b.data_type:
        return f"A is {facts.a.data_type.name} but B is {facts.b.data_type.name}"
    for step in facts.steps:
        if step.operand is not None and dtype_short(step.operand.data_type) is None:
            return f"epilogue operand {step.operand.name!r} has dtype {step.operand.data_type.name}"
    vec_dtypes = {
        step.operand.data_type for step in facts.steps if step.kind in ("bias", "row_scale", "col_scale")
    }
    if len(vec_dtypes) > 1:
        return f"bias/scale vectors of mixed dtypes {sorted(d.name for d in vec_dtypes)}"
    return None


def epilogue_spec_fields(facts: GemmFacts) -> dict[str, Any]:
    """Keyword arguments of the kernel's EpilogueSpec for these facts (chain_reason must be None)."""
    kinds = {step.kind: step for step in facts.steps}
    fields: dict[str, Any] = {
        "bias": "bias" in kinds,
        "row_scale": "row_scale" in kinds,
        "col_scale": "col_scale" in kinds,
        "residual": "residual" in kinds,
        "activation": kinds["activation"].detail if "activation" in kinds else "none",
        "aux_out": facts.aux is not None,
    }
    vecs = [kinds[k].operand for k in ("bias", "row_scale", "col_scale") if k in kinds]
    if vecs:
        fields["vec_dtype"] = dtype_short(vecs[0].data_type)
    if "residual" in kinds:
        fields["residual_dtype"] = dtype_short(kinds["residual"].operand.data_type)
    if facts.aux is not None:
        fields["aux_dtype"] = dtype_short(facts.aux.data_type)
    return fields


def strides3(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(batch, row, col) element strides of a [..., rows, cols] geometry; None if its batch dims
    do not collapse into one stride (0 when there is one matrix, or every batch dim broadcasts)."""
    batch = [(d, s) for d, s in zip(shape[:-2], stride[:-2], strict=True) if d != 1]
    if not batch or all(s == 0 for _, s in batch):
        return (0, stride[-2], stride[-1])
    for (_, s_outer), (d_inner, s_inner) in itertools.pairwise(batch):
        if s_outer != s_inner * d_inner:
            return None
    return (batch[-1][1], stride[-2], stride[-1])


def declared_strides3(tensor: Any) -> tuple[int, int, int] | None:
    return strides3(tuple(tensor.dim), tuple(tensor.stride))


def declared_geometry(facts: GemmFacts) -> dict[str, tuple[int, int, int]] | str:
    """Role -> declared (batch, row, col) strides of each TMA operand, or the rule one breaks."""
    named = {"A": facts.a, "B": facts.b, "out": facts.out}
    res = next((s.operand for s in facts.steps if s.kind == "residual"), None)
    if res is not None:
        named["residual"] = res
    if facts.aux is not None:
        named["aux"] = facts.aux
    strides = {}
    for role, tensor in named.items():
        s3 = declared_strides3(tensor)
        if s3 is None:
            return f"{role} {tensor.name!r} dim {list(tensor.dim)} stride {list(tensor.stride)}: batch dims do not collapse"
        strides[role] = s3
    return strides


def layout_reason(facts: GemmFacts, knobs: Any = None) -> str | None:
    """Why the declared shapes/strides (and ``knobs``, if given) break a kernel rule, or None.

    Reads the kernel's own `can_implement` (plain Python, no DSL import) on the declared geometry,
    so a graph the kernels cannot address is declined at check_support rather than at build.
    """
    from pygraph_gemm.kernels.config import EpilogueSpec, can_implement

    strides = declared_geometry(facts)
    if isinstance(strides, str):
        return strides
    batch = 1
    for d in facts.batch:
        batch *= d
    return can_implement(
        facts.m, facts.n, facts.k, batch,
        dtype_short(facts.a.data_type), dtype_short(facts.b.data_type), dtype_short(facts.out.data_type),
        strides["A"], strides["B"], strides["out"], knobs=knobs, spec=EpilogueSpec(**epilogue_spec_fields(facts)),
        residual_strides=strides.get("residual"), aux_strides=strides.get("aux"),
    )  # fmt: skip
