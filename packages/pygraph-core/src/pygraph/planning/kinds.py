"""Plan kinds: what serves each entry of the plan list, resolved through one table.

A plan kind answers the same questions for every entry it serves: its ``name``, ``check_support``,
``build`` (to a `CompiledPlan`), ``workspace``, whether a workspace limit refuses it, and whether
``deselect_engines`` drops it; ``label`` ("python" or "backend") and ``engine`` (the python engine,
None for the backend) describe it. `PlanKinds.of` maps an engine id to its kind through
`pygraph.engines.engine_ids.entry_kind`, the one table, so no caller branches on which side an
entry is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pygraph.engines.base import BaseEngine, CompiledPlan, EngineRequest, PlanConfig
from pygraph.engines.engine_ids import EntryKind, entry_kind
from pygraph.engines.manifest import engine_for_id
from pygraph.errors import GraphNotSupportedError
from pygraph.execution.context import ExecutionContext
from pygraph.planning.backend import BackendKind, BackendPlans, DelegatingKind

__all__ = ["EngineKind", "PlanKinds"]


class EngineKind:
    """The plan kind of one python engine's entries."""

    label = "python"

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

    def refuse_workspace_over(self, request: EngineRequest, cfg: PlanConfig, limit: int) -> None:
        """Decline the entry when it needs more workspace than deselect_workspace_greater_than() allows."""
        needed = self.workspace(request, cfg)
        if needed > limit:
            raise GraphNotSupportedError(
                f"{self.name(cfg)} needs {needed} bytes of workspace, over the limit {limit}"
            )

    def deselected_by(self, names: set[str]) -> bool:
        return self.engine.name in names

    def replay(self, request: EngineRequest, engine_id: int, knobs: Mapping[Any, Any] | None) -> PlanConfig:
        """The entry for a replayed ``(engine_id, knobs)``, once the engine accepts the graph."""
        self.engine.check_support(request)
        return PlanConfig(engine_id, knobs)


class PlanKinds:
    """The kinds one graph's entries resolve to: its family's engines and the backend's two kinds."""

    def __init__(
        self,
        backend: BackendPlans,
        engines: Iterable[BaseEngine],
        family: Any,
        why_missing: Callable[[str], str],
    ) -> None:
        self._engines = {e.engine_id: EngineKind(e) for e in engines}
        self._family = family
        self._why_missing = why_missing  # engine name -> why it was not built for this graph
        configs, delegating = BackendKind(backend), DelegatingKind(backend)
        self._by_entry: dict[EntryKind, Callable[[int], Any]] = {
            EntryKind.PYTHON: self._engine_kind,
            EntryKind.BACKEND: lambda _id: configs,
            EntryKind.DELEGATING: lambda _id: delegating,
        }

    def of(self, engine_id: int) -> Any:
        """The kind serving entries of ``engine_id``; a python engine not built for this graph raises
        `GraphNotSupportedError` saying why."""
        return self._by_entry[entry_kind(engine_id)](engine_id)

    def _engine_kind(self, engine_id: int) -> EngineKind:
        kind = self._engines.get(engine_id)
        if kind is not None:
            return kind
        ref = engine_for_id(engine_id)
        family = getattr(self._family, "name", None)
        raise GraphNotSupportedError(
            f"engine {ref.engine_name} ({engine_id}) of family {ref.family.name!r} is not offered for this "
            f"graph (its family: {family!r}): {self._why_missing(ref.engine_name)}"
        )
