"""One graph's planning state: the plan list, the selection, the built plans, the declines.

The `Planner` hangs on the graph (``graph._planner``); `PlanningMixin` is a thin façade over it.
Every plan entry resolves to a plan KIND (`EngineKind` for a python engine, `BackendKind` for the
backend) with the same four operations, so nothing branches on which side an entry is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from pygraph.engines import heuristics
from pygraph.engines.base import (
    DECLINE_TYPES,
    BaseEngine,
    CompiledPlan,
    DeviceInfo,
    EngineRequest,
    PlanConfig,
    ShapeOverrides,
)
from pygraph.engines.engine_ids import is_python_engine
from pygraph.engines.manifest import engine_for_id, family_for, instantiate, resolve_hook
from pygraph.errors import GraphNotSupportedError
from pygraph.execution.context import ExecutionContext, stream_of
from pygraph.execution.normalize import normalize
from pygraph.execution.variant_pack import OperandLayout
from pygraph.ir.dtypes import build_plan_policy, convert_enum
from pygraph.lifecycle import GraphState
from pygraph.planning import backend as _backend
from pygraph.planning.layout import layout_for
from pygraph.planning.runner import make_runner, refuse_workspace

__all__ = ["EngineKind", "Planner", "planner_of"]

_NOT_PLANNED = "the graph has no plan list yet: call create_execution_plans() first"


class EngineKind:
    """The plan kind of one python engine's entries."""

    def __init__(self, engine: BaseEngine) -> None:
        self.engine = engine

    def name(self, cfg: PlanConfig) -> str:
        return self.engine.plan_name(cfg)

    def check_support(self, request: EngineRequest, cfg: PlanConfig) -> None:
        self.engine.check_support(request)

    def build(self, request: EngineRequest, cfg: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        return self.engine.build_plan(request, cfg, ctx)

    def workspace(self, request: EngineRequest, cfg: PlanConfig) -> int:
        return self.engine.get_workspace_size(request, cfg)


def planner_of(graph: Any) -> Planner:
    try:
        return graph._planner
    except AttributeError:
        pass
    planner = Planner(graph)
    object.__setattr__(graph, "_planner", planner)
    return planner


class Planner:
    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.lock = threading.RLock()
        self.planned = False
        self.modes: list[Any] = []
        self.plans: list[PlanConfig] = []
        self.index = 0
        self.pinned = False
        self.compiled: dict[int, CompiledPlan] = {}
        self.runners: dict[int, Any] = {}
        self.run: Any = None  # the selected plan's runner, once built
        self.declines: dict[str, str] = {}
        self.facts: dict[Any, Any] = {}
        self.kinds: dict[int, Any] = {}  # python engine id -> EngineKind
        self.backend: _backend.BackendPlans | None = None
        self.backend_kind: _backend.BackendKind | None = None
        self.deselected: set[str] = set()
        self.workspace_limit: int | None = None
        self._layout: OperandLayout | None = None
        self._request: EngineRequest | None = None
        self.family: Any = None
        self.analyzed = True
        self.facts_value: Any = None
        self.engines: list[BaseEngine] = []
        self.prepared = False

    # --- planning ----------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """validate -> backend layout -> freeze -> facts -> candidates -> backend entries (once)."""
        if self.prepared:
            return
        graph = self.graph
        refused = None
        try:
            graph.validate()
        except (GraphNotSupportedError, ImportError) as exc:
            if graph.is_python_only:
                raise
            # The backend refused (or is absent); a python engine may still serve the graph.
            refused = f"the backend cannot lower this graph: {type(exc).__name__}: {exc}"
        source, reason = _backend.open_backend(graph, refused)
        if source is not None and graph.lowered is not None:
            try:
                graph.build_operation_graph()
            except (GraphNotSupportedError, ImportError) as exc:
                source, reason = None, f"the backend could not finalize its layout: {exc}"
        self.backend = _backend.BackendPlans(source, reason)
        self.backend_kind = _backend.BackendKind(self.backend)
        if source is not None:
            if self.deselected:
                source.graph.deselect_engines(sorted(self.deselected))
            if self.workspace_limit is not None:
                source.graph.deselect_workspace_greater_than(self.workspace_limit)
        if not graph.state.frozen:
            graph._freeze()
        self.family = family_for(graph)
        self.analyzed = True
        self.facts_value = None
        if self.family is not None and self.family.analyzer is not None:
            try:
                analyzer = resolve_hook(self.family.analyzer, what=f"family {self.family.name!r} analyzer")
            except ImportError as exc:
                self.declines[f"family {self.family.name}"] = f"analyzer unavailable: {exc}"
                self.analyzed = False
            else:
                self.facts_value = self.facts_for(analyzer)
                self.analyzed = self.facts_value is not None
        if self.family is not None:
            built = instantiate(self.family)
            self.declines.update(built.unavailable)
            for engine in built.engines:
                self.kinds[engine.engine_id] = EngineKind(engine)
                if engine.name in self.deselected:
                    self.declines[engine.name] = "deselected by deselect_engines()"
                else:
                    self.engines.append(engine)
        self.prepared = True

    def facts_for(self, analyzer: Any) -> Any:
        """The analyzer's parse of the (frozen) graph, computed once per analyzer."""
        with self.lock:
            if analyzer not in self.facts:
                self.facts[analyzer] = analyzer(self.graph)
            return self.facts[analyzer]

    def create_execution_plans(self, modes: Iterable[Any] | None) -> None:
        with self.lock:
            if self.planned:
                raise RuntimeError(
                    "create_execution_plans() already ran for this graph; switch plans with select_plan() "
                    "or plan differently by building a new graph"
                )
            modes = heuristics.normalize_modes(modes)
            self._prepare()
            accepted, declined = heuristics.decline_reasons(self.engines, self.request)
            self.declines.update(declined)
            entries = self.backend.query(modes)
            hook = None
            if self.family is not None and self.family.heuristics is not None and self.analyzed:
                hook = resolve_hook(self.family.heuristics, what=f"family {self.family.name!r} heuristics")
            plans = heuristics.rank(
                self.graph,
                accepted,
                entries,
                modes,
                family=self.family,
                hook=hook,
                facts=self.facts_value,
                analyzed=self.analyzed,
            )
            if not plans:
                raise GraphNotSupportedError(self.why_nothing())
            self._install(plans, modes)

    def _install(self, plans: list[PlanConfig], modes: list[Any]) -> None:
        self.plans, self.modes, self.index, self.planned = plans, modes, 0, True
        self.graph._advance(GraphState.PLANNED)

    def why_nothing(self) -> str:
        parts = [f"backend: {self.backend.declined or 'offered no plan'}"]
        if self.family is None:
            parts.append("no engine family claims this graph")
        parts += [f"{name}: {reason}" for name, reason in sorted(self.declines.items())]
        return "no plan serves graph " + repr(getattr(self.graph, "name", "")) + " -- " + "; ".join(parts)

    def create_execution_plan(self, engine_id: int, knobs: Mapping[Any, Any] | None) -> None:
        """Replay one ``(engine_id, knobs)`` (an autotune result) and pin it."""
        with self.lock:
            self._prepare()
            key = PlanConfig(engine_id, knobs).key
            for i, cfg in enumerate(self.plans):
                if cfg.key == key:
                    self.index, self.pinned = i, True
                    return
            if is_python_engine(engine_id):
                ref = engine_for_id(engine_id)
                kind = self.kinds.get(engine_id)
                if kind is None or self.family is None or ref.family.name != self.family.name:
                    raise GraphNotSupportedError(
                        f"engine {ref.engine_name} ({engine_id}) of family {ref.family.name!r} is not offered for "
                        f"this graph (its family: {getattr(self.family, 'name', None)!r}): "
                        f"{self.declines.get(ref.engine_name, 'not instantiated')}"
                    )
                kind.engine.check_support(self.request)
                cfg = PlanConfig(engine_id, knobs)
            else:
                cfg = PlanConfig(engine_id, knobs, cpp_index=self.backend.append(engine_id, knobs))
            self.plans.append(cfg)
            self.index, self.pinned = len(self.plans) - 1, True
            if not self.planned:
                self._install(self.plans, self.modes)
                self.index = len(self.plans) - 1

    # --- addressing the list ---------------------------------------------------------------------------

    def require_planned(self) -> None:
        if not self.planned:
            raise RuntimeError(_NOT_PLANNED)

    def check_index(self, index: int) -> int:
        self.require_planned()
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.plans):
            raise IndexError(f"plan index {index!r} out of range for {len(self.plans)} plan(s)")
        return index

    def kind_of(self, cfg: PlanConfig) -> Any:
        if is_python_engine(cfg.engine_id):
            return self.kinds[cfg.engine_id]
        return self.backend_kind

    def name_at(self, index: int) -> str:
        cfg = self.plans[self.check_index(index)]
        return self.kind_of(cfg).name(cfg)

    def select(self, index: int) -> None:
        with self.lock:
            self.index, self.pinned = self.check_index(index), True
            self.run = self.runners.get(self.index)

    def deselect_engines(self, names: Iterable[str]) -> None:
        with self.lock:
            names = set(names)
            self.deselected |= names
            if self.backend is not None and self.backend.source is not None:
                self.backend.source.graph.deselect_engines(sorted(names))
            if self.engines:
                self.engines = [e for e in self.engines if e.name not in names]
            if self.planned:
                keep = [
                    i
                    for i, cfg in enumerate(self.plans)
                    if not (
                        is_python_engine(cfg.engine_id) and self.kinds[cfg.engine_id].engine.name in names
                    )
                ]
                current = self.plans[self.index] if self.plans else None
                self.plans = [self.plans[i] for i in keep]
                self.compiled = {keep.index(i): p for i, p in self.compiled.items() if i in keep}
                self.runners.clear()
                self.run = None
                self.index = self.plans.index(current) if current in self.plans else 0

    def deselect_workspace_greater_than(self, limit: int) -> None:
        with self.lock:
            self.workspace_limit = int(limit)
            if self.backend is not None and self.backend.source is not None:
                self.backend.source.graph.deselect_workspace_greater_than(self.workspace_limit)

    # --- building -----------------------------------------------------------------------------------------

    def context(self, handle: Any = None, workspace: int = 0) -> ExecutionContext:
        handle = self.graph.handle if handle is None else handle
        return ExecutionContext(handle, stream_of(handle), workspace)

    def build_at(self, index: int, ctx: ExecutionContext | None = None) -> CompiledPlan:
        """Build the entry at ``index`` (cached); a decline raises."""
        with self.lock:
            compiled = self.compiled.get(index)
            if compiled is not None:
                return compiled
            cfg = self.plans[index]
            kind = self.kind_of(cfg)
            if self.workspace_limit is not None and is_python_engine(cfg.engine_id):
                needed = kind.workspace(self.request, cfg)
                if needed > self.workspace_limit:
                    raise GraphNotSupportedError(
                        f"{kind.name(cfg)} needs {needed} bytes of workspace, over the limit {self.workspace_limit}"
                    )
            compiled = kind.build(self.request, cfg, ctx if ctx is not None else self.context())
            self.compiled[index] = compiled
            if self.graph.state < GraphState.BUILT:
                self.graph._advance(GraphState.BUILT)
            return compiled

    def build_plans(self, policy: Any = None, ctx: ExecutionContext | None = None) -> None:
        """Walk from the selected index; the first entry that builds is selected (ALL: build every one)."""
        with self.lock:
            self.require_planned()
            policy = convert_enum(
                policy if policy is not None else build_plan_policy.HEURISTICS_CHOICE, build_plan_policy
            )
            if self.pinned:
                try:
                    self.build_at(self.index, ctx)
                except DECLINE_TYPES as exc:
                    raise GraphNotSupportedError(
                        f"the pinned plan {self.name_at(self.index)} declined: {exc}"
                    ) from exc
                self.run = self._runner(self.index)
                return
            failures: dict[str, str] = {}
            chosen = None
            for i in range(self.index, len(self.plans)):
                try:
                    self.build_at(i, ctx)
                except DECLINE_TYPES as exc:
                    failures[f"#{i} {self.name_at(i)}"] = f"{type(exc).__name__}: {exc}"
                    continue
                if chosen is None:
                    chosen = i
                if policy is build_plan_policy.HEURISTICS_CHOICE:
                    break
            if chosen is None:
                listed = _group_failures(failures) or "the plan list is empty"
                raise GraphNotSupportedError(f"no plan from index {self.index} builds: {listed}")
            self.index = chosen
            self.run = self._runner(chosen)

    def check_support(self) -> None:
        with self.lock:
            self.require_planned()
            cfg = self.plans[self.index]
            try:
                self.kind_of(cfg).check_support(self.request, cfg)
            except DECLINE_TYPES:
                others = len(self.plans) - self.index - 1
                if self.pinned or not others:
                    raise

    def workspace_at(self, index: int) -> int:
        cfg = self.plans[self.check_index(index)]
        compiled = self.compiled.get(index)
        if compiled is not None:
            return compiled.get_workspace_size()
        return self.kind_of(cfg).workspace(self.request, cfg)

    # --- executing ----------------------------------------------------------------------------------------

    @property
    def layout(self) -> OperandLayout:
        if self._layout is None:
            with self.lock:
                if self._layout is None:
                    usable = self.backend is not None and self.backend.source is not None
                    self._layout = layout_for(self.graph, backend_usable=usable)
        return self._layout

    @property
    def request(self) -> EngineRequest:
        """What every engine is handed for this graph (built once, after the graph is prepared)."""
        if self._request is None:
            with self.lock:
                self._prepare()
                if self._request is None:
                    self._request = EngineRequest(
                        self.graph, self.facts_value, DeviceInfo.of_graph(self.graph), lambda: self.layout
                    )
        return self._request

    def _runner(self, index: int) -> Any:
        runner = self.runners.get(index)
        if runner is None:
            runner = make_runner(
                self.graph, self.layout, self.compiled[index], self.name_at(index), self.graph.handle
            )
            self.runners[index] = runner
        return runner

    def ensure_built(self, ctx_handle: Any = None) -> Any:
        with self.lock:
            if not self.planned:
                self.create_execution_plans(None)
            if self.run is None:
                ctx = self.context(ctx_handle) if ctx_handle is not None else None
                self.build_plans(None, ctx)
            return self.run

    def execute(
        self, values: Any, workspace: Any, handle: Any, overrides: tuple, index: int | None = None
    ) -> None:
        if index is None:
            run = self.ensure_built(handle)
            index = self.index
        else:
            self.check_index(index)
            self.build_at(index)
            run = self._runner(index)
        if all(o is None for o in overrides):
            run(values, workspace, handle)
            return
        plan, name = self.compiled[index], self.name_at(index)
        pack = normalize(self.layout, values, workspace)
        refuse_workspace(name, plan.get_workspace_size(), pack)
        handle = self.graph.handle if handle is None else handle
        ctx = ExecutionContext(handle, None, pack.workspace)
        plan.execute_with_overrides(self.graph, pack, ctx, ShapeOverrides(*overrides), name)


def _group_failures(failures: Mapping[str, str]) -> str:
    """One line per distinct reason, naming the first plan that gave it and how many more did."""
    by_reason: dict[str, list[str]] = {}
    for plan, reason in failures.items():
        by_reason.setdefault(reason, []).append(plan)
    return "; ".join(
        f"{plans[0]}{f' (and {len(plans) - 1} more)' if len(plans) > 1 else ''}: {reason}"
        for reason, plans in by_reason.items()
    )
