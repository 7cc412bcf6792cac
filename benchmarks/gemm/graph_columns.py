"""Benchmark columns that go through pygraph's graph API: the cuDNN backend plan and gemm_sm90.

Registered into bench_gemm.EXTRA_COLUMNS by ``bench_gemm.py --graph``. Each column builds the graph
once (plan, build), checks the output against the fp32 reference on a NaN-poisoned buffer, and
returns the callable that is timed: one ``graph.execute()``, host path included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import pygraph
from pygraph import data_type as dt

_DT = {torch.bfloat16: dt.BFLOAT16, torch.float16: dt.HALF}


def build_side(g: Any, *, backend: bool, context: str = "") -> None:
    """Plan and build ``g`` with one side: the cuDNN backend's plan, or gemm_sm90's first-named config
    (even in a cell where the backend leads); raises if planning selected the other."""
    if backend:
        g.deselect_engines(["gemm_sm90"])
    g.create_execution_plans()
    if not backend:
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        g.select_plan(next(i for i, name in enumerate(names) if name.startswith("gemm_sm90[")))
    g.build_plans()
    want = "backend" if backend else "gemm_sm90"
    got = "backend" if g.selected_engine is None else g.selected_engine.name
    if got != want:
        raise RuntimeError(f"{context}expected a {want} plan, planning selected {got}: {g.decline_reasons()}")


def checked_call(g: Any, bindings: dict, out: Any, ref: Any, what: str) -> Callable[[], Any]:
    """Execute the built ``g`` once into ``out`` (NaN-poisoned by the caller), check it against the
    fp32 ``ref`` (relative Frobenius error below 2e-2; ``out``'s first batch), and return the call
    that is timed: one ``graph.execute()`` with its own workspace."""
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(bindings, ws)
    torch.cuda.synchronize()
    err = ((out[0].float() - ref).norm() / ref.norm()).item()
    if not err < 2e-2:
        raise RuntimeError(f"{what} output is wrong: relative error {err:.2e}")
    return lambda: g.execute(bindings, ws)


def _graph(a: Any, b: Any, bias: Any, fused: bool, *, backend: bool):
    import cudnn

    io = _DT[a.dtype]
    a3, b3 = a.unsqueeze(0), b.unsqueeze(0)
    g = pygraph.Graph(
        name="bench_gemm", io_data_type=io, compute_data_type=dt.FLOAT, handle=cudnn.create_handle()
    )
    ta, tb = g.tensor_like(a3), g.tensor_like(b3)
    x = g.matmul(ta, tb, compute_data_type=dt.FLOAT, name="mm")
    bindings = {ta: a3, tb: b3}
    if fused:
        bias3 = bias.view(1, 1, -1)
        tbias = g.tensor_like(bias3)
        bindings[tbias] = bias3
        x = g.gelu_approx_tanh(input=g.bias(input=x, bias=tbias, name="bias"), name="act")
    x.set_output(True).set_data_type(io)
    build_side(g, backend=backend)
    out = torch.full((1, a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=a.dtype)
    bindings[x] = out
    ref = F.gelu(torch.addmm(bias, a, b).float(), approximate="tanh") if fused else (a @ b).float()
    return checked_call(g, bindings, out, ref, f"{'backend' if backend else 'gemm_sm90'} plan")


def backend_column(a: Any, b: Any, bias: Any, fused: bool):
    return _graph(a, b, bias, fused, backend=True)


def engine_column(a: Any, b: Any, bias: Any, fused: bool):
    return _graph(a, b, bias, fused, backend=False)


def register(columns: dict) -> None:
    columns["cudnn"] = backend_column
    columns["graph"] = engine_column
