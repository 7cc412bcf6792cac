"""One graph's planning: the plan list, the selection, the built plans, the declines.

The graph creates its `Planner` with itself and is a thin façade over it. The planner is handed,
at construction, what it acts on: the graph (what engines and analyzers are given), the graph's
`Lifecycle` (the one state, which the planner moves to FROZEN, PLANNED and BUILT) and the graph's
lowering (a callable); it reaches into no graph internals. Each public call checks the state it
needs with `pygraph.lifecycle.require`. Every entry of the plan list resolves to its plan kind
through `PlanKinds` (python engines, the backend's configs and its delegating entry alike), so
nothing here branches on which side an entry is.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

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
from pygraph.engines.knobs import validate_knobs
from pygraph.engines.manifest import family_for, instantiate, resolve_hook
from pygraph.engines.plan_list import PlanList
from pygraph.errors import GraphNotSupportedError, OpInputError, PlanIndexError
from pygraph.execution.context import ExecutionContext, stream_of
from pygraph.execution.normalize import normalize
from pygraph.execution.variant_pack import OperandLayout
from pygraph.ir.dtypes import build_plan_policy, convert_enum, heur_mode
from pygraph.lifecycle import NOT_PLANNED, PLANNED, GraphState, Lifecycle, require
from pygraph.planning import backend as _backend
from pygraph.planning.kinds import PlanKinds
from pygraph.planning.layout import layout_for
from pygraph.planning.runner import (
    backend_stream_handle,
    make_runner,
    overridden_rows,
    refuse_geometry,
    refuse_workspace,
)

__all__ = ["Planner", "Prepared", "SelectedPlan"]


@dataclasses.dataclass(frozen=True)
class SelectedPlan:
    """The selected entry of a graph's plan list, whichever kind serves it.

    ``kind`` is "python" or "backend"; ``engine`` the python engine (None for a backend plan);
    ``index`` its position in the plan list.
    """

    name: str
    engine_id: int
    knobs: Mapping[Any, Any]
    kind: str
    engine: BaseEngine | None
    index: int


class Prepared(NamedTuple):
    """What preparing the graph settled, once: the backend's side, the family, its facts, the
    kinds its entries resolve to, and the request every engine is handed."""

    backend: _backend.BackendPlans
    family: Any
    facts: Any
    kinds: PlanKinds
    request: EngineRequest

    @property
    def analyzed(self) -> bool:
        """False when the family's analyzer could not express the graph (or could not be imported):
        nothing to rank on, the backend serves it."""
        return self.family is None or self.family.analyzer is None or self.facts is not None


class Planner:
    """One graph's planning state. ``graph`` is handed to engines and analyzers; ``lifecycle`` is the
    graph's state; ``lower()`` lowers the graph to the backend once (its `LoweredGraph`)."""

    def __init__(self, graph: Any, lifecycle: Lifecycle, lower: Callable[[], Any]) -> None:
        self.graph = graph
        self.lifecycle = lifecycle
        self._lower = lower
        self.lock = threading.RLock()
        self.modes: list[Any] = []
        # the ranked prefix now, the rest of a knob domain when something reads past it (plan_list.py)
        self.plans = PlanList()
        # the selection: which entry, and whether the caller pinned it (select_plan, a replay)
        self.index = 0
        self.pinned = False
        self.compiled: dict[int, CompiledPlan] = {}
        self.runners: dict[int, Any] = {}
        self.run: Any = None  # the selected plan's runner, once built
        self.declines: dict[str, str] = {}
        self.engines: list[BaseEngine] = []  # the family's engines still candidates
        self.deselected: set[str] = set()
        self.workspace_limit: int | None = None
        self._layout: OperandLayout | None = None
        self._prepared: Prepared | None = None

    # --- planning ----------------------------------------------------------------------------------

    def prepare(self) -> Prepared:
        """validate -> backend layout -> freeze -> facts -> the family's engines (once per graph)."""
        prepared = self._prepared
        if prepared is None:
            with self.lock:
                if self._prepared is None:
                    self._prepared = self._prepare()
                prepared = self._prepared
        return prepared

    def _prepare(self) -> Prepared:
        graph = self.graph
        refused = detail = None

        def refusal(what: str, exc: BaseException) -> tuple[str, str]:
            # (the one line, the whole text): an ImportError names the install in one line already;
            # cuDNN's refusal may be a dump of every engine's status
            text = f"{what}: {type(exc).__name__}: {exc}"
            return (text if isinstance(exc, ImportError) else _backend.refusal_line(text)), text

        try:
            graph.validate()
        except (GraphNotSupportedError, ImportError) as exc:
            if graph.is_python_only:
                raise
            # The backend refused (or is absent); a python engine may still serve the graph.
            refused, detail = refusal("the backend cannot lower this graph", exc)
        if refused is None and graph.lowered is None and not graph.is_python_only:
            # validate() of an already frozen graph does not lower it
            try:
                self._lower()
            except (GraphNotSupportedError, ImportError) as exc:
                refused, detail = refusal("the backend cannot lower this graph", exc)
        source, reason = _backend.open_backend(graph, refused)
        if source is not None and graph.lowered is not None:
            try:
                with _backend.quiet_cudnn(source) as printed:
                    graph.build_operation_graph()
            except (GraphNotSupportedError, ImportError) as exc:
                source = None
                reason, detail = refusal("the backend could not finalize its layout", exc)
                detail = _backend.with_printed(detail, printed)
        backend = _backend.BackendPlans(source, reason, detail if reason is not None else None)
        if source is not None:
            if self.deselected:
                source.graph.deselect_engines(sorted(self.deselected))
            if self.workspace_limit is not None:
                source.graph.deselect_workspace_greater_than(self.workspace_limit)
        self.lifecycle.freeze()
        family = family_for(graph)
        facts = None
        if family is not None and family.analyzer is not None:
            try:
                analyzer = resolve_hook(family.analyzer, what=f"family {family.name!r} analyzer")
            except ImportError as exc:
                self.declines[f"family {family.name}"] = f"analyzer unavailable: {exc}"
            else:
                facts = analyzer(graph)  # once per graph: _prepare runs once
        engines: tuple[BaseEngine, ...] = ()
        if family is not None:
            built = instantiate(family)
            self.declines.update(built.unavailable)
            engines = built.engines
            for engine in engines:
                if engine.name in self.deselected:
                    self.declines[engine.name] = "deselected by deselect_engines()"
                else:
                    self.engines.append(engine)
        kinds = PlanKinds(backend, engines, family, lambda name: self.declines.get(name, "not instantiated"))
        # the layout is read on demand: an engine that reads it only at build costs planning nothing
        request = EngineRequest(graph, facts, DeviceInfo.of_graph(graph), lambda: self.layout)
        return Prepared(backend, family, facts, kinds, request)

    @property
    def request(self) -> EngineRequest:
        """What every engine is handed for this graph (prepares the graph on first use)."""
        return self.prepare().request

    def create_execution_plans(self, modes: Iterable[Any] | None) -> None:
        with self.lock:
            require(
                self.lifecycle,
                "create_execution_plans()",
                NOT_PLANNED,
                "planning runs once per graph: switch plans with select_plan(), or build a new graph to "
                "plan differently",
            )
            modes = _modes(modes, "create_execution_plans()")
            prep = self.prepare()
            accepted, declined = heuristics.decline_reasons(self.engines, prep.request)
            self.declines.update(declined)
            entries = prep.backend.query(modes)
            family = prep.family
            hook = None
            if family is not None and family.heuristics is not None and prep.analyzed:
                hook = resolve_hook(family.heuristics, what=f"family {family.name!r} heuristics")
            plans = heuristics.rank(
                self.graph,
                accepted,
                entries,
                modes,
                family=family,
                hook=hook,
                facts=prep.facts,
                analyzed=prep.analyzed,
                device=prep.request.device,
            )
            from pygraph.tuning.plan_cache import recorded_first  # sqlite3 loads on first planning

            plans = recorded_first(self.graph, family, plans, self._replay_recorded)
            if not plans:
                raise GraphNotSupportedError(self.why_nothing())
            self._install(plans, modes, 0)

    def _replay_recorded(self, engine_id: int, knobs: Mapping[Any, Any] | None) -> PlanConfig:
        """The entry for a plan cache's recorded winner that ranking did not list, through its plan
        kind as create_execution_plan() replays it (a decline raises); an engine that
        deselect_engines() removed stays out."""
        prep = self.prepare()
        kind = prep.kinds.of(engine_id)
        if kind.deselected_by(self.deselected):
            raise GraphNotSupportedError(f"engine {engine_id} was removed by deselect_engines()")
        return kind.replay(prep.request, engine_id, knobs)

    def _install(self, plans: PlanList, modes: list[Any], index: int) -> None:
        self.plans, self.modes, self.index = plans, modes, index
        self.lifecycle.advance(GraphState.PLANNED)

    def why_nothing(self) -> str:
        prep = self.prepare()
        parts = [f"backend: {prep.backend.declined or 'offered no plan'}"]
        if prep.family is None:
            parts.append("no engine family claims this graph")
        parts += [f"{name}: {reason}" for name, reason in sorted(self.declines.items())]
        return "no plan serves graph " + repr(getattr(self.graph, "name", "")) + " -- " + "; ".join(parts)

    def create_execution_plan(self, engine_id: int, knobs: Mapping[Any, Any] | None) -> None:
        """Replay one ``(engine_id, knobs)`` (an autotune result) and pin it; knobs outside the engine's
        domain are refused here, before the graph is prepared or anything built."""
        validate_knobs(engine_id, knobs, call="create_execution_plan()")
        with self.lock:
            prep = self.prepare()
            key = PlanConfig(engine_id, knobs).key
            for i, cfg in enumerate(self.plans):
                if cfg.key == key:
                    self.index, self.pinned = i, True
                    return
            self.plans.append(prep.kinds.of(engine_id).replay(prep.request, engine_id, knobs))
            self.index, self.pinned = len(self.plans) - 1, True
            if not self.lifecycle.state.planned:
                self._install(self.plans, self.modes, self.index)

    # --- addressing the list ---------------------------------------------------------------------------

    def require_planned(self, call: str) -> None:
        require(self.lifecycle, call, PLANNED, "call create_execution_plans() first")

    def check_index(self, index: int, call: str) -> int:
        self.require_planned(call)
        if not isinstance(index, int) or isinstance(index, bool):
            raise OpInputError(f"{call}: a plan index is an int, got {type(index).__name__} {index!r}")
        if index < 0 or not self.plans.has(index):
            raise PlanIndexError(
                f"{call}: plan index {index} out of range for {len(self.plans)} plan(s) (0..{len(self.plans) - 1})"
            )
        return index

    def kind_of(self, cfg: PlanConfig) -> Any:
        return self.prepare().kinds.of(cfg.engine_id)

    def name_at(self, index: int, call: str = "get_plan_name_at_index()") -> str:
        cfg = self.plans[self.check_index(index, call)]
        return self.kind_of(cfg).name(cfg)

    def selected(self, call: str) -> SelectedPlan:
        """The selected entry, described the same way whichever kind serves it."""
        self.require_planned(call)
        if not self.plans:
            raise GraphNotSupportedError(
                f"{call}: graph {self.graph.name!r} has no plan left (deselect_engines() removed them all)"
            )
        cfg = self.plans[self.index]
        kind = self.kind_of(cfg)
        return SelectedPlan(
            kind.name(cfg),
            cfg.engine_id,
            MappingProxyType(dict(cfg.knobs or {})),
            kind.label,
            kind.engine,
            self.index,
        )

    def selected_engine(self) -> BaseEngine | None:
        """The selected entry's python engine; None for a backend entry or before planning."""
        if not self.lifecycle.state.planned or not self.plans:
            return None
        return self.kind_of(self.plans[self.index]).engine

    def backend_entries(self) -> list[PlanConfig]:
        self.require_planned("backend_plan_entries()")
        return list(self.prepare().backend.entries or [])

    def backend_declined(self, verbose: bool = False) -> str | None:
        """Why the backend offers nothing, in one line (``verbose``: the refusal's whole text, as
        cuDNN gave it); None when it does, or before the graph was prepared."""
        if self._prepared is None:
            return None
        backend = self._prepared.backend
        return backend.detail if verbose else backend.declined

    def select(self, index: int) -> None:
        with self.lock:
            self.index, self.pinned = self.check_index(index, "select_plan()"), True
            self.run = self.runners.get(self.index)

    def deselect_engines(self, names: Iterable[str]) -> None:
        try:
            names = set(names)
        except TypeError:
            names = {names}
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise OpInputError(f"deselect_engines(): expected engine names (str), got {bad[0]!r}")
        with self.lock:
            self.deselected |= names
            if self._prepared is not None and self._prepared.backend.source is not None:
                self._prepared.backend.source.graph.deselect_engines(sorted(names))
            if self.engines:
                self.engines = [e for e in self.engines if e.name not in names]
            if self.lifecycle.state.planned:
                # every index handed out (selected, built) is one the list knows: `moved` covers it
                moved = self.plans.keep(lambda cfg: not self.kind_of(cfg).deselected_by(names))
                self.compiled = {moved[i]: p for i, p in self.compiled.items() if i in moved}
                self.runners.clear()
                self.run = None
                self.index = moved.get(self.index, 0)

    def deselect_workspace_greater_than(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise OpInputError(
                f"deselect_workspace_greater_than(): expected a byte count (an int >= 0), got {limit!r}"
            )
        with self.lock:
            self.workspace_limit = limit
            if self._prepared is not None and self._prepared.backend.source is not None:
                self._prepared.backend.source.graph.deselect_workspace_greater_than(self.workspace_limit)

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
            request = self.request
            if self.workspace_limit is not None:
                kind.refuse_workspace_over(request, cfg, self.workspace_limit)
            compiled = kind.build(request, cfg, ctx if ctx is not None else self.context())
            self.compiled[index] = compiled
            if self.lifecycle.state < GraphState.BUILT:
                self.lifecycle.advance(GraphState.BUILT)
            return compiled

    def build_plans(self, policy: Any = None, ctx: ExecutionContext | None = None) -> None:
        """Walk from the selected index; the first entry that builds is selected (ALL: build every one)."""
        with self.lock:
            self.require_planned("build_plans()")
            policy = _policy(policy, "build_plans()")
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
            i = self.index - 1
            while self.plans.has(i + 1):  # past the ranked prefix only when every entry there declines
                i += 1
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
            self.require_planned("check_support()")
            cfg = self.plans[self.index]
            try:
                self.kind_of(cfg).check_support(self.request, cfg)
            except DECLINE_TYPES:
                if self.pinned or not self.plans.has(self.index + 1):
                    raise

    def workspace_at(self, index: int, call: str = "get_workspace_size_plan_at_index()") -> int:
        cfg = self.plans[self.check_index(index, call)]
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
                    usable = self.prepare().backend.source is not None
                    self._layout = layout_for(self.graph, backend_usable=usable)
        return self._layout

    def _runner(self, index: int) -> Any:
        runner = self.runners.get(index)
        if runner is None:
            runner = make_runner(
                self.graph, self.layout, self.compiled[index], self.name_at(index), self.graph.handle
            )
            self.runners[index] = runner
        return runner

    def build(self, modes: Iterable[Any] | None, policy: Any) -> None:
        """Plan (if not yet), check support, build: the classic one-call path, as one step under the
        lock, so concurrent first calls plan once."""
        _policy(policy, "build()")  # refused before anything is planned
        with self.lock:
            if not self.lifecycle.state.planned:
                self.create_execution_plans(modes)
            self.check_support()
            self.build_plans(policy)

    def ensure_built(self, ctx_handle: Any = None) -> Any:
        with self.lock:
            if not self.lifecycle.state.planned:
                self.create_execution_plans(None)
            if self.run is None:
                ctx = self.context(ctx_handle) if ctx_handle is not None else None
                self.build_plans(None, ctx)
            return self.run

    def execute(
        self,
        values: Any,
        workspace: Any,
        handle: Any,
        overrides: tuple,
        index: int | None = None,
        stream: Any = None,
    ) -> None:
        if index is None:
            run = self.ensure_built(handle)
            index = self.index
        else:
            self.check_index(index, "execute_plan_at_index()")
            run = self.runners.get(index)  # built before: no lock, as on execute()'s path
            if run is None:
                with self.lock:
                    self.build_at(index)
                    run = self._runner(index)
        if all(o is None for o in overrides):
            run(values, workspace, handle, stream)
            return
        plan, name = self.compiled[index], self.name_at(index)
        pack = normalize(self.layout, values, workspace)
        refuse_workspace(name, plan.get_workspace_size(), pack)
        if not getattr(plan, "checks_geometry", False):
            refuse_geometry(name, overridden_rows(self.layout, ShapeOverrides(*overrides)), pack)
        handle = self.graph.handle if handle is None else handle
        if stream is not None and not getattr(plan, "reads_stream", True):
            handle = backend_stream_handle(name, handle, stream)  # a backend plan runs on its handle's
        ctx = ExecutionContext(handle, stream, pack.workspace)
        plan.execute_with_overrides(self.graph, pack, ctx, ShapeOverrides(*overrides), name)


def _modes(modes: Any, call: str) -> list[Any]:
    """The heuristic modes a planning call was given, or OpInputError naming the one it cannot read."""
    try:
        return heuristics.normalize_modes(modes)
    except TypeError:
        pass
    if isinstance(modes, (str, bytes)) or not isinstance(modes, Iterable):
        raise OpInputError(
            f"{call}: modes is a list of heur_mode (A, B, FALLBACK, OPENSOURCE), got {modes!r}"
        )
    for mode in modes:
        try:
            convert_enum(mode, heur_mode)
        except TypeError:
            raise OpInputError(
                f"{call}: mode {mode!r} is not a heur_mode (one of {', '.join(heur_mode.__members__)})"
            ) from None
    raise OpInputError(f"{call}: cannot read the modes {modes!r}")


def _policy(policy: Any, call: str) -> Any:
    try:
        return convert_enum(
            policy if policy is not None else build_plan_policy.HEURISTICS_CHOICE, build_plan_policy
        )
    except TypeError:
        raise OpInputError(
            f"{call}: policy {policy!r} is not a build_plan_policy (one of {', '.join(build_plan_policy.__members__)})"
        ) from None


def _group_failures(failures: Mapping[str, str]) -> str:
    """One line per distinct reason, naming the first plan that gave it and how many more did."""
    by_reason: dict[str, list[str]] = {}
    for plan, reason in failures.items():
        by_reason.setdefault(reason, []).append(plan)
    return "; ".join(
        f"{plans[0]}{f' (and {len(plans) - 1} more)' if len(plans) > 1 else ''}: {reason}"
        for reason, plans in by_reason.items()
    )
