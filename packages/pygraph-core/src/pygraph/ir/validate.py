"""IR-side validation (run by `Graph.validate()` before any lowering, and so by planning).

Two layers: each node against its op (re-inferred outputs, the op's own checks, declared outputs
against what the inputs imply, dims on what it reads), then the graph as a whole
(`InvalidGraphError`): at least one node and one output (on a python-only graph every output a node
writes is one), every wired tensor of this graph with dims and strides a kernel can run, no tensor
written by two nodes, no cycle, and no virtual tensor read as a graph input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pygraph.errors import InvalidGraphError, OpInputError
from pygraph.ir.shapes import bad_dims, bad_span, bad_strides, same_extents

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR
    from pygraph.ir.node import Node

__all__ = ["check_graph", "declared_output_mismatch", "find_cycle", "geometry_contradiction", "validate_ir"]


def validate_ir(ir: GraphIR) -> None:
    """Re-check each node's ports against its op (`check_ports`), re-infer outputs (inputs may have
    changed since the builder ran), re-run each op's checks, and require dims on every tensor a node
    reads — and, for a python-only graph, on every output (no backend will infer them); then
    `check_graph`."""
    from pygraph.ops.build import check_ports, infer_outputs

    if not ir.nodes:
        raise InvalidGraphError(
            f"validate(): graph {ir.name!r} has no node; add an op (graph.matmul(...), ...) before "
            "validating or planning"
        )
    for node in ir.nodes:
        _check_members(ir, node)
    for node in ir.nodes:
        check_ports(node)
        infer_outputs(node)
        if node.spec.check is not None:
            node.spec.check(node)
        _check_declared_outputs(node)
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
    check_graph(ir)


def _check_declared_outputs(node: Node) -> None:
    """An output whose dims the caller set must have the dims its inputs imply.

    Kernels size their grids and writes from the inputs (a gdn kernel writes T x HO x V rows of O
    whatever O was declared), while execute() checks each buffer against the declared dims: a
    declared output smaller than the implied one would be written past its end. So a contradiction
    is refused here, before any plan exists."""
    found = declared_output_mismatch(node)
    if found is not None:
        raise InvalidGraphError(f"validate(): {found}")


def declared_output_mismatch(node: Node) -> str | None:
    """The first output of ``node`` whose user-set dims differ from the dims its inputs imply, as
    a message naming the node, the port, what was declared and what is implied; or None. Leading
    unit axes are no contradiction ([1, 4, 16] is the [4, 16] a matmul of two matrices implies)."""
    from pygraph.ops.build import implied_dims

    for out in node.spec.outputs:
        t = node.outputs.get(out.name)
        if t is None or out.from_kwarg or not t.dim_assigned:
            continue
        implied = implied_dims(node, out)
        if implied is not None and not same_extents(t.dim, implied):
            return (
                f"output {out.name!r} ({t.name!r}) of node {node.name!r} ({node.op}) is declared dim "
                f"{list(t.dim)}, but its inputs imply {list(implied)}; set_dim({list(implied)}) or leave "
                "the dims to the op"
            )
    return None


def geometry_contradiction(nodes: Iterable[Node]) -> str | None:
    """Why the declared geometry of ``nodes`` contradicts itself (an input the op's own check
    refuses, an output declared other than its inputs imply), or None. What `validate_ir` raises,
    as a reason an engine's check_support declines with."""
    for node in nodes:
        if node.spec.check is not None:
            try:
                node.spec.check(node)
            except OpInputError as exc:
                return str(exc)
        found = declared_output_mismatch(node)
        if found is not None:
            return found
    return None


def _wired(node: Node) -> Iterator[tuple[str, Any]]:
    """(port, tensor) for every tensor a node reads or writes, ragged offsets included."""
    from pygraph.ir.tensor import Tensor

    for port, value in (*node.inputs.items(), *node.outputs.items()):
        for t in value if isinstance(value, tuple) else (value,):
            if t is not None:
                yield port, t
                if getattr(t, "ragged_offset", None) is not None:
                    yield f"{port}.ragged_offset", t.ragged_offset
    for port, value in node.params.items():
        if isinstance(value, tuple):
            for t in value:
                if isinstance(t, Tensor):
                    yield port, t


def _check_members(ir: GraphIR, node: Node) -> None:
    """Ports written after the builder ran (``node.inputs[...] = ...``) are not checked there."""
    from pygraph.ir.tensor import Tensor

    for port, t in _wired(node):
        if not isinstance(t, Tensor):
            raise InvalidGraphError(
                f"validate(): port {port!r} of node {node.name!r} holds {t!r}, not a pygraph.Tensor"
            )
        if ir.tensor_by_uid(t.uid) is not t:
            raise InvalidGraphError(
                f"validate(): port {port!r} of node {node.name!r} holds tensor {t.name!r} (uid {t.uid}) of "
                f"graph {t.graph.name!r}; tensors cannot cross graphs"
            )


def _check_geometry(node: Node, port: str, t: Any) -> None:
    where = f"validate(): tensor {t.name!r} (port {port!r} of node {node.name!r})"
    if t.dim:
        reason = bad_dims(t.dim)
        if reason is not None:
            raise InvalidGraphError(f"{where}: dim {list(t.dim)}: {reason}")
    if t.stride:
        reason = bad_strides(t.stride)
        if reason is not None:
            raise InvalidGraphError(f"{where}: stride {list(t.stride)}: {reason}")
        if t.dim and len(t.stride) != len(t.dim):
            raise InvalidGraphError(
                f"{where}: dim {list(t.dim)} and stride {list(t.stride)} differ in rank; give it a stride "
                f"of rank {len(t.dim)} with set_stride()"
            )
        reason = bad_span(t.dim, t.stride) if t.dim else None
        if reason is not None:
            raise InvalidGraphError(f"{where}: dim {list(t.dim)} with stride {list(t.stride)}: {reason}")


def find_cycle(nodes: list[Any], producers: dict[int, Any]) -> list[Any] | None:
    """A cycle of ``nodes`` (each reading an output of the one before; the first repeated at the end)
    or None. ``producers`` maps a tensor uid to the node writing it."""
    state: dict[int, int] = {}  # id(node) -> 1 on the current path, 2 done
    for root in nodes:
        if state.get(id(root)):
            continue
        path: list[Any] = []
        stack: list[tuple[Any, Iterator[Any]]] = [(root, _predecessors(root, producers))]
        state[id(root)] = 1
        path.append(root)
        while stack:
            node, preds = stack[-1]
            for pred in preds:
                mark = state.get(id(pred))
                if mark == 1:
                    cycle = path[path.index(pred) :]
                    return [*reversed(cycle), cycle[-1]]
                if mark is None:
                    state[id(pred)] = 1
                    path.append(pred)
                    stack.append((pred, _predecessors(pred, producers)))
                    break
            else:
                state[id(node)] = 2
                path.pop()
                stack.pop()
    return None


def _predecessors(node: Any, producers: dict[int, Any]) -> Iterator[Any]:
    for t in node.input_tensors():
        producer = producers.get(t.uid)
        if producer is not None:
            yield producer


def check_graph(ir: GraphIR) -> None:
    """The graph as a whole: raise `InvalidGraphError` naming the first node or tensor that makes it
    mean nothing."""
    producers: dict[int, Any] = {}
    for node in ir.nodes:
        for port, t in _wired(node):
            _check_geometry(node, port, t)
        for t in node.output_tensors():
            other = producers.get(t.uid)
            if other is not None and other is not node:
                raise InvalidGraphError(
                    f"validate(): tensor {t.name!r} is an output of node {other.name!r} and of node "
                    f"{node.name!r}; a tensor has one producer"
                )
            producers[t.uid] = node
    cycle = find_cycle(ir.nodes, producers)
    if cycle is not None:
        loop = " -> ".join(repr(n.name) for n in cycle)
        raise InvalidGraphError(
            f"validate(): graph {ir.name!r} has a cycle: node {loop} (each reads an output of the one "
            "before); a graph is acyclic"
        )
    outputs = False
    for node in ir.nodes:
        for t in node.input_tensors():
            if t.uid not in producers and t.is_virtual and t.value is None:
                raise InvalidGraphError(
                    f"validate(): tensor {t.name!r} is read by node {node.name!r}, produced by no node, and "
                    "virtual: a virtual tensor is an intermediate, so nothing would fill it; a graph input "
                    "is non-virtual (set_is_virtual(False), the default of graph.tensor())"
                )
        outputs = outputs or any(not t.is_virtual for t in node.output_tensors())
    # On a python-only graph is_virtual speaks of a lowering that never happens: every output a
    # node writes is a caller slot (planning.layout), so a gdn graph whose O is left virtual has one.
    if not outputs and not ir.is_python_only:
        raise InvalidGraphError(
            f"validate(): graph {ir.name!r} has no output: every tensor its nodes produce is virtual; mark "
            "the results with set_output(True)"
        )
