"""`matmul(A, B)`: the explicit op. Batch dims broadcast; A[-1] must equal B[-2]."""

from __future__ import annotations

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type
from pygraph.ir.shapes import broadcast
from pygraph.node_types import NodeType
from pygraph.ops._common import as_float
from pygraph.ops.build import dims_of
from pygraph.ops.spec import Attr, Lowering, OpSpec, Output, Port

__all__ = ["MATMUL_SPEC"]

_NUMERIC = frozenset(set(data_type) - {data_type.BOOLEAN})


def _check(node) -> None:
    a, b = node.inputs["A"], node.inputs["B"]
    if not a.dim or not b.dim:
        return
    if a.dim[-1] != b.dim[-2]:
        raise OpInputError(
            f"matmul(): inner dims differ: port 'A' (tensor {a.name!r}) has dim {list(a.dim)}, "
            f"port 'B' (tensor {b.name!r}) has dim {list(b.dim)}; A[-1]={a.dim[-1]} != B[-2]={b.dim[-2]}"
        )
    if broadcast([a.dim[:-2], b.dim[:-2]]) is None:
        raise OpInputError(
            f"matmul(): batch dims do not broadcast: port 'A' dim {list(a.dim)}, port 'B' dim {list(b.dim)}"
        )


def _dims(node) -> tuple[int, ...]:
    a, b = dims_of(node, "A"), dims_of(node, "B")
    batch = broadcast([a[:-2], b[:-2]]) or ()
    return (*batch, a[-2], b[-1])


MATMUL_SPEC = OpSpec(
    name="matmul",
    node_type=NodeType.MATMUL,
    family="matmul",
    inputs=(Port("A", min_rank=2, dtypes=_NUMERIC), Port("B", min_rank=2, dtypes=_NUMERIC)),
    attrs=(Attr("padding", 0.0, as_float),),
    outputs=(Output("C", dims=_dims),),
    positional=("A", "B"),
    lowering=Lowering("matmul"),
    check=_check,
    doc="C = A @ B over the last two dims; batch dims broadcast.",
)
