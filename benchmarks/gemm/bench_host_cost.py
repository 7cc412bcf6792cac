"""Host cost of one ``Graph.execute()``: a single-kernel python plan and a backend plan (H200).

Measured with `benchmarks.harness.burst_cost`: drain the queue, time a burst of N back-to-back execute() calls, take the
min over 25 reps, divide by N; bursts 1, 8 and 64. A number flat in the burst size is host-bound.
The python plan is split into entry + normalization vs the engine's own call.

Goals: entry + normalization <= 3 us; whole python-plan execute <= 8 us. Backend reference: 19-20 us.

When the gemm_sm90 engine can build here (the CuTe DSL importable, an SM90 device), real
gemm_sm90 plans are measured too, selected through the graph API, and printed last: execute(), the
engine's own call, the compiled function called with prebuilt arguments, the split, and the
device time per launch. The first plan offered is measured, and the first that differs from it in
splitting K. Last, two no-op CuTe DSL functions (cute_call_floor) place the compiled
function's own cost: argument conversion and launch vs what gemm's host code adds.

Run (needs torch, nvidia-cudnn-frontend and our packages; nvidia-cutlass-dsl for the gemm_sm90 rows):
    python -m benchmarks.gemm.bench_host_cost
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from benchmarks.harness import burst_cost
from pygraph.engines.base import BaseEngine, Capabilities, CompiledPlan, EngineRequest, PlanConfig

REPS, BURSTS = 25, (1, 8, 64)
# Seconds of the same calls before each timed set, so a host CPU that idled runs them at its working
# clock. Without it this script read execute() at 11.5-12.7 us minutes after bench_gemm (0.5 s of
# warm-up) read 5.2-5.9 us on the same host; with it, 7.5-8.5 us for gemm_sm90's 128x64 plan in a
# run where bench_gemm read 6.3-7.2 us (H200).
WARMUP_S = 0.2


def costs(call: Any, sync: Any) -> dict[int, float]:
    """Host microseconds per call at each burst size (min over REPS bursts), after WARMUP_S of warm-up."""
    return {n: burst_cost(call, n, reps=REPS, sync=sync, warmup_s=WARMUP_S) for n in BURSTS}


M, N, K = 256, 256, 128

# One no-op kernel taking the GEMM's launch arguments: the launch is real, the arithmetic is not.
_PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry noop_gemm(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 m, .param .u32 n,
                          .param .u32 k) { ret; }
"""


class _Driver:
    def __init__(self) -> None:
        cuda = ctypes.CDLL("libcuda.so.1")
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        if cuda.cuModuleLoadData(ctypes.byref(module), _PTX) != 0:
            raise RuntimeError("cuModuleLoadData failed")
        if cuda.cuModuleGetFunction(ctypes.byref(func), module, b"noop_gemm") != 0:
            raise RuntimeError("cuModuleGetFunction failed")
        self.launch = cuda.cuLaunchKernel
        self.launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.func = func.value


class _Plan(CompiledPlan):
    """The per-call pattern: facts fixed at build in a table, one closure that never raises.

    Positions are resolved at build; per call the closure reads three pointers and M/N/K from the
    pack and launches. What it refuses (a shape it was not built for) goes to `_check`, which
    names the rule and raises before anything launches.
    """

    def __init__(self, request: EngineRequest, driver: _Driver) -> None:
        node = request.graph.nodes[0]
        a, b, c = node.inputs["A"], node.inputs["B"], node.outputs["C"]
        layout = request.layout
        positions = (layout.position(a), layout.position(b), layout.position(c))
        built_for = (tuple(a.dim), tuple(b.dim))
        launch, func = driver.launch, driver.func
        u64, u32, vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p
        addr = ctypes.addressof
        pa, pb, pc = positions

        def run(pack: Any, stream: int) -> None:
            bufs = pack.buffers
            ba, bb, bc = bufs[pa], bufs[pb], bufs[pc]
            if (ba[1], bb[1]) != built_for:
                _check(ba, bb, built_for)
            args = (u64(ba[0]), u64(bb[0]), u64(bc[0]), u32(ba[1][-2]), u32(bb[1][-1]), u32(ba[1][-1]))
            params = (vp * 6)(*[addr(x) for x in args])
            launch(func, 1, 1, 1, 32, 1, 1, 0, stream or 0, params, None)

        self._run = run

    def execute(self, graph: Any, pack: Any, ctx: Any) -> None:
        self._run(pack, ctx.stream)


def _check(ba: Any, bb: Any, built_for: tuple) -> None:
    raise ValueError(
        f"noop_gemm: built for A{list(built_for[0])} B{list(built_for[1])}, got {list(ba[1])} {list(bb[1])}"
    )


class NoopGemm(BaseEngine):
    name = "noop_gemm"
    capabilities = Capabilities(sm_lo=90, sm_hi=90)
    driver: _Driver | None = None

    def check_support(self, request: EngineRequest) -> None:
        return None

    def build_plan(self, request: EngineRequest, plan: PlanConfig, ctx: Any) -> CompiledPlan:
        if NoopGemm.driver is None:
            NoopGemm.driver = _Driver()
        return _Plan(request, NoopGemm.driver)


# --- measurement -----------------------------------------------------------------------------------


def matmul_graph(Graph: Any, data_type: Any, handle: Any, name: str) -> tuple:
    g = Graph(name=name, io_data_type=data_type.BFLOAT16, compute_data_type=data_type.FLOAT, handle=handle)
    a = g.tensor(name="A", dim=[1, M, K], stride=[M * K, K, 1], data_type=data_type.BFLOAT16)
    b = g.tensor(name="B", dim=[1, K, N], stride=[K * N, N, 1], data_type=data_type.BFLOAT16)
    c = g.matmul(a, b, name="mm")
    c.set_output(True).set_name("C").set_data_type(data_type.BFLOAT16)
    return g, a, b, c


def main() -> int:
    import cudnn
    import torch

    from pygraph.engines.manifest import EngineFamily, EngineSlot
    from pygraph.execution.context import ExecutionContext
    from pygraph.execution.normalize import normalize
    from pygraph.graph import Graph
    from pygraph.ir.dtypes import data_type
    from pygraph.testing import manifest_override

    torch.zeros(1, device="cuda")  # primary context current on this thread
    sync = torch.cuda.synchronize
    handle = cudnn.create_handle()
    stream = torch.cuda.current_stream().cuda_stream
    cudnn.set_stream(handle, stream)
    A = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(1, K, N, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
    rows: list[tuple[str, dict[int, float]]] = []

    family = EngineFamily(
        name="bench_gemm",
        engine_id=20900,
        package="benchmarks.gemm.bench_host_cost",
        slots={"noop_gemm": EngineSlot(0, impl=("benchmarks.gemm.bench_host_cost", "NoopGemm"))},
        anchors=("MATMUL",),
    )
    with manifest_override([family]):
        g, a, b, c = matmul_graph(Graph, data_type, handle, "python_plan")
        g.create_execution_plans()
        g.build_plans()
        assert g.selected_engine is not None, g.plans
        values = {a: A, b: B, c: C}
        ws = torch.empty(1, device="cuda", dtype=torch.uint8)
        g.execute(values, None, handle)
        sync()
        planner = g.planner
        plan = planner.compiled[planner.index]
        pack = normalize(planner.layout, values, None)
        ctx = ExecutionContext(handle, stream, 0)
        rows.append(
            (
                "python plan: execute()",
                costs(lambda: g.execute(values, ws, handle), sync),
            )
        )
        rows.append(
            (
                "  engine call alone",
                costs(lambda: plan.execute(g, pack, ctx), sync),
            )
        )
        rows.append(
            (
                "  normalize alone",
                costs(lambda: normalize(planner.layout, values, None), sync),
            )
        )
        whole, engine = rows[-3][1], rows[-2][1]
        rows.append(("  entry + normalization", {n: whole[n] - engine[n] for n in BURSTS}))
        del ws

    with manifest_override([]):
        g, a, b, c = matmul_graph(Graph, data_type, handle, "backend_plan")
        g.create_execution_plans()
        g.build_plans()
        assert g.selected_engine is None
        values = {a: A, b: B, c: C}
        need = g.get_workspace_size()
        ws = torch.empty(max(need, 1), device="cuda", dtype=torch.uint8)
        g.execute(values, ws, handle)
        sync()
        ref = (A.float() @ B.float()).to(torch.bfloat16)
        torch.testing.assert_close(C, ref, atol=1e-1, rtol=2e-2)
        rows.append(
            (
                "backend plan: execute()",
                costs(lambda: g.execute(values, ws, handle), sync),
            )
        )

    gemm_rows = gemm_sm90_rows(Graph, data_type, handle, stream, sync, A, B, C)

    print(
        f"\nhost cost per execute(), us (min of {REPS} reps; {M}x{N}x{K} bf16; {torch.cuda.get_device_name()})"
    )
    print(f"{'path':32s}" + "".join(f"{'burst ' + str(n):>11s}" for n in BURSTS))
    for label, cells in rows:
        print(f"{label:32s}" + "".join(f"{cells[n]:11.2f}" for n in BURSTS))
    print("goals: entry + normalization <= 3 us, python execute() <= 8 us; backend reference 19-20 us")
    if gemm_rows is None:
        print("\ngemm_sm90: not measured (needs the CuTe DSL, `cutlass` importable, and an SM90 device)")
        return 0
    for name, plan_rows in gemm_rows:
        print(f"\n{name}, us ({M}x{N}x{K} bf16)")
        print(f"{'path':32s}" + "".join(f"{'burst ' + str(n):>11s}" for n in BURSTS))
        for label, cells in plan_rows:
            print(f"{label:32s}" + "".join(f"{cells[n]:11.2f}" for n in BURSTS))
    return 0


def gemm_sm90_rows(Graph: Any, data_type: Any, handle: Any, stream: int, sync: Any, A: Any, B: Any, C: Any):
    """[(plan name, rows)] for real gemm_sm90 plans selected through the graph API: the first one the
    heuristics offer and the first that differs from it in splitting K. None when it cannot build."""
    import importlib.util

    import torch

    if importlib.util.find_spec("cutlass") is None or torch.cuda.get_device_capability() != (9, 0):
        return None
    g, *_ = matmul_graph(Graph, data_type, handle, "gemm_sm90_names")
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    ours = [i for i, name in enumerate(names) if name.startswith("gemm_sm90")]
    if not ours:
        print(f"gemm_sm90: no plan offered ({g.decline_reasons().get('gemm_sm90', 'not in the list')})")
        return None
    split = "SPLIT_K=2" in names[ours[0]]
    picks = [ours[0], *[i for i in ours if ("SPLIT_K=2" in names[i]) != split][:1]]
    out = [gemm_plan_rows(Graph, data_type, handle, stream, sync, A, B, C, i) for i in picks]
    out.append(("no-op CuTe DSL functions (cute_call_floor)", floor_rows(stream, sync, A)))
    return out


def gemm_plan_rows(
    Graph: Any, data_type: Any, handle: Any, stream: int, sync: Any, A: Any, B: Any, C: Any, index: int
) -> tuple[str, list]:
    import torch

    from pygraph.execution.context import ExecutionContext
    from pygraph.execution.normalize import normalize

    g, a, b, c = matmul_graph(Graph, data_type, handle, f"gemm_sm90_plan_{index}")
    g.create_execution_plans()
    name = g.get_plan_name_at_index(index)
    g.select_plan(index)
    g.build_plans()
    planner = g.planner
    plan = planner.compiled[planner.index]
    assert type(plan).__name__ == "GemmSm90Plan", type(plan)
    values = {a: A, b: B, c: C}
    # a split-K plan's partials need the graph's workspace
    ws_bytes = g.get_workspace_size()
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda") if ws_bytes else None
    C.fill_(float("nan"))
    g.execute(values, ws, handle)
    sync()
    ref = (A.float() @ B.float()).to(torch.bfloat16)
    torch.testing.assert_close(C, ref, atol=1e-1, rtol=2e-2)
    pack = normalize(planner.layout, values, ws)
    ctx = ExecutionContext(handle, stream, ws.data_ptr() if ws is not None else 0)
    kp = plan._kernel
    split = {}
    if kp.needs_workspace:
        split = {"workspace": ws.data_ptr(), "semaphores": kp.semaphores(M, N, 1, stream)}
    direct = kp.kernel_args(
        A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, 1,
        (0, K, 1), (0, N, 1), (0, N, 1), stream=stream, **split,
    )  # fmt: skip
    rows = [
        (
            "gemm_sm90: execute()",
            costs(lambda: g.execute(values, ws, handle), sync),
        ),
        (
            "  engine call alone",
            costs(lambda: plan.execute(g, pack, ctx), sync),
        ),
        (
            "  compiled fn, prebuilt args",
            costs(lambda: kp.fn(*direct), sync),
        ),
        (
            "  normalize alone",
            costs(lambda: normalize(planner.layout, values, ws), sync),
        ),
    ]
    whole, engine = rows[0][1], rows[1][1]
    rows.append(("  entry + normalization", {n: whole[n] - engine[n] for n in BURSTS}))
    rows.append(("  device time per launch", {n: device_us(lambda: kp.fn(*direct), n) for n in BURSTS}))
    return name, rows


def device_us(call: Any, n: int, reps: int = 25) -> float:
    """Median over ``reps`` of the device time of ``n`` back-to-back launches (CUDA events), per launch.
    A ~1 ms spin kernel goes first, so the launches queue behind it and the host's pace does not show."""
    import statistics

    import torch

    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        start.record()
        for _ in range(n):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / n)
    return statistics.median(times)


def floor_rows(stream: int, sync: Any, A: Any) -> list:
    from benchmarks.gemm.cute_call_floor import compile_floor, floor_args

    like_gemm, bare = compile_floor()
    args24, args2 = floor_args(A.data_ptr(), stream)
    return [
        (
            "  24 arguments (gemm's)",
            costs(lambda: like_gemm(*args24), sync),
        ),
        ("  pointer + stream", costs(lambda: bare(*args2), sync)),
    ]


if __name__ == "__main__":
    sys.exit(main())
