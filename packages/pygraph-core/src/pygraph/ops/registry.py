"""Every op spec by builder name: the one table builders, docs and lowering read."""

from __future__ import annotations

from types import MappingProxyType

from pygraph.node_types import NodeType
from pygraph.ops.linear_attention import LINEAR_ATTENTION_SPECS
from pygraph.ops.matmul import MATMUL_SPEC
from pygraph.ops.pointwise import POINTWISE_SPECS
from pygraph.ops.sdpa import SDPA_SPECS
from pygraph.ops.spec import OpSpec
from pygraph.ops.structured import STRUCTURED_SPECS

__all__ = ["OPS", "spec_for"]


def _table() -> dict[str, OpSpec]:
    specs = [MATMUL_SPEC, *POINTWISE_SPECS, *STRUCTURED_SPECS, *SDPA_SPECS, *LINEAR_ATTENTION_SPECS]
    table: dict[str, OpSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise RuntimeError(f"op {spec.name!r} is specified twice")
        table[spec.name] = spec
    return table


OPS: MappingProxyType[str, OpSpec] = MappingProxyType(_table())


def spec_for(node_type: NodeType, mode: str | None = None) -> OpSpec:
    """The spec of a node type (pointwise: of its mode)."""
    if node_type is NodeType.POINTWISE:
        return OPS[mode or ""]
    return OPS[node_type.op_name]
