"""The one generic builder: binds a call to an `OpSpec`, validates it, adds the node, infers outputs.

Every op builder of `pygraph.Graph` is `make_builder(spec)`; nothing here branches on which op it is.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type, to_data_type
from pygraph.ir.node import Node
from pygraph.ir.shapes import bad_span, row_major_stride
from pygraph.ir.tensor import Tensor
from pygraph.ops.spec import NO_DEFAULT, Attr, OpSpec, Output, Port

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR

__all__ = [
    "UnknownDims",
    "build_node",
    "check_ports",
    "dims_of",
    "implied_dims",
    "infer_outputs",
    "make_builder",
    "restore_node",
]


class UnknownDims(Exception):
    """Raised by an inference rule when a dims it needs are not known yet (the output stays unset)."""


def dims_of(node: Node, port: str) -> tuple[int, ...]:
    """The dims of an input port, or UnknownDims when the port is empty or its dims are not set."""
    t = node.inputs.get(port)
    if t is None or not t.dim:
        raise UnknownDims(port)
    return t.dim


def dtype_of(node: Node, port: str) -> data_type:
    t = node.inputs.get(port)
    return t.data_type if t is not None else data_type.NOT_SET


def _is_framework_tensor(value: Any) -> bool:
    return not isinstance(value, Tensor) and hasattr(value, "shape") and hasattr(value, "dtype")


def _resolve_tensor(ir: GraphIR, spec: OpSpec, port: Port, value: Any) -> Tensor:
    where = f"{spec.name}()"
    if isinstance(value, Tensor):
        ir.check_member(value, port.name, where)
        return value
    if port.scalar_ok and isinstance(value, numbers.Number) and not isinstance(value, bool):
        return ir.owner.tensor_scalar(value)
    if _is_framework_tensor(value):
        return ir.owner.tensor_like(value)
    raise OpInputError(f"{where}: port {port.name!r} expects a pygraph.Tensor, got {value!r}")


def _check_port(spec: OpSpec, port: Port, t: Tensor) -> None:
    where = f"{spec.name}()"
    rank = len(t.dim)
    if rank and t.stride and len(t.stride) != rank:
        raise OpInputError(
            f"{where}: port {port.name!r} got tensor {t.name!r} whose dim {list(t.dim)} and stride "
            f"{list(t.stride)} differ in rank; give it a stride of rank {rank} with set_stride()"
        )
    reason = bad_span(t.dim, t.stride) if rank and t.stride else None
    if reason is not None:
        raise OpInputError(
            f"{where}: port {port.name!r} got tensor {t.name!r} whose dim {list(t.dim)} with stride "
            f"{list(t.stride)}: {reason}"
        )
    _check_port_kind(spec, port, t)


def _check_port_kind(spec: OpSpec, port: Port, t: Tensor, where: str = "") -> None:
    """The port's rank and dtype rules (a port without them takes any); ``where`` the call."""
    where = where or f"{spec.name}()"
    rank = len(t.dim)
    if rank:
        if port.ranks is not None and rank not in port.ranks:
            want = " or ".join(str(r) for r in port.ranks)
            raise OpInputError(
                f"{where}: port {port.name!r} expects rank {want}, got tensor {t.name!r} with dim {list(t.dim)}"
            )
        if port.min_rank is not None and rank < port.min_rank:
            raise OpInputError(
                f"{where}: port {port.name!r} expects rank >= {port.min_rank}, got tensor {t.name!r} "
                f"with dim {list(t.dim)}"
            )
    dt = t.data_type
    if port.dtypes is not None and dt.is_set and dt not in port.dtypes:
        allowed = ", ".join(sorted(d.name for d in port.dtypes))
        raise OpInputError(
            f"{where}: port {port.name!r} cannot take data_type {dt.name} (tensor {t.name!r}); "
            f"it takes {allowed}"
        )


def _convert_attr(spec: OpSpec, attr: Attr, value: Any) -> Any:
    if attr.convert is None or value is None:
        return value
    try:
        return attr.convert(value)
    except (TypeError, ValueError) as exc:
        raise OpInputError(f"{spec.name}(): attribute {attr.name!r} got {value!r}: {exc}") from None


def _bind(ir: GraphIR, spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]):
    where = f"{spec.name}()"
    if len(args) > len(spec.positional):
        raise OpInputError(
            f"{where} takes at most {len(spec.positional)} positional arguments "
            f"({', '.join(spec.positional)}), got {len(args)}"
        )
    for key, value in zip(spec.positional, args):
        if key in kwargs:
            raise OpInputError(f"{where} got multiple values for {key!r}")
        kwargs[key] = value
    inputs: dict[str, Any] = {p.name: (() if p.is_list else None) for p in spec.inputs}
    params: dict[str, Any] = {"mode": spec.mode} if spec.mode is not None else {}
    kw_outputs: dict[str, Tensor] = {}
    for key, value in kwargs.items():
        item = spec.lookup(key)
        if item is None:
            ports = ", ".join(p.name for p in spec.inputs)
            attrs = ", ".join(a.name for a in spec.attrs) or "none"
            raise OpInputError(
                f"{where} got an unexpected keyword argument {key!r} (value {value!r}); "
                f"ports: {ports}; attributes: {attrs}"
            )
        if isinstance(item, Port):
            if value is None:
                continue
            if item.is_list:
                if not isinstance(value, (list, tuple)):
                    raise OpInputError(f"{where}: port {key!r} expects a list of tensors, got {value!r}")
                inputs[key] = tuple(_resolve_tensor(ir, spec, item, v) for v in value)
            else:
                inputs[key] = _resolve_tensor(ir, spec, item, value)
        elif isinstance(item, Attr):
            if isinstance(value, Tensor):
                if not item.tensor_ok:
                    raise OpInputError(f"{where}: attribute {key!r} takes a value, not tensor {value.name!r}")
                ir.check_member(value, key, where)
                inputs[key] = value
            else:
                params[key] = _convert_attr(spec, item, value)
        else:  # an output the caller passes as a keyword (SDPA's rng_dump, dBias, ...)
            if value is None:
                continue
            ir.check_member(value, key, where)
            kw_outputs[key] = value
    for p in spec.inputs:
        if p.required and not inputs[p.name]:
            raise OpInputError(f"{where}: missing required port {p.name!r}")
        for t in inputs[p.name] if p.is_list else (inputs[p.name],):
            if t is not None:
                _check_port(spec, p, t)
    for a in spec.attrs:
        if a.name in params or a.name in inputs:
            continue
        if a.required:
            raise OpInputError(f"{where}: missing required attribute {a.name!r}")
        params[a.name] = a.default
    return inputs, params, kw_outputs


def _default_dtype(node: Node) -> data_type:
    for t in node.input_tensors():
        if t.data_type.is_set:
            return t.data_type
    return data_type.NOT_SET


def implied_dims(node: Node, out: Output) -> tuple[int, ...] | None:
    """The dims ``node``'s inputs imply for output ``out``, or None where its op infers none."""
    if out.dims is None:
        return None
    try:
        dims = out.dims(node)
    except UnknownDims:
        return None
    return tuple(int(x) for x in dims) if dims is not None else None


def infer_outputs(node: Node) -> None:
    """(Re)infer dims, strides and dtypes of the node's outputs; user-assigned values stay."""
    for out in node.spec.outputs:
        t = node.outputs.get(out.name)
        if t is None or out.from_kwarg:
            continue
        dims = implied_dims(node, out)
        stride = row_major_stride(dims) if dims is not None else None
        dtype = out.dtype(node) if out.dtype is not None else _default_dtype(node)
        t._set_inferred(dims, stride, dtype)


def build_node(ir: GraphIR, spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ir.before_mutation(f"graph.{spec.name}()")
    name = kwargs.pop("name", None)
    cdt = kwargs.pop("compute_data_type", None)
    inputs, params, kw_outputs = _bind(ir, spec, args, kwargs)
    try:
        compute = to_data_type(cdt)
    except TypeError as exc:
        raise OpInputError(f"{spec.name}(): attribute 'compute_data_type' got {cdt!r}: {exc}") from None
    node = Node(ir, spec, ir.node_name(spec.name, name), inputs, params, compute)
    if spec.check is not None:
        spec.check(node)
    outs = node.outputs._data
    returned: list[Tensor | None] = []
    for out in spec.outputs:
        if out.from_kwarg:
            outs[out.name] = kw_outputs.get(out.name)
            continue
        if out.when is not None and not out.when(node):
            outs[out.name] = None
            returned.append(None)
            continue
        t = ir.new_tensor(name=f"{node.name}::{out.name}")
        t._raw_set("_is_virtual", out.virtual)
        t._raw_set("_producer", node)
        outs[out.name] = t
        returned.append(t)
    for t in kw_outputs.values():
        t._raw_set("_producer", node)
    infer_outputs(node)
    ir.add_node(node)
    if spec.returns_single:
        return returned[0]
    return returned


def check_ports(node: Node) -> None:
    """A node's ports against its op, as the builder left them: every required port wired, a tuple
    exactly where the op takes a list, each tensor's rank and dtype. `validate()` runs it before the
    op's check, for ports written after the builder ran (``node.inputs[...] = ...``); a dim and a
    stride of different ranks are the graph check's to report. Raises `OpInputError` naming the
    node."""
    spec = node.spec
    where = f"{spec.name}(): node {node.name!r}"
    for port in spec.inputs:
        value = node.inputs.get(port.name)
        if port.is_list != isinstance(value, tuple) and value is not None:
            takes = "a list of tensors" if port.is_list else "one tensor"
            raise OpInputError(f"{where}: port {port.name!r} takes {takes}, holds {value!r}")
        if port.required and not value:
            raise OpInputError(f"{where}: required port {port.name!r} is not wired")
        for t in value if isinstance(value, tuple) else (value,):
            if t is not None:
                _check_port_kind(spec, port, t, where)


def restore_node(
    ir: GraphIR, spec: OpSpec, name: str, recorded: dict[str, Any], compute_data_type: data_type
) -> Node:
    """A node rebuilt from a payload's ports and attributes (``recorded``, by keyword; `deserialize`)
    through the builder's own rules, so a payload is held to what a call is: no unknown keyword,
    every required port, a list only where the op takes a list, each port's rank and dtype, each
    attribute's kind, then the op's cross-port check. Raises `OpInputError`. The node is not added,
    and its outputs are the caller's to wire."""
    inputs, params, _ = _bind(ir, spec, (), dict(recorded))
    node = Node(ir, spec, name, inputs, params, compute_data_type)
    if spec.check is not None:
        spec.check(node)
    return node


def make_builder(spec: OpSpec, ir_of: Callable[[Any], GraphIR]) -> Callable[..., Any]:
    """The graph's builder method for ``spec``; ``ir_of(graph)`` is the IR it builds into (the graph
    class hands it over, so no builder reaches into the graph)."""

    def builder(self: Any, *args: Any, **kwargs: Any) -> Any:
        return build_node(ir_of(self), spec, args, kwargs)

    builder.__name__ = spec.name
    builder.__qualname__ = f"Graph.{spec.name}"
    ports = ", ".join(p.name + ("" if p.required else "=None") for p in spec.inputs)
    attrs = ", ".join(
        f"{a.name}={'<required>' if a.default is NO_DEFAULT else repr(a.default)}" for a in spec.attrs
    )
    outs = ", ".join(o.name for o in spec.returned_outputs)
    builder.__doc__ = (
        f"{spec.name}({ports}{', ' if attrs else ''}{attrs}, compute_data_type=None, name='') -> {outs}\n\n"
        f"{spec.doc}"
    )
    return builder
