"""``pygraph demo``: for each family, build its example graph, then show the engines and the plan list.

It grows as families land. On a machine without a GPU it still runs and says what it could not do.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from typing import Any

from pygraph import engines

__all__ = ["EXAMPLES", "run_demo"]


def _example_gemm(pg: Any) -> Any:
    g = pg.Graph(name="demo_gemm", io_data_type=pg.data_type.BFLOAT16, compute_data_type=pg.data_type.FLOAT)
    a = g.tensor(name="A", dim=[1, 256, 128], data_type=pg.data_type.BFLOAT16)
    b = g.tensor(name="B", dim=[1, 128, 512], data_type=pg.data_type.BFLOAT16)
    bias = g.tensor(name="bias", dim=[1, 1, 512], data_type=pg.data_type.BFLOAT16)
    c = g.matmul(a, b, compute_data_type=pg.data_type.FLOAT, name="mm")
    y = g.gelu_approx_tanh(input=g.bias(input=c, bias=bias, name="add_bias"), name="act")
    y.set_output(True).set_data_type(pg.data_type.BFLOAT16)
    return g


def _example_sdpa(pg: Any) -> Any:
    g = pg.Graph(name="demo_sdpa", io_data_type=pg.data_type.BFLOAT16, compute_data_type=pg.data_type.FLOAT)
    shape = [2, 8, 1024, 128]
    q, k, v = (g.tensor(name=n, dim=shape, data_type=pg.data_type.BFLOAT16) for n in "qkv")
    o, _stats = g.sdpa(
        q=q, k=k, v=v, attn_scale=128**-0.5, generate_stats=False, use_causal_mask=True, name="attn"
    )
    o.set_output(True)
    return g


def _example_gdn(pg: Any) -> Any:
    g = pg.Graph(name="demo_gdn", io_data_type=pg.data_type.BFLOAT16, compute_data_type=pg.data_type.FLOAT)
    t, h, d = 2048, 8, 128
    q, k, v = (g.tensor(name=n, dim=[t, h, d], data_type=pg.data_type.BFLOAT16) for n in "qkv")
    gate = g.tensor(name="g", dim=[t, h], data_type=pg.data_type.FLOAT)
    beta = g.tensor(name="beta", dim=[t, h], data_type=pg.data_type.BFLOAT16)
    cu = g.tensor(name="cu_seqlens", dim=[3], data_type=pg.data_type.INT32)
    o, _final = g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, name="gdn")
    o.set_output(True)
    return g


EXAMPLES: dict[str, Callable[[Any], Any]] = {
    "gemm": _example_gemm,
    "sdpa_fwd": _example_sdpa,
    "gdn": _example_gdn,
}


def _installed(family: engines.EngineFamily) -> bool:
    return importlib.util.find_spec(family.package.split(".")[0]) is not None


def _show_plans(graph: Any, head: int = 6, tail: int = 3) -> bool:
    """Plan the graph and print the plan list; False when planning failed (and why)."""
    import pygraph as pg

    try:
        graph.create_execution_plans([pg.heur_mode.A, pg.heur_mode.FALLBACK])
    except Exception as exc:  # the demo reports; it never hides what went wrong
        print(f"    planning: {type(exc).__name__}: {exc}")
        return False
    backend = graph.backend_decline_reason()
    print(f"    backend: {'declined: ' + backend if backend else 'offers plans'}")
    for name, reason in graph.decline_reasons().items():
        print(f"    declined: {name}: {reason}")
    count = graph.get_execution_plan_count()
    print(f"    plan list ({count} entries):")
    shown = list(range(count)) if count <= head + tail else [*range(head), None, *range(count - tail, count)]
    for i in shown:
        if i is None:
            print(f"      ... {count - head - tail} more ...")
        else:
            print(f"      [{i}] {graph.get_plan_name_at_index(i)}")
    return True


def run_demo(families: Iterable[str] | None = None) -> int:
    import pygraph as pg

    wanted = set(families or ())
    for fam in engines.families():
        if wanted and fam.name not in wanted:
            continue
        print(f"family {fam.name} (block {fam.engine_id}, anchors {', '.join(fam.anchors)})")
        if not _installed(fam):
            print(f"    not installed: pip install pygraph-core[{_extra_of(fam)}]")
            continue
        built = engines.instantiate(fam)
        offered = engines.offered_ids(fam)
        print(f"    engines offered: {', '.join(f'{n}={i}' for n, i in offered.items()) or 'none'}")
        for name, reason in built.unavailable.items():
            print(f"      {name}: {reason}")
        opt_in = [n for n, s in fam.slots.items() if s.opt_in and n not in offered]
        if opt_in:
            print(f"    opt-in, not offered ({engines.manifest.OPT_IN_ENV}): {', '.join(opt_in)}")
        example = EXAMPLES.get(fam.name)
        if example is None:
            print("    no example graph for this family yet")
            continue
        try:
            graph = example(pg)
        except Exception as exc:
            print(f"    example graph could not be built: {type(exc).__name__}: {exc}")
            continue
        print(
            f"    example graph {graph.name!r}: family_for -> {getattr(engines.family_for(graph), 'name', None)}"
        )
        if built.engines:
            _show_verdicts(graph, built.engines)
        if _show_plans(graph):
            _execute_on_gpu(graph)
    return 0


def _show_verdicts(graph: Any, engines: Iterable[Any]) -> None:
    """Ask each engine, as planning will, whether it serves the graph."""
    from pygraph.engines.base import DECLINE_TYPES

    try:
        request = graph.engine_request()
    except DECLINE_TYPES as exc:
        print(f"      engines not asked: {type(exc).__name__}: {exc}")
        return
    for engine in engines:
        try:
            engine.check_support(request)
            print(f"      {engine.name}: accepts")
        except DECLINE_TYPES as exc:
            print(f"      {engine.name}: declines: {exc}")


def _execute_on_gpu(graph: Any, reps: int = 20) -> None:
    """Build the plan list's first plan that builds, run it on random inputs, time it."""
    try:
        import torch
    except ImportError:
        print("    execution: skipped: torch is not installed (pip install pygraph-core[torch])")
        return
    if not torch.cuda.is_available():
        print("    execution: skipped: no CUDA device visible; a GPU run walks the plan list above")
        return
    from pygraph.ir.dtypes import _TORCH_NAMES

    torch_dtype = {
        dt: getattr(torch, name) for name, dt in reversed(_TORCH_NAMES.items()) if hasattr(torch, name)
    }

    try:
        graph.build_plans()
        bindings = {}
        for t in graph.engine_request().layout.tensors:
            buf = torch.empty_strided(
                tuple(t.dim), tuple(t.stride), dtype=torch_dtype[t.data_type], device="cuda"
            )
            bindings[t] = buf.normal_() if buf.is_floating_point() else buf.zero_()
        workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
        graph.execute(bindings, workspace)
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.execute(bindings, workspace)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    except Exception as exc:  # the demo reports what it could not do
        print(f"    execution: failed: {type(exc).__name__}: {exc}")
        return
    plan = graph.selected_plan
    print(
        f"    executed on {torch.cuda.get_device_name()} by the {plan.kind} plan {plan.name}: "
        f"{sorted(times)[reps // 2]:.3f} ms (median of {reps})"
    )


def _extra_of(family: engines.EngineFamily) -> str:
    dist = family.distribution or ""
    return dist.removeprefix("pygraph-engines-") or family.name
