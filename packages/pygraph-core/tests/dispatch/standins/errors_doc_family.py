"""The host family the examples of docs/errors.md run against (tests/dispatch/test_errors_doc.py).

One engine, ``host_matmul`` (knob ``BLOCK_K`` in {0, 32}), whose plan reads its operands' pointers
and needs a 256-byte workspace (nothing is computed), and an opt-in one, ``host_fast``. Reached only
through the manifest record `FAMILY`.
"""

from __future__ import annotations

from typing import Any

from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, EngineRequest, PlanConfig
from pygraph.engines.manifest import EngineFamily, EngineSlot

WORKSPACE = 256


class HostPlan(CompiledPlan):
    def get_workspace_size(self) -> int:
        return WORKSPACE

    def execute(self, graph: Any, pack: Any, ctx: Any) -> None:
        pack.pointers()


class HostMatmul(BaseEngine):
    name = "host_matmul"
    capabilities = Capabilities(sm_lo=0, sm_hi=999, knob_domains={"BLOCK_K": (0, 32)})

    def check_support(self, request: EngineRequest) -> None:
        return None

    def build_plan(self, request: EngineRequest, plan: PlanConfig, ctx: Any) -> CompiledPlan:
        return HostPlan()

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        return WORKSPACE


class HostFast(HostMatmul):
    name = "host_fast"


FAMILY = EngineFamily(
    name="host_matmul",
    engine_id=20900,
    package=__name__,
    slots={
        "host_matmul": EngineSlot(0, impl=(__name__, "HostMatmul")),
        "host_fast": EngineSlot(1, impl=(__name__, "HostFast"), opt_in=True),
    },
    anchors=("MATMUL",),
)
