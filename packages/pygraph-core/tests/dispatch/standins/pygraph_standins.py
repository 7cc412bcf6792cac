"""Stand-in engines for the dispatch suite: no arithmetic, they record what they were handed.

Reached only through manifest records naming ("pygraph_standins", "Alpha") etc., given to
`pygraph.testing.manifest_override`. Behaviour is steered through `BEHAVIOUR` / `HOOK`.
Imports nothing but pygraph (the import-boundary test plans with it in a fresh interpreter).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, EngineRequest, PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import heur_mode

# engine name -> "accept" | "decline" (check_support) | "decline_build" | "import_build" | "bug" | "bug_build"
BEHAVIOUR: dict[str, str] = {}
# "place_first" (ours, then backend) | "backend_first" | "unoffered" | "marker_left" | "dupes" |
# "deferred" (place_first's list, mode A's TILE=64 configs in one Deferred block per engine; each
# block built appends its engine id to HOOK["built"]) | "deferred_foreign" (a block yielding
# another engine's config) | "deferred_unoffered" (a block of an engine not offered)
HOOK: dict[str, Any] = {"style": "place_first"}
CALLS: list[tuple[Any, ...]] = []
ANALYZED: list[Any] = []
REQUESTS: list[tuple[str, EngineRequest]] = []  # (engine name, what check_support was handed)
_lock = threading.Lock()


def reset() -> None:
    BEHAVIOUR.clear()
    HOOK.clear()
    HOOK["style"] = "place_first"
    CALLS.clear()
    ANALYZED.clear()
    REQUESTS.clear()


@dataclasses.dataclass(frozen=True)
class Facts:
    node_count: int


def analyze(graph: Any) -> Facts:
    ANALYZED.append(graph)
    return Facts(len(graph.nodes))


class _Plan(CompiledPlan):
    def __init__(self, engine: _StandIn, plan: PlanConfig, workspace: int) -> None:
        self.engine, self.plan, self.workspace = engine, plan, workspace

    def get_workspace_size(self) -> int:
        return self.workspace

    def execute(self, graph: Any, pack: Any, ctx: Any) -> None:
        record = (
            self.engine.name,
            dict(self.plan.knobs or {}),
            pack.pointers(),
            [b.shape for b in pack.buffers],
            ctx,
        )
        with _lock:
            CALLS.append(record)
        hook = HOOK.get("on_execute")
        if hook is not None:
            hook(self.engine, pack, ctx)


class _StandIn(BaseEngine):
    capabilities = Capabilities(sm_lo=80, sm_hi=120, knob_domains={"TILE": (128, 64)})
    workspace = 0

    def check_support(self, request: EngineRequest) -> None:
        REQUESTS.append((self.name, request))
        what = BEHAVIOUR.get(self.name, "accept")
        if what == "decline":
            raise GraphNotSupportedError(f"{self.name}: told to decline")
        if what == "decline_ni":
            raise NotImplementedError(f"{self.name}: not implemented")
        if what == "bug":
            raise KeyError(f"{self.name}: a bug, not a decline")

    def build_plan(self, request: EngineRequest, plan: PlanConfig, ctx: Any) -> CompiledPlan:
        what = BEHAVIOUR.get(self.name, "accept")
        with _lock:
            CALLS.append(("build", self.name, dict(plan.knobs or {}), ctx))
        if what == "decline_build":
            raise GraphNotSupportedError(f"{self.name}: cannot build {dict(plan.knobs or {})}")
        if what == "import_build":
            raise ImportError(f"{self.name}: its DSL is missing")
        if what == "bug_build":
            raise ZeroDivisionError(f"{self.name}: a bug in build")
        return _Plan(self, plan, self.workspace)

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        return self.workspace


class Alpha(_StandIn):
    name = "alpha"


class Beta(_StandIn):
    name = "beta"


class Gamma(_StandIn):
    name = "gamma"
    workspace = 256


def recommend(
    modes: list[Any],
    facts: Facts,
    offered: dict[str, int],
    backend_entries: list[PlanConfig],
    *,
    device: Any = None,
) -> list:
    HOOK["seen"] = (list(modes), facts, dict(offered), list(backend_entries))
    HOOK["device"] = device
    style = HOOK["style"]
    if style == "unoffered":
        return [PlanConfig(max(offered.values()) + 50, {"TILE": 128})]
    if style == "marker_left":
        return [PLACE_BACKEND]
    if style.startswith("deferred"):
        # imported here: a test's child process may run another checkout's pygraph with this module
        from pygraph.engines.heuristics import Deferred
    if style == "deferred_foreign":
        first, other = list(offered.values())[:2]
        return [PlanConfig(first, {"TILE": 128}), Deferred(first, lambda: [PlanConfig(other, {"TILE": 64})])]
    if style == "deferred_unoffered":
        stranger = max(offered.values()) + 50
        return [
            PlanConfig(min(offered.values()), {"TILE": 128}),
            Deferred(stranger, lambda: [PlanConfig(stranger, {"TILE": 64})]),
        ]

    def later(eid: int) -> Deferred:
        def build() -> list[PlanConfig]:
            HOOK.setdefault("built", []).append(eid)
            return [PlanConfig(eid, {"TILE": 64})]

        return Deferred(eid, build)

    def propose(kind: Any) -> list[PlanConfig]:
        tiles = (128, 64) if kind is heur_mode.A else (64,)
        ours = [PlanConfig(eid, {"TILE": t}) for t in tiles for eid in offered.values()]
        if style == "deferred" and kind is heur_mode.A:
            ours = [*ours[: len(offered)], *(later(eid) for eid in offered.values())]
        if style == "dupes":
            ours = ours + ours
        if style == "backend_first":
            return [PLACE_BACKEND, *ours]
        return [*ours, PLACE_BACKEND]

    return assemble(modes, propose, backend_entries)
