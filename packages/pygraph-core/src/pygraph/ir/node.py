"""`Node`: one op of a graph, with its ports and parameters readable by name."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pygraph.node_types import NodeType

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR
    from pygraph.ops.spec import OpSpec

__all__ = ["Node", "PortMap"]


class PortMap(Mapping[str, Any]):
    """A node's ports or params: a Mapping whose writes go through the graph's mutation guard."""

    __slots__ = ("_data", "_ir", "_what")

    def __init__(self, ir: GraphIR, what: str, data: dict[str, Any]) -> None:
        self._ir = ir
        self._what = what
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setitem__(self, key: str, value: Any) -> None:
        self._ir.before_mutation(f"writing {self._what}[{key!r}]")
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        self._ir.before_mutation(f"deleting {self._what}[{key!r}]")
        del self._data[key]

    def __repr__(self) -> str:
        return f"{{{', '.join(f'{k!r}: {v!r}' for k, v in self._data.items())}}}"


class Node:
    """An op of the graph: `type` (NodeType), `op` (builder name), `inputs`/`outputs`/`params`."""

    __slots__ = ("_compute_data_type", "_inputs", "_ir", "_name", "_outputs", "_params", "_spec")

    def __init__(
        self,
        ir: GraphIR,
        spec: OpSpec,
        name: str,
        inputs: dict[str, Any],
        params: dict[str, Any],
        compute_data_type: Any,
    ) -> None:
        s = object.__setattr__
        s(self, "_ir", ir)
        s(self, "_spec", spec)
        s(self, "_name", name)
        s(self, "_inputs", PortMap(ir, f"node {name!r} inputs", inputs))
        s(self, "_outputs", PortMap(ir, f"node {name!r} outputs", {}))
        s(self, "_params", PortMap(ir, f"node {name!r} params", params))
        s(self, "_compute_data_type", compute_data_type)

    def __setattr__(self, key: str, value: Any) -> None:
        self._ir.before_mutation(f"setting Node.{key} on {self._name!r}")
        raise AttributeError(f"pygraph.Node attribute {key!r} is read-only; write node.params[...] instead")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"pygraph.Node attribute {key!r} cannot be deleted")

    @property
    def name(self) -> str:
        return self._name

    @property
    def type(self) -> NodeType:
        return self._spec.node_type

    @property
    def op(self) -> str:
        """The builder's name (for pointwise ops, the same as ``params["mode"]``)."""
        return self._spec.name

    @property
    def spec(self) -> OpSpec:
        return self._spec

    @property
    def inputs(self) -> PortMap:
        """Port -> Tensor (None where an optional port was not given; list ports: tuple)."""
        return self._inputs

    @property
    def outputs(self) -> PortMap:
        """Port -> Tensor (None for a conditional output that was not requested)."""
        return self._outputs

    @property
    def params(self) -> PortMap:
        return self._params

    @property
    def compute_data_type(self) -> Any:
        return self._compute_data_type

    @property
    def is_lowerable(self) -> bool:
        return self._spec.lowering is not None

    def input_tensors(self) -> Iterator[Any]:
        """Every wired input tensor, list ports flattened (and tensors inside a tuple-valued
        parameter such as SDPA's dropout)."""
        from pygraph.ir.tensor import Tensor

        for value in self._inputs.values():
            if isinstance(value, tuple):
                yield from value
            elif value is not None:
                yield value
        for value in self._params.values():
            if isinstance(value, tuple):
                yield from (v for v in value if isinstance(v, Tensor))

    def check_member(self, tensor: Any, port: str, where: str) -> None:
        """`OpInputError` unless ``tensor`` is a tensor of this node's graph: an op's check runs it on a
        tensor held in a parameter (SDPA's dropout), which the builder does not check as a port."""
        self._ir.check_member(tensor, port, where)

    def output_tensors(self) -> Iterator[Any]:
        for value in self._outputs.values():
            if value is not None:
                yield value

    def __repr__(self) -> str:
        return f"Node(name={self._name!r}, op={self.op!r}, type={self.type.name})"
