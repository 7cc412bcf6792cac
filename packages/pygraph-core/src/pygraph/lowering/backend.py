"""Lowering of the IR to ``cudnn._pybind_module.backend_graph`` (nvidia-cudnn-frontend's C++ builder).

One generic walk over the op specs: each node is one backend builder call whose keyword names are
the node's port and attribute names. The IR owns every uid and pushes each one; after the backend's
validate a check fails loudly if any backend uid differs. Only user-assigned output dims/strides are
pushed, except where the op's `Lowering.output_layout` says the backend needs the IR's layout.

Lowering reads what it is handed, the IR (`pygraph.ir.container.GraphIR`) and the graph's backend
arguments (handle, sm_count, ...), never the graph object.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pygraph.errors import GraphNotSupportedError
from pygraph.ir.tensor import Tensor

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR
    from pygraph.ir.node import Node

__all__ = [
    "BACKEND_EXTRA_HINT",
    "LoweredGraph",
    "UidOwnershipError",
    "empty_backend_graph",
    "import_backend",
    "lower",
]

BACKEND_EXTRA_HINT = "pip install 'pygraph-core[backend]'"


class UidOwnershipError(RuntimeError):
    """A backend tensor's uid differs from the IR's: the variant pack would bind wrong buffers."""


@dataclass
class LoweredGraph:
    """The backend graph built from the IR, with the uid maps both ways."""

    backend: Any
    uid_to_tensor: Mapping[int, Tensor]
    backend_tensors: Mapping[int, Any]
    module: Any = None
    operation_graph_built: bool = False
    deserialized: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def import_backend() -> Any:
    """``cudnn._pybind_module``, or an ImportError naming the extra to install."""
    try:
        cudnn = importlib.import_module("cudnn")
        module = cudnn._pybind_module
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            "lowering a graph to the cuDNN backend needs nvidia-cudnn-frontend (module 'cudnn'); "
            f"{BACKEND_EXTRA_HINT}"
        ) from exc
    return module


def to_backend(module: Any, value: Any) -> Any:
    """Our enums -> the backend's same-named members; tuples -> lists; the rest as is."""
    if isinstance(value, enum.Enum):
        backend_enum = getattr(module, type(value).__name__, None)
        if backend_enum is not None and hasattr(backend_enum, value.name):
            return getattr(backend_enum, value.name)
        return value
    if isinstance(value, tuple):
        return [to_backend(module, v) for v in value]
    return value


def _refusal(ir: GraphIR, where: str, exc: BaseException) -> GraphNotSupportedError:
    return GraphNotSupportedError(f"the cuDNN backend refused graph {ir.name!r} at {where}: {exc}")


class _Lowerer:
    def __init__(self, ir: GraphIR, module: Any, backend_args: Mapping[str, Any]) -> None:
        self.ir = ir
        self.module = module
        self.tensors: dict[int, Any] = {}
        self.backend = self._make_graph(backend_args)

    def _make_graph(self, backend_args: Mapping[str, Any]) -> Any:
        g, m = self.ir, self.module
        ctx = g.context
        kwargs: dict[str, Any] = {
            "name": g.name,
            "io_data_type": to_backend(m, ctx.io_data_type),
            "intermediate_data_type": to_backend(m, ctx.intermediate_data_type),
            "compute_data_type": to_backend(m, ctx.compute_data_type),
        }
        for key, value in backend_args.items():
            if key == "handle":
                value = backend_handle(value)
            if value is not None:
                kwargs[key] = to_backend(m, value)
        try:
            return m.backend_graph(**kwargs)
        except RuntimeError as exc:
            if "cudnnCreate" in str(exc) or "libcudnn" in str(exc):
                raise ImportError(
                    f"the cuDNN runtime library could not be loaded ({exc}); {BACKEND_EXTRA_HINT} and a "
                    "cuDNN runtime (torch's CUDA wheels or nvidia-cudnn-cu13)"
                ) from exc
            raise _refusal(g, "graph construction", exc) from exc

    # -- tensors ----------------------------------------------------------------------------
    def source(self, t: Tensor) -> Any:
        """The backend tensor of a tensor no builder call returns (inputs, kwarg outputs)."""
        found = self.tensors.get(t.uid)
        if found is not None:
            return found
        m, bg = self.module, self.backend
        if t.value is not None:
            scalar = (
                to_backend(m, t.scalar_type) if t.scalar_type is not None else m.scalar_type.RUNTIME_PARAM
            )
            bt = bg.tensor_scalar(t.value, scalar)
            bt.set_name(t.name)
            bt.set_dim(list(t.dim))
            bt.set_stride(list(t.stride))
            if t.data_type.is_set:
                bt.set_data_type(to_backend(m, t.data_type))
        else:
            kwargs: dict[str, Any] = {
                "dim": list(t.dim),
                "stride": list(t.stride),
                "data_type": to_backend(m, t.data_type),
                "is_virtual": t.is_virtual,
                "is_pass_by_value": t.is_pass_by_value,
                "reordering_type": to_backend(m, t.reordering_type),
                "name": t.name,
            }
            if t.ragged_offset is not None:
                kwargs["ragged_offset"] = self.source(t.ragged_offset)
                if t.ragged_offset_multiplier != 1:
                    kwargs["ragged_offset_multiplier"] = t.ragged_offset_multiplier
            bt = bg.tensor(**kwargs)
        bt.set_uid(t.uid)
        self.tensors[t.uid] = bt
        return bt

    def _push_output(self, t: Tensor, bt: Any, layout: str) -> None:
        m = self.module
        bt.set_uid(t.uid)
        bt.set_name(t.name)
        if t.dim and (t.dim_assigned or layout in ("dims", "always")):
            bt.set_dim(list(t.dim))
        if t.stride and (t.stride_assigned or layout == "always"):
            bt.set_stride(list(t.stride))
        if t.data_type.is_set:
            bt.set_data_type(to_backend(m, t.data_type))
        if not t.is_virtual:
            bt.set_output(True)
        if t.ragged_offset is not None:
            bt.set_ragged_offset(self.source(t.ragged_offset))
            if t.ragged_offset_multiplier != 1:
                bt.set_ragged_offset_multiplier(t.ragged_offset_multiplier)
        if t.reordering_type.name != "NONE":
            bt.set_reordering_type(to_backend(m, t.reordering_type))
        self.tensors[t.uid] = bt

    # -- nodes ----------------------------------------------------------------------------------
    def node_kwargs(self, node: Node) -> dict[str, Any]:
        spec, m = node.spec, self.module
        kwargs: dict[str, Any] = {"name": node.name}
        if spec.lowering.compute_data_type and node.compute_data_type.is_set:
            kwargs["compute_data_type"] = to_backend(m, node.compute_data_type)
        attr_names = {a.name for a in spec.attrs}
        for port, value in node.inputs.items():
            if isinstance(value, tuple):
                kwargs[port] = [self.source(t) for t in value]
            elif value is not None:
                kwargs[port] = self.source(value)
            elif port not in attr_names:
                kwargs[port] = None
        for key, value in node.params.items():
            if key in attr_names and value is not None and key not in kwargs:
                kwargs[key] = to_backend(m, value)
        for out in spec.outputs:
            t = node.outputs.get(out.name)
            if out.from_kwarg and t is not None:
                kwargs[out.name] = self.source(t)
        hook = spec.lowering.adjust
        if hook is not None:
            hook(node, kwargs, self)
        return kwargs

    def lower_node(self, node: Node) -> None:
        spec = node.spec
        method = getattr(self.backend, spec.lowering.method)
        kwargs = self.node_kwargs(node)
        try:
            result = method(**kwargs)
        except TypeError:
            raise  # a keyword the backend does not take: our bug, not a refusal
        except Exception as exc:
            raise _refusal(self.ir, f"node {node.name!r} ({spec.name})", exc) from exc
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for out, bt in zip(spec.returned_outputs, results):
            t = node.outputs.get(out.name)
            if t is None:
                continue
            if bt is None:
                raise RuntimeError(
                    f"lowering {node.name!r} ({spec.name}): the IR has output {out.name!r} but the backend "
                    "returned none for it"
                )
            self._push_output(t, bt, spec.lowering.output_layout)

    def check_uids(self) -> None:
        for uid, bt in self.tensors.items():
            got = bt.get_uid()
            if got != uid:
                name = self.ir.tensor_by_uid(uid).name
                raise UidOwnershipError(
                    f"uid ownership violated after lowering graph {self.ir.name!r}: tensor {name!r} has "
                    f"IR uid {uid} but backend uid {got}"
                )


def backend_handle(handle: Any) -> int | None:
    """The raw ``cudnnHandle_t`` the bindings take: a ``cudnn.Handle``'s, an int as is, None for none."""
    if handle is None or isinstance(handle, int):
        return handle
    raw = getattr(handle, "backend_handle", None)
    if raw is None:
        from pygraph.execution.errors import HandleError

        raise HandleError(f"handle {handle!r} is neither a cudnn.Handle nor a raw cudnnHandle_t int")
    return int(raw)


def empty_backend_graph(ir: GraphIR, backend_args: Mapping[str, Any], module: Any) -> Any:
    """A backend graph with ``ir``'s name, dtypes and ``backend_args`` and no node yet (what a
    backend payload is deserialized into)."""
    return _Lowerer(ir, module, backend_args).backend


def lower(
    ir: GraphIR,
    backend_args: Mapping[str, Any] | None = None,
    *,
    module: Any = None,
    validate: bool = True,
) -> LoweredGraph:
    """Build (and by default validate) the backend graph of ``ir``.

    ``backend_args`` are the graph's backend arguments (``handle``, ``sm_count``, ...; None where
    unset). Raises GraphNotSupportedError for a python-only op or a backend refusal, ImportError
    without the backend. ``module`` replaces ``cudnn._pybind_module`` (tests pass a recording
    stand-in).
    """
    for node in ir.nodes:
        if not node.spec.is_lowerable:
            raise GraphNotSupportedError(
                f"graph {ir.name!r}: node {node.name!r} ({node.op}) has no cuDNN backend lowering; "
                "only a python engine can serve it"
            )
    lowerer = _Lowerer(ir, module if module is not None else import_backend(), backend_args or {})
    for node in ir.nodes:
        lowerer.lower_node(node)
    if validate:
        try:
            lowerer.backend.validate()
        except Exception as exc:
            raise _refusal(ir, "validate", exc) from exc
    lowerer.check_uids()
    uid_to_tensor = {uid: ir.tensor_by_uid(uid) for uid in lowerer.tensors}
    return LoweredGraph(
        backend=lowerer.backend,
        uid_to_tensor=MappingProxyType(uid_to_tensor),
        backend_tensors=MappingProxyType(dict(lowerer.tensors)),
        module=lowerer.module,
    )
