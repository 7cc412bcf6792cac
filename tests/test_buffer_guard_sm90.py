"""On the device, one case per family (gdn, kda, gdn2, sdpa, gemm, and the cuDNN backend's plan):
a call whose output buffer is smaller than the tensor the plan runs is refused before the launch,
and the memory past that buffer is untouched. Run it under compute-sanitizer, which must report
no error: ``compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -m sm90 -s
tests/test_buffer_guard_sm90.py`` (after ``source /tmp/site/env.sh``, scripts/device/README.md).

Each case plans the graph, selects its python engine's first plan by name, runs one correct call
(the output, poisoned with NaN first, comes back finite), then passes the first rows of a larger,
sentinel-filled allocation as the output: `OperandGeometryError`, and every sentinel intact.
"""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.execution import OperandGeometryError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sm90

_TORCH = {dt.BFLOAT16: torch.bfloat16, dt.HALF: torch.float16, dt.FLOAT: torch.float32, dt.INT32: torch.int32}
SENTINEL = 1024.0  # exact in bf16, fp16 and fp32


def _la_graph(op: str, t: int = 128, h: int = 2, d: int = 128) -> tuple[pygraph.Graph, str]:
    g = pygraph.Graph(name=op, io_data_type=dt.BFLOAT16)
    per_key = [d] if op in ("kda", "gdn2") else []
    ports = {
        "q": g.tensor(name="q", dim=[t, h, d]),
        "k": g.tensor(name="k", dim=[t, h, d]),
        "v": g.tensor(name="v", dim=[t, h, d]),
        "g": g.tensor(name="g", dim=[t, h, *per_key], data_type=dt.FLOAT),
        "beta": g.tensor(name="beta", dim=[t, h, *(per_key if op == "gdn2" else [])], data_type=dt.FLOAT),
        "cu_seqlens": g.tensor(name="cu_seqlens", dim=[2], data_type=dt.INT32),
    }
    if op == "gdn2":
        ports["w"] = g.tensor(name="w", dim=[t, h, d])
    o, _ = getattr(g, op)(**ports)
    o.set_name("O")
    return g, "O"


def _sdpa_graph() -> tuple[pygraph.Graph, str]:
    g = pygraph.Graph(name="sdpa", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    q, k, v = (g.tensor(name=n, dim=[1, 2, 256, 128]) for n in ("q", "k", "v"))
    o, _ = g.sdpa(q=q, k=k, v=v, attn_scale=0.088, generate_stats=False)
    o.set_output(True).set_name("O")
    return g, "O"


def _gemm_graph() -> tuple[pygraph.Graph, str]:
    g = pygraph.Graph(name="gemm", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    a = g.tensor(name="A", dim=[1, 256, 128], stride=[256 * 128, 128, 1])
    b = g.tensor(name="B", dim=[1, 128, 256], stride=[128 * 256, 256, 1])
    c = g.matmul(a, b)
    c.set_output(True).set_name("C").set_data_type(dt.BFLOAT16)
    return g, "C"


CASES = {
    "gdn": (lambda: _la_graph("gdn"), "gdn_sm90"),
    "kda": (lambda: _la_graph("kda"), "kda_sm90"),
    "gdn2": (lambda: _la_graph("gdn2"), "gdn2_sm90"),
    "sdpa": (_sdpa_graph, "sdpa_fwd_sm90"),
    "gemm": (_gemm_graph, "gemm_sm90"),
    "backend": (_gemm_graph, None),  # cuDNN's own plan: the per-call path holds its buffers
}


def _select(g: pygraph.Graph, prefix: str | None) -> str:
    """Select and build the first plan named ``prefix[...]`` (None: the first of cuDNN's own)."""
    g.create_execution_plans()
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    python = ("gemm_sm90[", "gemm_sm80[")
    for i, name in enumerate(names):
        if name.startswith(f"{prefix}[") if prefix else not name.startswith(python):
            g.select_plan(i)
            g.build_plans()
            return name
    pytest.fail(f"no plan {prefix or 'of the backend'} in {names}")


def _operands(g: pygraph.Graph, out_name: str) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)
    values = {}
    for t in g.engine_request().layout.tensors:
        dtype = _TORCH[t.data_type]
        if t.name == "cu_seqlens":
            values[t] = torch.tensor([0, g.find_tensor("q").dim[0]], dtype=dtype, device="cuda")
        elif t.name == out_name:
            values[t] = torch.full(t.dim, float("nan"), dtype=dtype, device="cuda")
        elif t.name == "g":
            values[t] = -torch.rand(t.dim, generator=gen, device="cuda").to(dtype) * 0.1
        elif t.name == "beta":
            values[t] = torch.rand(t.dim, generator=gen, device="cuda").to(dtype)
        else:
            values[t] = (torch.randn(t.dim, generator=gen, device="cuda") * 0.1).to(dtype)
    return values


@pytest.mark.parametrize("case", list(CASES))
def test_a_too_small_output_is_refused_before_the_launch(case, monkeypatch):
    monkeypatch.setenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", "")
    build, engine = CASES[case]
    g, out_name = build()
    plan = _select(g, engine)
    values = _operands(g, out_name)
    out = g.find_tensor(out_name)
    workspace = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    g.execute(values, workspace)
    torch.cuda.synchronize()
    assert torch.isfinite(values[out].float()).all(), f"{plan}: the correct call left NaN in {out_name}"
    rows = out.dim[-2] if case in ("sdpa", "gemm", "backend") else out.dim[0]
    whole = torch.full((_count(out.dim),), SENTINEL, dtype=_TORCH[out.data_type], device="cuda")
    small = _first_rows(whole, out.dim, rows // 2, sdpa_like=case in ("sdpa", "gemm", "backend"))
    with pytest.raises(OperandGeometryError) as refused:
        g.execute({**values, out: small}, workspace)
    torch.cuda.synchronize()
    assert (whole.float() == SENTINEL).all(), f"{plan}: the refused call wrote into the buffer"
    print(f"{case}: {plan} refused a {list(small.shape)} {out_name} for {list(out.dim)}: {refused.value}")


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _first_rows(whole, dims, rows: int, sdpa_like: bool):
    """A contiguous view of ``whole`` shaped like ``dims`` but with ``rows`` rows (the row axis is
    the second to last for attention and GEMM, the first for linear attention's THD)."""
    if sdpa_like:
        shape = (*dims[:-2], rows, dims[-1])
    else:
        shape = (rows, *dims[1:])
    return whole[: _count(shape)].view(shape)
