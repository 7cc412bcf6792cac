"""IR-side validation (run by `Graph.validate()` before any lowering)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pygraph.errors import OpInputError

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR

__all__ = ["validate_ir"]


def validate_ir(ir: GraphIR) -> None:
    """Re-infer outputs (inputs may have changed since the builder ran), re-run each op's checks,
    and require dims on every tensor a node reads — and, for a python-only graph, on every output
    (no backend will infer them)."""
    from pygraph.ops.build import infer_outputs

    for node in ir.nodes:
        infer_outputs(node)
        if node.spec.check is not None:
            node.spec.check(node)
    python_only = ir.is_python_only
    for node in ir.nodes:
        for t in node.input_tensors():
            if not t.dim:
                raise OpInputError(f"{node.op}(): input tensor {t.name!r} of node {node.name!r} has no dims")
        for port, t in node.outputs.items():
            if t is None:
                continue
            if python_only and not t.dim:
                raise OpInputError(
                    f"{node.op}(): output {port!r} ({t.name!r}) of node {node.name!r} has no dims; "
                    "set them with set_dim()"
                )
            if t.dim and t.stride and len(t.stride) != len(t.dim):
                raise OpInputError(
                    f"{node.op}(): output {port!r} ({t.name!r}) has dim {list(t.dim)} but stride "
                    f"{list(t.stride)} of another rank"
                )
