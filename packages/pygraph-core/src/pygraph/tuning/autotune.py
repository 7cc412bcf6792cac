"""Autotune: time the head of a graph's plan list, select the fastest, record it in the plan cache.

The plan list can be long (a GEMM graph's holds every config of the domain, 12,096 entries), so
autotune times a bound the caller sets: by default the first 8 plans that build of each python
engine and the backend's first 2 entries, in plan-list order. The first plan that builds (the one
``build_plans()`` would run) is always among them, so the winner is never slower than the default
as measured. Each candidate is built through the planner's normal build path, so a decline
advances to the next entry, as in ``build_plans()``; each is run through
``graph.execute_plan_at_index``, the path users call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pygraph.engines.base import DECLINE_TYPES
from pygraph.errors import GraphNotSupportedError, OpInputError
from pygraph.execution.errors import OperandError, ShapeOverrideError
from pygraph.tuning.timing import CudaEventTimer, Timer, median_ms

__all__ = ["AutotuneResult", "Bound", "Trial", "autotune", "head_bound", "per_engine_bound", "time_plans"]

BACKEND_GROUP = "backend"

# What an attempt to run a built candidate may raise and still be "not this plan" rather than a
# bug: the typed refusals of one execute() (a workspace too small, an operand that does not fit).
_RUN_REFUSALS = (*DECLINE_TYPES, OperandError, ShapeOverrideError)


@dataclasses.dataclass
class Trial:
    """One entry of the plan list as autotune saw it: timed (``time_ms``) or skipped (``skipped``)."""

    index: int
    name: str
    engine_id: int
    knobs: Mapping[str, Any]
    kind: str  # "python" or "backend"
    group: str  # the engine's name, or "backend" for the backend's entries
    time_ms: float | None = None
    times_ms: tuple[float, ...] = ()
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "knobs": dict(self.knobs), "times_ms": list(self.times_ms)}


@dataclasses.dataclass
class AutotuneResult:
    """What autotune timed and chose. ``first`` is the first plan that built (the default choice),
    ``best`` the fastest; ``recorded`` the cache entry (None with ``not_recorded`` saying why)."""

    trials: list[Trial]
    best: Trial
    first: Trial
    recorded: Any = None
    not_recorded: str | None = None

    @property
    def timed(self) -> list[Trial]:
        return [t for t in self.trials if t.time_ms is not None]

    @property
    def speedup(self) -> float:
        """The default first plan's time over the winner's (1.0 when the default won)."""
        return self.first.time_ms / self.best.time_ms if self.best.time_ms else 1.0

    def to_dict(self) -> dict[str, Any]:
        recorded = self.recorded.to_dict() if self.recorded is not None else None
        return {
            "best": self.best.to_dict(),
            "first": self.first.to_dict(),
            "speedup": self.speedup,
            "recorded": recorded,
            "not_recorded": self.not_recorded,
            "trials": [t.to_dict() for t in self.trials],
        }


@dataclasses.dataclass
class Bound:
    """Which plan-list entries to build and time, counted per group (an engine's name, or
    "backend") as they build: at most ``per_engine`` of each python engine, ``backend`` of the
    backend's, ``total`` in all (None: no bound); ``backend_first`` adds the backend's first entry
    past ``total`` (the anchor ``pygraph bench`` reports ratios against)."""

    what: str
    per_engine: int | None = None
    backend: int | None = None
    total: int | None = None
    backend_first: bool = False
    taken: dict[str, int] = dataclasses.field(default_factory=dict)

    def wants(self, group: str) -> bool:
        taken = self.taken.get(group, 0)
        if self.backend_first and group == BACKEND_GROUP and taken == 0:
            return True
        if self.total is not None and sum(self.taken.values()) >= self.total:
            return False
        limit = self.backend if group == BACKEND_GROUP else self.per_engine
        return limit is None or taken < limit

    def took(self, group: str) -> None:
        self.taken[group] = self.taken.get(group, 0) + 1

    def full(self, groups: Sequence[str]) -> bool:
        return not any(self.wants(g) for g in groups)


def per_engine_bound(top: int | None = 8, backend_top: int | None = 2) -> Bound:
    """The first ``top`` plans that build of each python engine and the backend's first
    ``backend_top`` entries (None: no bound)."""
    _check_count("top", top)
    _check_count("backend_top", backend_top, allow_zero=True)
    engines = "all buildable plans" if top is None else f"the first {top} buildable plans"
    backend = "all" if backend_top is None else f"the first {backend_top}"
    return Bound(f"{engines} per engine and {backend} of the backend's", per_engine=top, backend=backend_top)


def head_bound(count: int, *, backend_first: bool = True) -> Bound:
    """The first ``count`` plans that build, whatever serves them, and (``backend_first``) the
    backend's first entry that builds, wherever it is (``pygraph bench``)."""
    _check_count("count", count)
    return Bound(f"the first {count} buildable plans", total=count, backend_first=backend_first)


def _check_count(name: str, value: Any, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OpInputError(f"autotune(): {name} must be an int >= {low} or None, got {value!r}")


def _group_of(planner: Any, cfg: Any) -> tuple[str, str]:
    """(group, kind label) of a plan-list entry: a python engine's entries group under its name."""
    kind = planner.kind_of(cfg)
    return (BACKEND_GROUP if kind.engine is None else kind.engine.name), kind.label


def _candidates(
    planner: Any, bound: Bound, progress: Callable[..., None] | None
) -> Iterator[tuple[Trial, Any]]:
    """Walk the plan list in order, building what the bound wants: (trial, compiled or None)."""
    plans = planner.plans
    groups = sorted({_group_of(planner, cfg)[0] for cfg in plans})
    for index, cfg in enumerate(plans):
        if bound.full(groups):
            return
        group, label = _group_of(planner, cfg)
        if not bound.wants(group):
            continue
        trial = Trial(index, planner.name_at(index), cfg.engine_id, dict(cfg.knobs or {}), label, group)
        if progress is not None:
            progress("build", trial)
        try:
            compiled = planner.build_at(index)
        except DECLINE_TYPES as exc:
            trial.skipped = f"declined at build: {type(exc).__name__}: {exc}"
            yield trial, None
            continue
        bound.took(group)
        yield trial, compiled


def _workspace_for(workspace: Any, compiled: Sequence[Any]) -> Any:
    """The workspace to run with: ``workspace`` itself, or (a callable) what it allocates for the
    largest need among ``compiled``."""
    if callable(workspace):
        need = max((c.get_workspace_size() for c in compiled), default=0)
        return workspace(need)
    return workspace


def time_plans(
    graph: Any,
    operands: Any,
    workspace: Any = None,
    *,
    bound: Bound,
    reps: int = 20,
    warmup: int = 3,
    timer: Timer | None = None,
    progress: Callable[..., None] | None = None,
    call: str = "autotune()",
) -> list[Trial]:
    """Build what ``bound`` wants from the head of the plan list, time each, return every trial.

    ``operands`` is what ``graph.execute`` takes; ``workspace`` a buffer, None, or a callable that
    allocates one for a byte count (called once, with the largest need among the built plans).
    ``progress(stage, trial)`` is called before each build ("build") and each timing ("time").
    """
    _check_count("reps", reps)
    _check_count("warmup", warmup, allow_zero=True)
    if not graph.state.planned:
        graph.create_execution_plans()
    planner = graph.planner
    timer = timer if timer is not None else CudaEventTimer(call)
    trials, built = [], []
    for trial, compiled in _candidates(planner, bound, progress):
        trials.append(trial)
        if compiled is not None:
            built.append((trial, compiled))
    buffer = _workspace_for(workspace, [c for _, c in built])
    for trial, _ in built:
        if progress is not None:
            progress("time", trial)

        def run(index: int = trial.index) -> None:
            graph.execute_plan_at_index(operands, buffer, index=index)

        try:
            times = tuple(float(t) for t in timer(run, warmup=warmup, reps=reps, plan=trial))
        except _RUN_REFUSALS as exc:
            trial.skipped = f"refused to run: {type(exc).__name__}: {exc}"
            continue
        if not times:
            raise OpInputError(f"{call}: the timer returned no times for {trial.name}")
        trial.times_ms, trial.time_ms = times, median_ms(times)
    return trials


def autotune(
    graph: Any,
    operands: Any,
    workspace: Any = None,
    *,
    top: int | None = 8,
    backend_top: int | None = 2,
    reps: int = 20,
    warmup: int = 3,
    timer: Timer | None = None,
    record: bool = True,
    progress: Callable[..., None] | None = None,
) -> AutotuneResult:
    """Time the head of ``graph``'s plan list, select the fastest, record it (`Graph.autotune`)."""
    from pygraph.tuning import plan_cache

    bound = per_engine_bound(top, backend_top)
    trials = time_plans(
        graph, operands, workspace, bound=bound, reps=reps, warmup=warmup, timer=timer, progress=progress
    )
    timed = [t for t in trials if t.time_ms is not None]
    if not timed:
        skipped = "; ".join(f"#{t.index} {t.name}: {t.skipped}" for t in trials) or "the plan list is empty"
        raise GraphNotSupportedError(
            f"autotune(): no plan of graph {graph.name!r} could be timed within {bound.what}: {skipped}"
        )
    best = min(timed, key=lambda t: (t.time_ms, t.index))
    first = timed[0]
    planner = graph.planner
    planner.select(best.index)
    result = AutotuneResult(trials, best, first)
    if not record:
        result.not_recorded = "record=False"
        return result
    family = planner.prepare().family
    result.recorded, result.not_recorded = plan_cache.record(
        graph,
        family,
        best.engine_id,
        best.knobs,
        plan_name=best.name,
        time_ms=best.time_ms,
        first_ms=first.time_ms,
        first_name=first.name,
        reps=reps,
    )
    return result
