"""The backend as one more plan kind: its per-mode query, its entries, and its compiled plan.

The backend participates in ranking; it is never a hard dependency. No backend installed, a graph
it cannot lower, or a decline of every mode query gives no entries and a recorded reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pygraph.engines.base import DECLINE_TYPES, CompiledPlan, EngineRequest, PlanConfig, ShapeOverrides
from pygraph.engines.engine_ids import BACKEND_HEURISTIC_ENGINE_ID
from pygraph.errors import GraphNotSupportedError, UnknownKnobError
from pygraph.execution.context import ExecutionContext
from pygraph.ir.dtypes import heur_mode
from pygraph.lowering.backend import backend_handle

__all__ = [
    "BackendKind",
    "BackendPlan",
    "BackendPlans",
    "BackendSource",
    "DelegatingKind",
    "DelegatingPlan",
    "open_backend",
    "refusal_line",
]

DELEGATING_NAME = "backend_heuristics"


@dataclasses.dataclass
class BackendSource:
    """A lowered backend graph and how to speak to it.

    ``graph`` is the backend builder (``cudnn._pybind_module.backend_graph`` or a test double);
    ``to_mode``/``to_knob`` translate our enums to its; ``declines`` are the exception types that
    mean "not supported" on its side.
    """

    graph: Any
    to_mode: Callable[[Any], Any]
    to_knob: Callable[[Any], Any] = lambda knob: knob
    declines: tuple[type[BaseException], ...] = (GraphNotSupportedError,)
    # cuDNN itself: its refusals are put in one line (`refusal_line`); a test double's are kept whole
    is_cudnn: bool = False


@contextlib.contextmanager
def quiet_cudnn(source: BackendSource | None) -> Iterator[list[str]]:
    """Around a call into cuDNN on a machine without a GPU: what the library prints on stderr there
    (its sublibraries' "Unable to load any of {libcudnn_engines_...}") is kept out of the user's
    terminal and yielded, as lines, for the refusal's whole text. Anywhere else (a GPU, a test
    double, no file descriptor 2) it does nothing."""
    printed: list[str] = []
    from pygraph.tuning.device import no_device_reason

    if source is None or not source.is_cudnn or no_device_reason() is None:
        yield printed
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield printed
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield printed
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            printed += sink.read().decode(errors="replace").splitlines()


def with_printed(text: str, printed: list[str]) -> str:
    """``text`` and what cuDNN printed meanwhile (`quiet_cudnn`), if anything."""
    return "\n".join([text, "cuDNN printed:", *printed]) if printed else text


def refusal_line(text: str) -> str:
    """What `Graph.backend_decline_reason()` says for a cuDNN refusal ``text``: one line.

    On a machine without a GPU the backend cannot run at all, and cuDNN's dump there (every engine's
    ``CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING``, "driver version is insufficient")
    says so less clearly than the device probe: the line is the probe's reason. Elsewhere it is the
    refusal's first line and how many follow. The whole text stays available
    (``backend_decline_reason(verbose=True)``, the CLI's ``--verbose``).
    """
    from pygraph.tuning.device import no_device_reason

    why = no_device_reason()
    if why is not None:
        return f"cuDNN backend unavailable: {why}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return text.strip()
    return f"{lines[0]} (and {len(lines) - 1} more lines: backend_decline_reason(verbose=True) shows them)"


def open_backend(graph: Any, refused: str | None = None) -> tuple[BackendSource | None, str | None]:
    """The graph's backend side, or (None, why there is none). ``refused``: why lowering failed
    (validate()'s refusal); otherwise the graph is lowered (`graph.lowered`) or python-only."""
    if refused is not None:
        return None, refused
    if graph.is_python_only:
        names = sorted({n.type.name for n in graph.nodes if not getattr(n, "is_lowerable", True)})
        return None, f"python-only op(s) {', '.join(names) or '?'} have no backend lowering"
    lowered = graph.lowered
    if lowered is None:
        return None, "the backend cannot lower this graph: it was not lowered"
    try:
        import cudnn
    except ImportError as exc:
        return None, f"the backend cannot lower this graph: {exc}"
    return (
        BackendSource(
            lowered.backend,
            to_mode=lambda m: cudnn.heur_mode[m.name],
            to_knob=lambda k: cudnn.knob_type[k if isinstance(k, str) else k.name],
            declines=(cudnn.cudnnGraphNotSupportedError, GraphNotSupportedError),
            is_cudnn=True,
        ),
        None,
    )


class BackendPlans:
    """The backend's entries for one graph: asked once, one query per mode, spans recorded."""

    def __init__(
        self, source: BackendSource | None, reason: str | None = None, detail: str | None = None
    ) -> None:
        self.source = source
        self.declined: str | None = reason  # one line
        self.detail: str | None = detail if detail is not None else reason  # the refusal's whole text
        self.entries: list[PlanConfig] | None = None
        self.spans: list[tuple[Any, int, int]] = []  # (mode, first cpp index, end)
        self.succeeded: dict[Any, bool] = {}

    def query(self, modes: Sequence[Any]) -> list[PlanConfig]:
        if self.entries is not None:
            return self.entries
        self.entries = []
        if self.source is None:
            return self.entries
        g, declines = self.source.graph, self.source.declines
        at = g.get_execution_plan_count()
        failure: BaseException | None = None
        with quiet_cudnn(self.source) as printed:
            for mode in modes:
                try:
                    g.create_execution_plans([self.source.to_mode(mode)])
                except declines as exc:
                    failure = exc
                    self.succeeded[mode] = False
                    continue
                # "succeeded" per call, not read off the spans: an OPENSOURCE query adds no plan.
                self.succeeded[mode] = True
                now = g.get_execution_plan_count()
                if now > at:
                    self.spans.append((mode, at, now))
                    at = now
        if not any(self.succeeded.values()):
            why = f"{type(failure).__name__}: {failure}" if failure else "no mode was queried"
            self.detail = with_printed(why, printed)
            cudnn_said = failure is not None and self.source.is_cudnn
            self.declined = refusal_line(self.detail) if cudnn_said else self.detail
            return self.entries
        seen: set[Any] = set()
        for i in range(g.get_execution_plan_count()):
            engine_id, knobs = g.get_engine_and_knobs_at_index(i)
            cfg = PlanConfig(engine_id, dict(knobs), cpp_index=i, mode=self.mode_of(i))
            if cfg.key not in seen:  # one config several modes returned: its first (real) span wins
                seen.add(cfg.key)
                self.entries.append(cfg)
        if self.succeeded.get(heur_mode.OPENSOURCE) or (not self.entries and g.get_engine_count()):
            # Candidates the backend holds but never exposes as plans: one entry, chosen by the backend.
            self.entries.insert(0, PlanConfig(BACKEND_HEURISTIC_ENGINE_ID))
        return self.entries

    def mode_of(self, cpp_index: int) -> Any:
        for mode, lo, hi in self.spans:
            if lo <= cpp_index < hi:
                return mode
        return None

    def append(self, engine_id: int, knobs: Mapping[Any, Any] | None) -> int:
        """Add one explicit config to the backend's list; returns the index it landed at."""
        if self.source is None:
            raise GraphNotSupportedError(f"backend engine {engine_id} cannot be replayed: {self.declined}")
        g = self.source.graph
        at = g.get_execution_plan_count()
        native = {}
        for knob, value in (knobs or {}).items():
            try:
                native[self.source.to_knob(knob)] = value
            except (KeyError, AttributeError):
                raise UnknownKnobError(
                    f"create_execution_plan(): backend engine {engine_id} has no knob {knob!r} (given the "
                    f"value {value!r}); backend knobs are knob_type names (TILE_SIZE, STAGES, SPLIT_K_SLC, ...)",
                    engine=f"backend engine {engine_id}",
                    knob=str(getattr(knob, "name", knob)),
                ) from None
        try:
            g.create_execution_plan(engine_id, native)
        except self.source.declines as exc:
            raise GraphNotSupportedError(f"backend engine {engine_id} {dict(knobs or {})}: {exc}") from exc
        return at


class BackendPlan(CompiledPlan):
    """A built backend config: executes the lowered graph's plan at ``cpp_index`` with the same
    variant pack, and honours execute-time shape overrides (the backend's dynamic shapes)."""

    reads_stream = False

    def __init__(self, backend: Any, cpp_index: int, workspace: int) -> None:
        self._run = backend._execute_with_raw_ptrs
        self._backend = backend
        self.cpp_index = cpp_index
        self._workspace = workspace

    def get_workspace_size(self) -> int:
        return self._workspace

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        handle = ctx.handle
        if handle is not None and not isinstance(handle, int):
            handle = backend_handle(handle)
        self._run(pack.address, len(pack.buffers), ctx.workspace, handle or 0, self.cpp_index)

    def execute_with_overrides(
        self, graph: Any, pack: Any, ctx: ExecutionContext, overrides: ShapeOverrides, plan_name: str
    ) -> None:
        ptrs = dict(zip(pack.uids, pack.pointers()))
        handle = backend_handle(ctx.handle)
        self._backend._execute_plan_at_index(ptrs, ctx.workspace, self.cpp_index, handle, *overrides)


class DelegatingPlan(BackendPlan):
    """The delegating entry, built: runs the plan the backend's own ``build_plans`` chose."""

    # The raw-pointer execute reads index -1 as "the plan build_plans chose".
    CHOSEN_INDEX = -1

    def __init__(self, backend: Any, workspace: int) -> None:
        super().__init__(backend, self.CHOSEN_INDEX, workspace)

    def execute_with_overrides(
        self, graph: Any, pack: Any, ctx: ExecutionContext, overrides: ShapeOverrides, plan_name: str
    ) -> None:
        ptrs = dict(zip(pack.uids, pack.pointers()))
        self._backend._execute(ptrs, ctx.workspace, backend_handle(ctx.handle), *overrides)


class BackendKind:
    """The plan kind of the backend's concrete configs: each addressed by its index in the lowered
    graph's own list (``cfg.cpp_index``)."""

    label = "backend"
    engine = None

    def __init__(self, plans: BackendPlans) -> None:
        self.plans = plans

    def _graph(self, cfg: PlanConfig) -> Any:
        if self.plans.source is None:
            raise GraphNotSupportedError(f"backend plan {cfg!r}: {self.plans.declined}")
        return self.plans.source.graph

    def _declined(self, cfg: PlanConfig, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except self.plans.source.declines as exc:
            if isinstance(exc, DECLINE_TYPES):
                raise
            raise GraphNotSupportedError(f"backend plan {cfg!r}: {exc}") from exc

    def name(self, cfg: PlanConfig) -> str:
        return self._graph(cfg).get_plan_name_at_index(cfg.cpp_index)

    def check_support(self, request: EngineRequest, cfg: PlanConfig) -> None:
        g = self._graph(cfg)
        self._declined(cfg, g.check_support)

    def build(self, request: EngineRequest, cfg: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        g = self._graph(cfg)
        self._declined(cfg, lambda: g.build_plan_at_index(cfg.cpp_index))
        return BackendPlan(g, cfg.cpp_index, g.get_workspace_size_plan_at_index(cfg.cpp_index))

    def workspace(self, request: EngineRequest, cfg: PlanConfig) -> int:
        return self._graph(cfg).get_workspace_size_plan_at_index(cfg.cpp_index)

    def refuse_workspace_over(self, request: EngineRequest, cfg: PlanConfig, limit: int) -> None:
        """Nothing to refuse: deselect_workspace_greater_than() is applied by the backend itself."""

    def deselected_by(self, names: set[str]) -> bool:
        """False: the backend applies deselect_engines() to its own list."""
        return False

    def replay(self, request: EngineRequest, engine_id: int, knobs: Mapping[Any, Any] | None) -> PlanConfig:
        """The entry for a replayed ``(engine_id, knobs)``, appended to the backend's own list."""
        return PlanConfig(engine_id, knobs, cpp_index=self.plans.append(engine_id, knobs))


class DelegatingKind(BackendKind):
    """The plan kind of the delegating entry: the backend picks among candidates it does not expose."""

    def name(self, cfg: PlanConfig) -> str:
        return DELEGATING_NAME

    def build(self, request: EngineRequest, cfg: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        import cudnn

        g = self._graph(cfg)
        self._declined(cfg, lambda: g.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE))
        return DelegatingPlan(g, g.get_workspace_size())

    def workspace(self, request: EngineRequest, cfg: PlanConfig) -> int:
        return self._graph(cfg).get_workspace_size()
