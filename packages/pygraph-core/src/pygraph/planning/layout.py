"""The operand layout of a graph: ONE source of operand order.

The lowered graph's variant-pack template when the graph has one (only the backend sees every
caller slot and excludes the slots the graph fills itself); the IR's wired ports for a python-only
graph. ``is_virtual`` on a python-only graph is a statement about a lowering that never happens, so
every wired port is a caller slot there.
"""

from __future__ import annotations

from typing import Any

from pygraph.execution.normalize import reader_for
from pygraph.execution.variant_pack import DEVICE_UNKNOWN, OperandBuffer, OperandLayout

__all__ = ["layout_for"]


def _ir_operands(graph: Any) -> list[Any]:
    # On a graph with a python-only op, is_virtual speaks of a lowering that never happens: every
    # wired port is a caller slot. On a lowerable graph (one the backend refused, served by a python
    # engine) a virtual tensor is an intermediate the plan keeps internal.
    every_port = graph.is_python_only
    found: dict[int, Any] = {}
    for node in graph.nodes:
        for tensor in (*node.input_tensors(), *node.output_tensors()):
            for t in (tensor, getattr(tensor, "ragged_offset", None)):
                if t is not None and getattr(t, "value", None) is None and (every_port or not t.is_virtual):
                    found[t.uid] = t
    return [found[uid] for uid in sorted(found)]


def _backend_operands(graph: Any, lowered: Any) -> list[Any]:
    backend = lowered.backend
    backend._prepare_variant_pack_template()
    uids = list(backend._get_variant_pack_uids_sorted())
    return [lowered.uid_to_tensor[uid] for uid in sorted(uids)]


def layout_for(graph: Any, backend_usable: bool = True) -> OperandLayout:
    """The operand layout; the backend's template only when the backend accepted the lowered graph.

    A graph the backend refused (at validate or when finalizing its layout) may still hold a
    lowered object, but its template is not a source of truth then: the IR's ports are.
    """
    lowered = getattr(graph, "lowered", None) if backend_usable else None
    tensors = _backend_operands(graph, lowered) if lowered is not None else _ir_operands(graph)
    operand_uids = {t.uid for t in tensors}
    other: dict[Any, str] = {}
    for t in graph.tensors:
        if t.uid in operand_uids:
            continue
        if getattr(t, "value", None) is not None:
            why = "a constant the graph fills itself"
        elif t.is_virtual:
            why = "virtual (an intermediate the plan keeps internal)"
        else:
            why = "read or written by no node"
        other[t] = other[t.uid] = why
    layout = OperandLayout(
        tensors,
        declared=[
            OperandBuffer(0, tuple(t.dim), tuple(t.stride), t.data_type, DEVICE_UNKNOWN) for t in tensors
        ],
        host=[t.is_pass_by_value for t in tensors],
        other_keys=other,
    )
    bindings = getattr(graph, "default_bindings", None) or {}
    for uid, obj in dict(bindings).items():
        i = layout.positions.get(uid)
        if i is not None:
            layout.defaults[i] = reader_for(obj)(obj, layout.declared[i])
    return layout
