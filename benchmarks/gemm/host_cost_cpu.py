"""Host cost of one ``Graph.execute()`` on the CPU: a proxy for the entry + normalization budget.

Same method as bench_host_cost (min over 25 reps of a burst of N back-to-back calls, divided
by N; bursts 1, 8, 64), with torch CPU tensors and a stand-in python plan that reads its three
operands from the pack and launches nothing. So ``execute()`` minus the plan's own call is what
the graph API costs per call: entry (Graph.execute -> planner -> runner) plus `normalize`.

No GPU needed (host tensors are one device, so the device rule passes as it would on CUDA):
    .venv/bin/python -m benchmarks.gemm.host_cost_cpu
"""

from __future__ import annotations

import sys
from typing import Any

from benchmarks.gemm.bench_host_cost import matmul_graph
from benchmarks.harness import burst_cost
from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, EngineRequest, PlanConfig

REPS, BURSTS = 25, (1, 8, 64)
M, N, K = 256, 256, 128


class _Plan(CompiledPlan):
    """A stand-in plan in the per-call pattern: positions resolved at build, three reads per call."""

    reads_stream = False

    def __init__(self, request: EngineRequest) -> None:
        node = request.graph.nodes[0]
        layout = request.layout
        pa, pb, pc = (layout.position(t) for t in (node.inputs["A"], node.inputs["B"], node.outputs["C"]))

        def run(pack: Any) -> None:
            bufs = pack.buffers
            bufs[pa], bufs[pb], bufs[pc]

        self._run = run

    def execute(self, graph: Any, pack: Any, ctx: Any) -> None:
        self._run(pack)


class NoopPlanEngine(BaseEngine):
    name = "noop_plan"
    capabilities = Capabilities(sm_lo=0, sm_hi=1000)

    def check_support(self, request: EngineRequest) -> None:
        return None

    def build_plan(self, request: EngineRequest, plan: PlanConfig, ctx: Any) -> CompiledPlan:
        return _Plan(request)


def main() -> int:
    import torch

    from pygraph.engines.manifest import EngineFamily, EngineSlot
    from pygraph.execution.context import ExecutionContext
    from pygraph.execution.normalize import normalize
    from pygraph.graph import Graph
    from pygraph.ir.dtypes import data_type
    from pygraph.testing import manifest_override

    A = torch.randn(1, M, K, dtype=torch.bfloat16)
    B = torch.randn(1, K, N, dtype=torch.bfloat16)
    C = torch.empty(1, M, N, dtype=torch.bfloat16)
    family = EngineFamily(
        name="bench_cpu",
        engine_id=20900,
        package="benchmarks.gemm.host_cost_cpu",
        slots={"noop_plan": EngineSlot(0, impl=("benchmarks.gemm.host_cost_cpu", "NoopPlanEngine"))},
        anchors=("MATMUL",),
    )
    rows: list[tuple[str, dict[int, float]]] = []
    with manifest_override([family]):
        g, a, b, c = matmul_graph(Graph, data_type, None, "cpu_plan")
        g.create_execution_plans()
        g.build_plans()
        assert g.selected_engine is not None, (g.plans, g.decline_reasons())
        planner = g.planner
        plan = planner.compiled[planner.index]
        layout = planner.layout
        for label, values in (
            ("keyed by Tensor", {a: A, b: B, c: C}),
            ("keyed by name", {"A": A, "B": B, "C": C}),
        ):
            g.execute(values)
            pack = normalize(layout, values, None)
            ctx = ExecutionContext(None, None, 0)
            whole = {n: burst_cost(lambda v=values: g.execute(v), n) for n in BURSTS}
            engine = {n: burst_cost(lambda p=pack, x=ctx: plan.execute(g, p, x), n) for n in BURSTS}
            norm = {n: burst_cost(lambda v=values: normalize(layout, v, None), n) for n in BURSTS}
            rows.append((f"execute() [{label}]", whole))
            rows.append(("  plan call alone", engine))
            rows.append(("  normalize alone", norm))
            rows.append(("  entry + normalization", {n: whole[n] - engine[n] for n in BURSTS}))
        # a split-K plan's call carries a workspace tensor as well
        values, ws = {a: A, b: B, c: C}, torch.empty(1 << 20, dtype=torch.uint8)
        rows.append(
            (
                "normalize with a workspace tensor",
                {n: burst_cost(lambda v=values: normalize(layout, v, ws), n) for n in BURSTS},
            )
        )

    print(
        f"\nhost cost per execute() on the CPU, us (min of {REPS} reps; {M}x{N}x{K} bf16 torch CPU tensors)"
    )
    print(f"{'path':36s}" + "".join(f"{'burst ' + str(n):>11s}" for n in BURSTS))
    for label, cells in rows:
        print(f"{label:36s}" + "".join(f"{cells[n]:11.2f}" for n in BURSTS))
    print("goal (on the device): entry + normalization <= 3 us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
