"""`pygraph.Graph`: the thin façade users build, inspect, validate, plan and execute.

The graph owns, from its construction, its IR (`pygraph.ir.container.GraphIR`), its `Lifecycle`
(the one state, shared by the IR and the planner) and its `Planner`; it hands each lower layer what
that layer acts on (lowering and serialization the IR, autotune and explain the planner), and no
other module reads the graph's private attributes. The IR, the op specs, lowering, planning and
execution live in their own modules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import Any

from pygraph.engines.base import EngineRequest, PlanConfig
from pygraph.errors import (
    BackendPayloadError,
    DeserializationError,
    GraphNotSupportedError,
    GraphStateError,
    NotFoundError,
    OpInputError,
)
from pygraph.ir import serialize as _serialize
from pygraph.ir.container import GraphContext, GraphIR
from pygraph.ir.dtypes import data_type, data_type_arg, enum_arg, scalar_type, tensor_reordering
from pygraph.ir.node import Node
from pygraph.ir.shapes import bad_dims, bad_span, bad_strides, row_major_stride, to_dims
from pygraph.ir.tensor import Tensor
from pygraph.ir.validate import validate_ir
from pygraph.lifecycle import VALIDATED, GraphState, Lifecycle, require
from pygraph.lowering.backend import LoweredGraph, empty_backend_graph, import_backend, lower
from pygraph.ops.build import make_builder
from pygraph.ops.registry import OPS
from pygraph.planning.planner import Planner, SelectedPlan

__all__ = ["Graph"]

_BACKEND_ARGS = (
    "handle",
    "sm_count",
    "sm_version",
    "kernel_cache",
    "device_property",
    "is_dynamic_shape_enabled",
    "is_override_shape_enabled",
    "cuda_graph_retention",
)


def _sm_arg(where: str, attr: str, value: Any) -> None:
    """Refuse a device declaration (``sm_count``, ``sm_version``) that is not None or an int >= 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise OpInputError(
            f"{where}: {attr} must be an int >= 0 (sm_version is major*10+minor, e.g. 90) "
            f"or None, got {value!r}"
        )


class _Setting:
    """A graph setting that planning reads: the declared device (engines judge their arch range by it),
    the shape flags and the backend's arguments (the plan key holds the first two; lowering hands the
    backend all of them). Writable until the freeze, like every other setter: a later write would
    never reach the plans already made from the old value, so it raises `GraphStateError` instead."""

    def __init__(self, check: Any = None) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = f"_setting_{name}"

    def __get__(self, graph: Any, owner: type | None = None) -> Any:
        if graph is None:
            return self
        return graph.__dict__[self.slot]

    def __set__(self, graph: Any, value: Any) -> None:
        graph._ir.before_mutation(f"setting Graph.{self.name}")
        if self.check is not None:
            self.check(f"setting Graph.{self.name} on graph {graph.name!r}", self.name, value)
        graph.__dict__[self.slot] = value


class Graph:
    """A graph of deep-learning ops (the classic ``cudnn.pygraph`` surface).

    One builder method per op (see ``docs/ops.md``), generated from the op specs.
    """

    sm_count = _Setting(_sm_arg)
    sm_version = _Setting(_sm_arg)
    kernel_cache = _Setting()
    device_property = _Setting()
    is_dynamic_shape_enabled = _Setting()
    is_override_shape_enabled = _Setting()
    cuda_graph_retention = _Setting()
    is_cuda_graph_replay_expected = _Setting()

    def __init__(
        self,
        name: str = "pygraph",
        io_data_type: Any = None,
        intermediate_data_type: Any = None,
        compute_data_type: Any = None,
        handle: Any = None,
        sm_count: int | None = None,
        sm_version: int | None = None,
        kernel_cache: Any = None,
        device_property: Any = None,
        is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False,
        cuda_graph_retention: Any = None,
        *,
        is_cuda_graph_replay_expected: bool = False,
    ) -> None:
        if not isinstance(name, str):
            raise OpInputError(f"Graph(): name must be a str, got {type(name).__name__} {name!r}")
        for arg, value in (("sm_count", sm_count), ("sm_version", sm_version)):
            _sm_arg(f"Graph({name!r})", arg, value)
        context = GraphContext(
            data_type_arg(io_data_type, f"Graph({name!r}): io_data_type"),
            data_type_arg(intermediate_data_type, f"Graph({name!r}): intermediate_data_type"),
            data_type_arg(compute_data_type, f"Graph({name!r}): compute_data_type"),
        )
        self._lifecycle = Lifecycle(name)
        self._ir = GraphIR(self, name, context, self._lifecycle)
        self.handle = handle
        self.sm_count = sm_count
        self.sm_version = sm_version
        self.kernel_cache = kernel_cache
        self.device_property = device_property
        self.is_dynamic_shape_enabled = is_dynamic_shape_enabled
        self.is_override_shape_enabled = is_override_shape_enabled
        self.cuda_graph_retention = cuda_graph_retention
        self.is_cuda_graph_replay_expected = is_cuda_graph_replay_expected
        self._lowered: LoweredGraph | None = None
        self._backend_decline: GraphNotSupportedError | None = None
        self._bindings: dict[int, Any] = {}
        self._planner = Planner(self, self._lifecycle, self._lower)

    def __getattr__(self, name: str) -> Any:
        # Classic parity: backend methods this façade does not define are forwarded once lowered.
        if name.startswith("_"):
            raise AttributeError(name)
        backend = getattr(self.__dict__.get("_lowered"), "backend", None)
        if backend is not None and hasattr(backend, name):
            return getattr(backend, name)
        where = (
            "the graph is not lowered (validate() lowers a graph the backend can serve)"
            if backend is None
            else "nor does its lowered backend graph"
        )
        raise AttributeError(f"pygraph.Graph {self.name!r} has no attribute {name!r}; {where}")

    def _backend_args(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _BACKEND_ARGS}

    # -- identity and state -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._ir.name

    @property
    def context(self) -> GraphContext:
        return self._ir.context

    @property
    def io_data_type(self) -> data_type:
        return self._ir.context.io_data_type

    @property
    def intermediate_data_type(self) -> data_type:
        return self._ir.context.intermediate_data_type

    @property
    def compute_data_type(self) -> data_type:
        return self._ir.context.compute_data_type

    @property
    def state(self) -> GraphState:
        return self._lifecycle.state

    @property
    def is_python_only(self) -> bool:
        """True iff some node's op has no backend lowering."""
        return self._ir.is_python_only

    @property
    def lowered(self) -> LoweredGraph | None:
        return self._lowered

    @property
    def backend_decline(self) -> GraphNotSupportedError | None:
        """Why the backend refused this graph at validate(), if it did."""
        return self._backend_decline

    @property
    def default_bindings(self) -> dict[int, Any]:
        """uid -> framework tensor given to a builder or tensor_like(): execute()'s default buffers."""
        return dict(self._bindings)

    @property
    def planner(self) -> Planner:
        """The graph's `pygraph.planning.planner.Planner` (created with the graph): the plan list,
        the selection and the built plans, for the tools that act on them (autotune, explain)."""
        return self._planner

    # -- tensors ------------------------------------------------------------------------------
    def tensor(
        self,
        dim: Any,
        stride: Any = None,
        data_type: Any = None,
        is_virtual: bool = False,
        is_pass_by_value: bool = False,
        ragged_offset: Tensor | None = None,
        reordering_type: Any = None,
        name: str = "",
        uid: int | None = None,
        ragged_offset_multiplier: int = 1,
    ) -> Tensor:
        """A new tensor; ``stride`` defaults to row-major."""
        self._ir.before_mutation("graph.tensor()")
        label = f"tensor({name!r})" if name else "tensor()"
        dims = to_dims(dim, f"{label}: dim")
        reason = bad_dims(dims)
        if reason is not None:
            raise OpInputError(f"{label}: dim {list(dims)}: {reason}")
        strides = to_dims(stride, f"{label}: stride") if stride is not None else row_major_stride(dims)
        reason = bad_strides(strides)
        if reason is not None:
            raise OpInputError(f"{label}: stride {list(strides)}: {reason}")
        if len(strides) != len(dims):
            raise OpInputError(f"{label}: stride {list(strides)} has a different rank than dim {list(dims)}")
        reason = bad_span(dims, strides)
        if reason is not None:
            raise OpInputError(f"{label}: dim {list(dims)} with stride {list(strides)}: {reason}")
        dt = data_type_arg(data_type, f"{label}: data_type")
        if not isinstance(name, str):
            raise OpInputError(f"tensor(): name must be a str, got {type(name).__name__} {name!r}")
        if (
            isinstance(ragged_offset_multiplier, bool)
            or not isinstance(ragged_offset_multiplier, int)
            or (ragged_offset_multiplier < 1)
        ):
            raise OpInputError(
                f"{label}: ragged_offset_multiplier must be an int >= 1, got {ragged_offset_multiplier!r}"
            )
        if reordering_type is not None:
            reordering_type = enum_arg(reordering_type, tensor_reordering, f"{label}: reordering_type")
        if ragged_offset is not None:
            self._ir.check_member(ragged_offset, "ragged_offset", label)
        t = self._ir.new_tensor(name=name, uid=uid)
        raw = t._raw_set
        raw("_dim", dims)
        raw("_stride", strides)
        raw("_dim_assigned", True)
        raw("_stride_assigned", True)
        raw("_stride_default", stride is None)
        raw("_data_type", dt)
        raw("_dtype_assigned", dt.is_set)
        raw("_is_virtual", bool(is_virtual))
        raw("_is_pass_by_value", bool(is_pass_by_value))
        raw("_ragged_offset", ragged_offset)
        raw("_ragged_offset_multiplier", int(ragged_offset_multiplier))
        if reordering_type is not None:
            t.reordering_type = reordering_type
        return t

    def tensor_like(self, template: Any, name: str = "") -> Tensor:
        """A tensor shaped like a pygraph Tensor or a framework tensor (which becomes its default
        binding; a CPU framework tensor becomes pass-by-value)."""
        if isinstance(template, Tensor):
            return self.tensor(
                template.dim, template.stride, template.data_type, name=name,
                is_pass_by_value=template.is_pass_by_value,
            )  # fmt: skip
        shape = getattr(template, "shape", None)
        if shape is None or not hasattr(template, "dtype"):
            raise OpInputError(
                f"tensor_like(): expected a pygraph.Tensor or a framework tensor, got {template!r}"
            )
        reason = bad_dims(tuple(shape))
        if reason is not None:
            raise OpInputError(
                f"tensor_like(): the template's shape {list(shape)} cannot be a tensor's dim: {reason} "
                "(reshape a 0-d tensor to shape (1,))"
            )
        stride_attr = getattr(template, "stride", None)
        if callable(stride_attr):
            stride = tuple(stride_attr())
        elif getattr(template, "strides", None) is not None and getattr(template, "itemsize", None):
            stride = tuple(s // template.itemsize for s in template.strides)
        else:
            stride = None
        device = getattr(template, "device", None)
        on_cpu = getattr(device, "type", device) == "cpu"
        t = self.tensor(tuple(shape), stride, template.dtype, name=name, is_pass_by_value=on_cpu)
        self._bindings[t.uid] = template
        return t

    def tensor_scalar(self, value: Any, scalar_type_: Any = None, *, name: str = "") -> Tensor:
        """A rank-1 pass-by-value constant (FLOAT for a float, INT32 for an int)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OpInputError(f"tensor_scalar(): expected an int or a float, got {value!r}")
        scalar = None  # a bad scalar_type is refused before any tensor exists
        if scalar_type_ is not None:
            scalar = enum_arg(scalar_type_, scalar_type, "tensor_scalar(): scalar_type")
        dt = data_type.INT32 if isinstance(value, int) else data_type.FLOAT
        t = self.tensor((1,), (1,), dt, is_pass_by_value=True, name=name)
        t._raw_set("_value", value)
        if scalar is not None:
            t._raw_set("_scalar_type", scalar)
        return t

    # -- introspection ------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._ir.nodes)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(self._ir.tensors)

    def find_tensor(self, name_or_uid: str | int) -> Tensor:
        """The tensor with this uid (int) or name (str); KeyError if none, ValueError if ambiguous."""
        if isinstance(name_or_uid, int) and not isinstance(name_or_uid, bool):
            t = self._ir.tensor_by_uid(name_or_uid)
            if t is None:
                raise NotFoundError(
                    f"find_tensor(): graph {self.name!r} has no tensor with uid {name_or_uid} "
                    f"(uids: {sorted(t.uid for t in self._ir.tensors)})"
                )
            return t
        if not isinstance(name_or_uid, str):
            raise OpInputError(
                f"find_tensor(): expected a tensor name (str) or uid (int), got {name_or_uid!r}"
            )
        found = [t for t in self._ir.tensors if t.name == name_or_uid]
        if not found:
            raise NotFoundError(f"find_tensor(): graph {self.name!r} has no tensor named {name_or_uid!r}")
        if len(found) > 1:
            uids = ", ".join(str(t.uid) for t in found)
            raise OpInputError(
                f"find_tensor(): graph {self.name!r}: tensor name {name_or_uid!r} is ambiguous (uids {uids}); "
                "find it by uid"
            )
        return found[0]

    def get_node(self, name: str) -> Node:
        for node in self._ir.nodes:
            if node.name == name:
                return node
        raise NotFoundError(
            f"get_node(): graph {self.name!r} has no node named {name!r} (nodes: "
            f"{', '.join(n.name for n in self._ir.nodes) or 'none'})"
        )

    def get_inputs(self) -> list[Tensor]:
        """Tensors some node reads and no node produces, in creation order."""
        read = {t.uid for node in self._ir.nodes for t in node.input_tensors()}
        return [t for t in self._ir.tensors if t.uid in read and t.producer is None]

    def get_outputs(self) -> list[Tensor]:
        """Non-virtual tensors some node produces, in creation order."""
        return [t for t in self._ir.tensors if t.producer is not None and not t.is_virtual]

    def inspect(self) -> dict[str, Any]:
        """The whole graph as plain data (what the JSON repr prints)."""
        return _serialize.to_plain(self._ir)

    def __repr__(self) -> str:
        return json.dumps(self.inspect(), indent=2)

    # -- lifecycle ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Check the IR. A graph the backend can lower is lowered and frozen here (a backend refusal
        raises GraphNotSupportedError); a python-only graph stays mutable until planning."""
        if self._lifecycle.state.frozen:
            if self._lowered is None and not self.is_python_only and self._backend_decline is not None:
                raise self._backend_decline
            return
        validate_ir(self._ir)
        if self.is_python_only:
            self._lifecycle.validated()
            return
        self._lower(validated=True)

    def _lower(self, validated: bool = False) -> LoweredGraph:
        """Lower to the backend once (built and validated), then freeze. Raises
        GraphNotSupportedError (python-only op or backend refusal) or ImportError (no backend).
        ``validated``: the caller just ran the IR's validation (validate() does), so it is not rerun."""
        if self._lowered is not None:
            return self._lowered
        if not validated and not self._lifecycle.state.frozen:
            validate_ir(self._ir)
        try:
            self._lowered = lower(self._ir, self._backend_args())
        except GraphNotSupportedError as exc:
            self._backend_decline = exc
            raise
        self._backend_decline = None
        self._lifecycle.freeze()
        return self._lowered

    def _freeze(self) -> None:
        """Seal the whole public surface (idempotent)."""
        self._lifecycle.freeze()

    def _advance(self, state: GraphState) -> None:
        """Move forward to PLANNED or BUILT (planning's transitions); never backwards."""
        self._lifecycle.advance(state)

    def build_operation_graph(self) -> None:
        """Classic step after validate(): the backend builds its operation graph, and its inferred
        dims/strides are copied back onto tensors whose dims/strides the user did not set."""
        require(self, "build_operation_graph()", VALIDATED, "call validate() first")
        if self.is_python_only:
            return
        lowered = self._lower()
        if lowered.operation_graph_built:
            return
        try:
            lowered.backend.build_operation_graph()
        except Exception as exc:
            raise GraphNotSupportedError(
                f"the cuDNN backend refused graph {self.name!r} at build_operation_graph: {exc}"
            ) from exc
        lowered.operation_graph_built = True
        for uid, bt in lowered.backend_tensors.items():
            t = lowered.uid_to_tensor[uid]
            if not t.dim_assigned:
                t._raw_set("_dim", tuple(bt.get_dim()))
            if not t.stride_assigned:
                t._raw_set("_stride", tuple(bt.get_stride()))

    # -- planning ---------------------------------------------------------------------------------
    def create_execution_plans(self, modes: Iterable[Any] | None = None) -> None:
        """Build the ONE ranked plan list (default modes [A, FALLBACK]). One-shot: a second call raises."""
        self._planner.create_execution_plans(modes)

    def create_execution_plan(self, engine_id: int, knobs: Mapping[Any, Any] | None = None) -> Any:
        """Replay ``(engine_id, knobs)`` (a python or backend id) and pin it."""
        self._planner.create_execution_plan(engine_id, knobs)
        return self

    def engine_request(self) -> EngineRequest:
        """What planning hands this graph's engines (the graph, its family's facts, the operand
        layout, the declared device). Validates and freezes the graph as planning does; for trying
        an engine on a graph directly: ``engine.check_support(graph.engine_request())``."""
        return self._planner.request

    @property
    def plans(self) -> tuple[PlanConfig, ...]:
        return tuple(self._planner.plans)

    @property
    def selected_plan(self) -> SelectedPlan:
        """The selected plan: its name, engine id, knobs, kind ("python" or "backend") and python
        engine (None for a backend plan), whichever kind serves it. Needs the plan list."""
        return self._planner.selected("selected_plan")

    @property
    def selected_engine(self) -> Any:
        """The python engine of the selected plan; None for a backend plan or before planning
        (classic parity; `selected_plan` describes either kind)."""
        return self._planner.selected_engine()

    def backend_plan_entries(self) -> list[PlanConfig]:
        """The backend's own entries (mode-tagged, the delegating one untagged); [] when it declined."""
        return self._planner.backend_entries()

    def backend_decline_reason(self, verbose: bool = False) -> str | None:
        """Why the backend offers no plan for this graph, in one line ("cuDNN backend unavailable:
        no CUDA driver (...)" on a machine without a GPU); ``verbose=True`` gives the refusal's whole
        text as cuDNN gave it. None when the backend offers plans, or before planning."""
        return self._planner.backend_declined(verbose)

    def decline_reasons(self) -> dict[str, str]:
        """Engine name -> why it does not serve this graph (after planning)."""
        return dict(self._planner.declines)

    def check_support(self) -> Any:
        self._planner.check_support()
        return self

    def build_plans(self, policy: Any = None) -> Any:
        self._planner.build_plans(policy)
        return self

    def build(self, modes: Iterable[Any] | None = None, policy: Any = None) -> Any:
        """Plan (if not yet), check support, build: the classic one-call path."""
        self._planner.build(modes, policy)
        return self

    def select_plan(self, index: int) -> Any:
        self._planner.select(index)
        return self

    def deselect_engines(self, names: Iterable[str]) -> Any:
        self._planner.deselect_engines([names] if isinstance(names, str) else names)
        return self

    def deselect_workspace_greater_than(self, limit: int) -> Any:
        self._planner.deselect_workspace_greater_than(limit)
        return self

    # -- the list, by index -----------------------------------------------------------------------
    def get_execution_plan_count(self) -> int:
        return len(self._planner.plans)

    def get_plan_name_at_index(self, index: int) -> str:
        return self._planner.name_at(index)

    def get_engine_and_knobs_at_index(self, index: int) -> tuple[int, dict[Any, Any]]:
        p = self._planner
        cfg = p.plans[p.check_index(index, "get_engine_and_knobs_at_index()")]
        return cfg.engine_id, dict(cfg.knobs or {})

    def build_plan_at_index(self, index: int) -> Any:
        p = self._planner
        p.build_at(p.check_index(index, "build_plan_at_index()"))
        return self

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self._planner.workspace_at(index)

    def get_workspace_size(self) -> int:
        p = self._planner
        p.require_planned("get_workspace_size()")
        return p.workspace_at(p.index, "get_workspace_size()")

    # -- execution ----------------------------------------------------------------------------------
    def execute(
        self,
        tensors: Mapping[Any, Any],
        workspace: Any = None,
        handle: Any = None,
        override_uids: Any = None,
        override_shapes: Any = None,
        override_strides: Any = None,
        *,
        stream: Any = None,
    ) -> None:
        """Run the selected plan on ``tensors`` (keyed by Tensor, name or uid).

        Plans and builds on first use. Buffers may be torch tensors, ``__dlpack__`` or
        ``__cuda_array_interface__`` producers, or int device addresses. The plan launches on
        ``handle``'s stream, the default stream without one; ``stream`` (an int ``cudaStream_t``,
        e.g. ``torch.cuda.current_stream().cuda_stream``) launches this call on that stream instead
        (a backend plan's handle, the call's or the graph's, is set to it first).
        """
        run = self._planner.run
        if run is not None and override_uids is None and override_shapes is None and override_strides is None:
            run(tensors, workspace, handle, stream)
            return
        self._planner.execute(
            tensors, workspace, handle, (override_uids, override_shapes, override_strides), stream=stream
        )

    def execute_plan_at_index(
        self,
        tensors: Mapping[Any, Any],
        workspace: Any = None,
        index: int = 0,
        handle: Any = None,
        override_uids: Any = None,
        override_shapes: Any = None,
        override_strides: Any = None,
        *,
        stream: Any = None,
    ) -> None:
        self._planner.execute(
            tensors,
            workspace,
            handle,
            (override_uids, override_shapes, override_strides),
            index=index,
            stream=stream,
        )

    # -- autotuning ---------------------------------------------------------------------------
    def autotune(
        self,
        operands: Any,
        workspace: Any = None,
        *,
        top: int | None = 8,
        backend_top: int | None = 2,
        reps: int = 20,
        warmup: int = 3,
        timer: Any = None,
        record: bool = True,
        progress: Any = None,
    ) -> Any:
        """Time the head of the plan list, select the fastest, record it in the plan cache.

        Plans the graph first if needed. Times the first ``top`` plans that build of each python
        engine and the backend's first ``backend_top`` entries (None: no bound), each ``warmup``
        times then ``reps`` times, and selects the fastest median. ``operands`` is what
        `execute` takes; ``workspace`` a buffer, or a callable allocating one for a byte count.
        ``timer`` defaults to CUDA events (`pygraph.tuning.CudaEventTimer`). Returns a
        `pygraph.tuning.AutotuneResult`; a later process planning the same graph on the same
        device builds the winner first (`pygraph.tuning.plan_cache`).
        """
        from pygraph.tuning.autotune import autotune

        return autotune(
            self, operands, workspace, top=top, backend_top=backend_top, reps=reps, warmup=warmup,
            timer=timer, record=record, progress=progress,
        )  # fmt: skip

    # -- serialization ------------------------------------------------------------------------
    def serialize(self, *args: Any, **kwargs: Any) -> Any:
        """A lowered graph: the backend's serialization. A python-only graph: its IR as JSON bytes."""
        if self.is_python_only:
            return _serialize.dumps(self._ir)
        return self._lower().backend.serialize(*args, **kwargs)

    def deserialize(self, *args: Any, **kwargs: Any) -> None:
        """Restore a graph into this empty one: IR JSON (from a python-only graph), or any other
        payload through the backend (classic overloads: ``(data)`` and ``(handle, data, ...)``).

        Nothing is added unless the whole payload is accepted: an IR payload is checked field by field
        first, and a refusal is a `DeserializationError` naming the first bad field by its path."""
        if self._ir.tensors or self._ir.nodes or self._lowered is not None:
            raise GraphStateError(f"deserialize(): graph {self.name!r} is not empty")
        payload = _serialize.deserialize_payload(args, kwargs)
        data = _serialize.parse_ir(payload)
        if data is not None:
            self._ir = _serialize.loads_into(self._ir, data)
            return
        seen = _serialize.describe_payload(payload)
        try:
            module = import_backend()
            backend = empty_backend_graph(self._ir, self._backend_args(), module)
        except ImportError as exc:
            raise BackendPayloadError(
                f"deserialize(): the payload ({seen}) is not pygraph IR, and any other payload is read by "
                f"the cuDNN backend, which is unavailable here: {exc}"
            ) from exc
        try:
            backend.deserialize(*args, **kwargs)
        except Exception as exc:
            # the binding's errors are untyped; the caller needs to know it was the payload
            raise DeserializationError(
                f"deserialize(): the payload ({seen}) is not pygraph IR, and the cuDNN backend refused it: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._lowered = LoweredGraph(
            backend, {}, {}, module=module, operation_graph_built=True, deserialized=True
        )
        self._lifecycle.freeze()


# the builders reach the IR through the accessor the graph hands them
_ir_of = attrgetter("_ir")
for _spec in OPS.values():
    setattr(Graph, _spec.name, make_builder(_spec, _ir_of))
del _spec
