"""The engine contract: the page an engine author reads first.

An engine is one way to run one family's graphs (``gemm_sm90`` runs ``gemm`` graphs on Hopper).
It answers two questions, and the planner asks them in this order:

1. ``check_support(request)``: can you serve this graph? Return to accept; decline by raising one
   of `DECLINE_TYPES` (``GraphNotSupportedError`` with the rule and the value it saw,
   ``NotImplementedError``, or ``ImportError`` for a missing DSL, probed with
   ``importlib.util.find_spec`` and never imported here). Any other exception is a bug in the
   engine and propagates unchanged.
2. ``build_plan(request, plan, ctx) -> CompiledPlan``: compile ``plan.knobs`` for this graph (the
   expensive step: import the DSL here, compile, cache; `kernels_ready` logs a slow one with its
   time). The planner calls it once per graph and config and keeps the result.
   ``get_workspace_size(request, plan)`` says what the plan will need before it is built.

Everything an engine needs arrives in the `EngineRequest`; an engine imports nothing from
``pygraph.planning``:

- ``request.graph``: the frozen graph (read-only; nodes, tensors, attributes).
- ``request.facts``: the family analyzer's parse of the graph, computed once per graph (None
  when the family declares no analyzer). Facts describe; `Capabilities.mismatch` judges.
- ``request.layout``: the operand layout, the one source of operand order. Resolve positions at
  build (``layout.position(tensor)``) and read ``pack.buffers[position]`` per call;
  ``layout.declared[position]`` is the geometry the graph declared for it.
- ``request.device``: the `DeviceInfo` the graph is planned for (``sm`` = major*10+minor,
  ``name``, ``sm_count``): what the graph declares, the rest read once from the CUDA device this
  process runs on (`DeviceInfo.of_graph`), None where neither says. Capabilities judge it through
  ``capabilities.mismatch(facts, device=request.device)``; a rule sized by the SM count reads
  ``request.device.sms`` (`REFERENCE_SM_COUNT` where the count is unknown), a kernel sized by it at
  compile time ``request.device.sm_count`` (None: the GPU it is compiled on, if any, is asked).

A `CompiledPlan` runs per call: ``execute(graph, pack, ctx)`` receives the call's `VariantPack`
(operands in ascending uid order, each with its own pointer, shape, stride, dtype) and the explicit
`ExecutionContext` (handle, stream, workspace). Settle at build everything the build can know, so
a call reads pointers and launches; what a call may not run raises naming the rule, launching
nothing. A python plan is compiled for the shapes the graph declared, so the inherited
``execute_with_overrides`` refuses shape overrides (`ShapeOverrideError`).

An engine does not choose its id (the manifest hands it one) and does not propose its plans (its
family's heuristics hook ranks them). ``docs/engines.md`` walks through a complete engine that
runs on the CPU.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pygraph.errors import GraphNotSupportedError, KnobTypeError, OpInputError
from pygraph.execution.context import ExecutionContext
from pygraph.execution.errors import ShapeOverrideError

if TYPE_CHECKING:
    from pygraph.execution.variant_pack import OperandLayout, VariantPack

__all__ = [
    "DECLINE_TYPES",
    "REFERENCE_SM_COUNT",
    "BaseEngine",
    "Capabilities",
    "CompiledPlan",
    "DeviceInfo",
    "EngineRequest",
    "ExecutionContext",
    "PlanConfig",
    "ShapeOverrideError",
    "ShapeOverrides",
    "kernels_ready",
    "knobs_key",
    "mismatch",
    "module_available",
]

# The only exception types that mean "this engine does not serve this graph".
DECLINE_TYPES: tuple[type[BaseException], ...] = (NotImplementedError, GraphNotSupportedError, ImportError)


def _knob_name(knob: Any) -> str:
    return knob if isinstance(knob, str) else getattr(knob, "name", str(knob))


def knobs_key(knobs: Mapping[Any, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A hashable, order-free form of ``knobs``: backend knob enums and plain names compare equal."""
    if not knobs:
        return ()
    return tuple(sorted((_knob_name(k), v) for k, v in knobs.items()))


@dataclasses.dataclass(frozen=True, eq=False)
class PlanConfig:
    """One entry of the plan list: an engine and a complete knob assignment.

    Identity is ``(engine_id, knobs)`` (`key`); ``cpp_index`` only says where one backend query put
    the plan in the lowered graph's own list, and ``mode`` which heuristic mode produced it.
    """

    engine_id: int
    knobs: Mapping[Any, Any] | None = None
    cpp_index: int | None = None
    mode: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.engine_id, int) or isinstance(self.engine_id, bool):
            raise OpInputError(f"PlanConfig: engine_id must be an int, got {self.engine_id!r}")
        if self.knobs is not None and not isinstance(self.knobs, Mapping):
            raise KnobTypeError(
                f"PlanConfig({self.engine_id}): knobs must be a mapping of knob name to value, got {self.knobs!r}"
            )
        if self.knobs is not None:
            object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))
        # computed once: plan lists dedup and compare thousands of configs by it
        object.__setattr__(self, "_key", (self.engine_id, knobs_key(self.knobs)))

    @property
    def key(self) -> tuple[int, tuple[tuple[str, Any], ...]]:
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanConfig):
            return NotImplemented
        return self.key == other.key and self.cpp_index == other.cpp_index and self.mode == other.mode

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        parts = [str(self.engine_id)]
        if self.knobs:
            parts.append("{" + ", ".join(f"{k}={v}" for k, v in knobs_key(self.knobs)) + "}")
        if self.cpp_index is not None:
            parts.append(f"cpp_index={self.cpp_index}")
        if self.mode is not None:
            parts.append(f"mode={getattr(self.mode, 'name', self.mode)}")
        return f"PlanConfig({', '.join(parts)})"

    def with_(self, **changes: Any) -> PlanConfig:
        return dataclasses.replace(self, **changes)


# The SM count of the card the families' measured thresholds were taken on: every table of
# benchmarks/RESULTS.md ran on 132 SMs (the H200; the H100 80GB HBM3 of the linear-attention tables
# has as many). A rule states its threshold as a fraction of the device's SM count
# (`DeviceInfo.sms`); this is the count it is read against where the device's is unknown (no
# declaration, no CUDA device), so a graph ranks there as it does on the reference card.
REFERENCE_SM_COUNT = 132


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """The device a graph is planned for.

    ``sm`` is major*10+minor (90 for Hopper); ``name`` the device's name; ``sm_count`` its
    streaming multiprocessors. None means unknown: not declared on the graph and no CUDA device to
    read (`of_graph`). Rules sized by the SM count read `sms`, which is never None.
    """

    sm: int | None = None
    name: str | None = None
    sm_count: int | None = None

    @property
    def sms(self) -> int:
        """The SM count the rules and the kernels' grids are sized for: ``sm_count``, or
        `REFERENCE_SM_COUNT` (the card the thresholds were measured on) where it is unknown."""
        return self.sm_count or REFERENCE_SM_COUNT

    @classmethod
    def of_graph(cls, graph: Any) -> DeviceInfo:
        """What ``graph`` declares (``Graph(sm_version=..., sm_count=...)``; 0 or None: not declared),
        the rest from the CUDA device this process runs on (`pygraph.tuning.device.current_device`:
        asked of the driver once a process, torch's current device when torch has initialized CUDA;
        no framework is imported). The device fills only a graph planned for its arch: a graph that
        declares another SM is planned for another card, whose SM count this one does not give.
        Without a CUDA device what was not declared stays None."""
        sm = getattr(graph, "sm_version", None) or None
        sm_count = getattr(graph, "sm_count", None) or None
        name = None
        if sm is None or sm_count is None:
            from pygraph.tuning import device as _device

            found = _device.current_device()
            if found is not None and sm in (None, found.sm) and sm_count in (None, found.sm_count):
                sm, name, sm_count = found.sm, found.name, found.sm_count
            elif found is not None and sm in (None, found.sm):
                sm = found.sm  # the declared SM count names another card of this arch
        return cls(sm=sm, name=name, sm_count=sm_count)


@dataclasses.dataclass(frozen=True, eq=False)
class EngineRequest:
    """Everything the planner hands an engine about one graph; built once per graph.

    ``graph`` is frozen; ``facts`` is the family analyzer's parse (None when the family declares no
    analyzer, or its analyzer could not be imported); ``device`` what the graph is planned for;
    ``layout`` the operand layout (positions and declared geometry of the variant pack).
    ``layout_of`` supplies the layout on first read, so an engine that reads it only at build
    costs planning nothing (pass ``lambda: layout`` to build a request by hand).
    """

    graph: Any
    facts: Any
    device: DeviceInfo
    layout_of: Callable[[], OperandLayout] = dataclasses.field(repr=False)
    _memo: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def layout(self) -> OperandLayout:
        return self.layout_of()

    def refuse_contradicting_geometry(self, engine: str) -> None:
        """Decline (naming ``engine``) a graph whose declared geometry contradicts itself: an
        operand its op refuses, an output declared other than its inputs imply. Kernels size their
        writes from the inputs, so such a graph would be written past a buffer. validate() refuses
        it first; this keeps an engine asked directly from accepting it. Computed once a request."""
        memo = self._memo
        if "geometry" not in memo:
            from pygraph.ir.validate import geometry_contradiction

            memo["geometry"] = geometry_contradiction(getattr(self.graph, "nodes", ()))
        reason = memo["geometry"]
        if reason is not None:
            raise GraphNotSupportedError(f"{engine}: {reason}")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can serve: an arch range, dtypes, features and a domain per knob axis.

    ``sm_lo``/``sm_hi`` are major*10+minor, inclusive; ``sm_excluded`` names archs inside that range
    the engine still does not build for, each with its reason. Facts describe a graph, capabilities
    judge it: `mismatch` reads the device's ``sm`` (the facts' ``sm`` when no device is given or it
    declares none), the facts' ``dtypes`` and ``features`` (whichever they have) and returns the
    first reason it finds, or None.
    """

    sm_lo: int
    sm_hi: int
    dtypes: frozenset[Any] = frozenset()
    features: frozenset[str] = frozenset()
    knob_domains: Mapping[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    sm_excluded: Mapping[int, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sm_excluded", MappingProxyType(dict(self.sm_excluded)))
        object.__setattr__(self, "dtypes", frozenset(self.dtypes))
        object.__setattr__(self, "features", frozenset(self.features))
        object.__setattr__(
            self, "knob_domains", MappingProxyType({k: tuple(v) for k, v in self.knob_domains.items()})
        )

    def default_knobs(self) -> dict[str, Any]:
        """A concrete config: the first point of every declared axis."""
        return {axis: domain[0] for axis, domain in self.knob_domains.items() if domain}

    def mismatch(
        self, facts: Any, knobs: Mapping[Any, Any] | None = None, *, device: DeviceInfo | None = None
    ) -> str | None:
        return mismatch(self, facts, knobs, device=device)


def mismatch(
    caps: Capabilities,
    facts: Any,
    knobs: Mapping[Any, Any] | None = None,
    *,
    device: DeviceInfo | None = None,
) -> str | None:
    """Why ``caps`` cannot serve ``facts`` (on ``device``) with ``knobs``, or None when they can."""
    sm = device.sm if device is not None and device.sm is not None else getattr(facts, "sm", None)
    if sm is not None and not caps.sm_lo <= sm <= caps.sm_hi:
        return f"requires SM{caps.sm_lo}..SM{caps.sm_hi}, found SM{sm}"
    if sm is not None and sm in caps.sm_excluded:
        return f"SM{sm}: {caps.sm_excluded[sm]}"
    for dtype in getattr(facts, "dtypes", None) or ():
        if caps.dtypes and dtype not in caps.dtypes:
            allowed = ", ".join(sorted(getattr(d, "name", str(d)) for d in caps.dtypes))
            return f"dtype {getattr(dtype, 'name', dtype)} not in {{{allowed}}}"
    missing = set(getattr(facts, "features", None) or ()) - caps.features
    if missing:
        return f"features {sorted(missing)} not supported (has {sorted(caps.features)})"
    for knob, value in (knobs or {}).items():
        name = _knob_name(knob)
        domain = caps.knob_domains.get(name)
        if domain is None:
            if value is not None:
                return f"knob {name} has no domain on this engine, got {value!r}"
        elif value not in domain:
            return f"knob {name}={value!r} outside its domain {domain}"
    return None


class ShapeOverrides(NamedTuple):
    """Execute-time overrides of declared geometry (the backend's dynamic shapes): parallel lists."""

    uids: Any
    shapes: Any
    strides: Any


class CompiledPlan(abc.ABC):
    """One built (graph, config): what runs per call.

    ``execute`` receives the call's `VariantPack` (operands in ascending uid order, each with its
    own geometry) and the explicit `ExecutionContext`. ``takes_variant_pack`` False means the plan
    wants ``{uid: OperandBuffer}`` instead; ``reads_stream`` False means ``ctx.stream`` is not read
    (the per-call path then skips reading the handle's stream). ``checks_geometry`` False (the
    default) has the per-call path hold every buffer to its declared geometry first. All three are
    read once, when the plan is bound, not per call.
    """

    takes_variant_pack: bool = True
    reads_stream: bool = True
    # True: ``execute`` checks each buffer's geometry itself (its own rules: a gemm plan maps a
    # call's other geometry, a linear-attention plan refuses it). False: the per-call path refuses
    # any buffer whose geometry is not the declared one before the plan runs (`planning.runner`).
    checks_geometry: bool = False

    @abc.abstractmethod
    def execute(self, graph: Any, pack: VariantPack, ctx: ExecutionContext) -> None: ...

    def execute_with_overrides(
        self, graph: Any, pack: VariantPack, ctx: ExecutionContext, overrides: ShapeOverrides, plan_name: str
    ) -> None:
        """Run with execute-time shape overrides. A python plan is compiled for the shapes the graph
        declared, so it refuses them rather than run a different problem; ``plan_name`` (the plan
        list's name for this plan) is what the refusal names."""
        raise ShapeOverrideError(
            f"plan {plan_name} is compiled for the shapes the graph declared; execute-time "
            "override_uids/override_shapes/override_strides are a backend-plan feature",
            plan=plan_name,
        )

    def get_workspace_size(self) -> int:
        return 0


class BaseEngine(abc.ABC):
    """A python engine. Subclasses set ``name`` and usually ``capabilities``.

    ``engine_id`` is handed in by the manifest. Declines raise one of `DECLINE_TYPES` only.
    Deciding support must not import the engine's DSL: DSL imports belong in `build_plan`, where an
    ImportError is still a decline.

    ``requires`` maps each module the engine's kernels import (its DSL: ``"cutlass"``,
    ``"cuda.tile"``) to what installs it (``"CuTe DSL (pip install ...)"``); `missing_requirement`
    probes them without importing them, so ``pygraph info`` can say ``unavailable`` and why before
    any graph is planned. `check_support` still declines on its own for a graph.
    """

    name: str = ""
    capabilities: Capabilities | None = None
    requires: Mapping[str, str] = MappingProxyType({})
    behavior_notes: tuple[Any, ...] = ()
    numerical_notes: tuple[Any, ...] = ()

    def __init__(self, engine_id: int) -> None:
        if not isinstance(engine_id, int) or isinstance(engine_id, bool):
            raise TypeError(
                f"engine {self.name or type(self).__name__}: engine_id must be an int, got {engine_id!r}"
            )
        self.engine_id = engine_id
        if not self.name:
            self.name = type(self).__name__

    @abc.abstractmethod
    def check_support(self, request: EngineRequest) -> None:
        """Return to accept ``request.graph``; raise a decline type naming the reason otherwise."""

    @abc.abstractmethod
    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        """Compile ``plan`` for ``request.graph`` (the expensive step, once per graph and plan)."""

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        """Workspace bytes the plan will need, answerable before it is built."""
        return 0

    def default_knobs(self) -> dict[str, Any]:
        return self.capabilities.default_knobs() if self.capabilities is not None else {}

    def missing_requirement(self) -> str | None:
        """``"needs <what installs it>"`` for the first module of `requires` that cannot be
        imported here, probed without importing it; None when every one can."""
        for module, install in self.requires.items():
            if not module_available(module):
                return f"needs {install}"
        return None

    def plan_name(self, plan: PlanConfig) -> str:
        """``engine_name[KNOB=v,...]``, knobs sorted by name."""
        knobs = knobs_key(plan.knobs)
        return f"{self.name}[{','.join(f'{k}={v}' for k, v in knobs)}]"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} id={self.engine_id}>"


def module_available(module: str) -> bool:
    """Whether ``module`` (dotted: ``"cuda.tile"``) can be imported, probed with
    ``importlib.util.find_spec`` (a dotted name's parents are imported, not the module itself)."""
    import importlib.util

    parts = module.split(".")
    try:
        return all(importlib.util.find_spec(".".join(parts[: i + 1])) is not None for i in range(len(parts)))
    except (ImportError, ValueError):  # a parent that is not a package, or a broken one
        return False


_T = TypeVar("_T")
_build_log = logging.getLogger("pygraph.engines.build")


def kernels_ready(engine: str, what: str, get: Callable[[], _T]) -> _T:
    """``get()``: an engine's compiled kernels for ``what`` (a plan's configuration), logged at info
    on ``pygraph.engines.build`` with its time when it took a second or more. A first use compiles
    for seconds to tens of seconds (a later one loads from a disk cache in well under one), which a
    user should not take for a hang."""
    started = time.perf_counter()
    compiled = get()
    elapsed = time.perf_counter() - started
    if elapsed >= 1.0:
        _build_log.info("%s: kernels for %s ready in %.1f s (compiled; kept on disk for later processes)",
                        engine, what, elapsed)  # fmt: skip
    return compiled
