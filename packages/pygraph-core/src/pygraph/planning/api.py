"""The Graph's planning and execution methods (mixed into `pygraph.Graph`).

A thin façade: the state lives in one `Planner` hung on the graph (``graph._planner``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pygraph.engines.base import EngineRequest, PlanConfig
from pygraph.planning.planner import SelectedPlan, planner_of

__all__ = ["PlanningMixin"]


class PlanningMixin:
    """Planning/execution methods of `pygraph.Graph`."""

    # --- planning ----------------------------------------------------------------------------------

    def create_execution_plans(self, modes: Iterable[Any] | None = None) -> None:
        """Build the ONE ranked plan list (default modes [A, FALLBACK]). One-shot: a second call raises."""
        planner_of(self).create_execution_plans(modes)

    def create_execution_plan(self, engine_id: int, knobs: Mapping[Any, Any] | None = None) -> Any:
        """Replay ``(engine_id, knobs)`` (a python or backend id) and pin it."""
        planner_of(self).create_execution_plan(engine_id, knobs)
        return self

    def engine_request(self) -> EngineRequest:
        """What planning hands this graph's engines (the graph, its family's facts, the operand
        layout, the declared device). Validates and freezes the graph as planning does; for trying
        an engine on a graph directly: ``engine.check_support(graph.engine_request())``."""
        return planner_of(self).request

    @property
    def plans(self) -> tuple[PlanConfig, ...]:
        return tuple(planner_of(self).plans)

    @property
    def selected_plan(self) -> SelectedPlan:
        """The selected plan: its name, engine id, knobs, kind ("python" or "backend") and python
        engine (None for a backend plan), whichever kind serves it. Needs the plan list."""
        return planner_of(self).selected("selected_plan")

    @property
    def selected_engine(self) -> Any:
        """The python engine of the selected plan; None for a backend plan or before planning
        (classic parity; `selected_plan` describes either kind)."""
        return planner_of(self).selected_engine()

    def backend_plan_entries(self) -> list[PlanConfig]:
        """The backend's own entries (mode-tagged, the delegating one untagged); [] when it declined."""
        return planner_of(self).backend_entries()

    def backend_decline_reason(self) -> str | None:
        return planner_of(self).backend_declined()

    def decline_reasons(self) -> dict[str, str]:
        """Engine name -> why it does not serve this graph (after planning)."""
        return dict(planner_of(self).declines)

    def check_support(self) -> Any:
        planner_of(self).check_support()
        return self

    def build_plans(self, policy: Any = None) -> Any:
        planner_of(self).build_plans(policy)
        return self

    def build(self, modes: Iterable[Any] | None = None, policy: Any = None) -> Any:
        """Plan (if not yet), check support, build: the classic one-call path."""
        planner_of(self).build(modes, policy)
        return self

    def select_plan(self, index: int) -> Any:
        planner_of(self).select(index)
        return self

    def deselect_engines(self, names: Iterable[str]) -> Any:
        planner_of(self).deselect_engines([names] if isinstance(names, str) else names)
        return self

    def deselect_workspace_greater_than(self, limit: int) -> Any:
        planner_of(self).deselect_workspace_greater_than(limit)
        return self

    # --- the list, by index ------------------------------------------------------------------------

    def get_execution_plan_count(self) -> int:
        return len(planner_of(self).plans)

    def get_plan_name_at_index(self, index: int) -> str:
        return planner_of(self).name_at(index)

    def get_engine_and_knobs_at_index(self, index: int) -> tuple[int, dict[Any, Any]]:
        p = planner_of(self)
        cfg = p.plans[p.check_index(index, "get_engine_and_knobs_at_index()")]
        return cfg.engine_id, dict(cfg.knobs or {})

    def build_plan_at_index(self, index: int) -> Any:
        p = planner_of(self)
        p.build_at(p.check_index(index, "build_plan_at_index()"))
        return self

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return planner_of(self).workspace_at(index)

    def get_workspace_size(self) -> int:
        p = planner_of(self)
        p.require_planned("get_workspace_size()")
        return p.workspace_at(p.index, "get_workspace_size()")

    # --- execution ---------------------------------------------------------------------------------

    def execute(
        self,
        tensors: Mapping[Any, Any],
        workspace: Any = None,
        handle: Any = None,
        override_uids: Any = None,
        override_shapes: Any = None,
        override_strides: Any = None,
    ) -> None:
        """Run the selected plan on ``tensors`` (keyed by Tensor, name or uid).

        Plans and builds on first use. Buffers may be torch tensors, ``__dlpack__`` or
        ``__cuda_array_interface__`` producers, or int device addresses.
        """
        try:
            run = self._planner.run
        except AttributeError:
            run = None
        if run is not None and override_uids is None and override_shapes is None and override_strides is None:
            run(tensors, workspace, handle)
            return
        planner_of(self).execute(
            tensors, workspace, handle, (override_uids, override_shapes, override_strides)
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
    ) -> None:
        planner_of(self).execute(
            tensors, workspace, handle, (override_uids, override_shapes, override_strides), index=index
        )
