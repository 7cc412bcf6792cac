"""Backend path on the device: lower, plan with the backend, execute, compare with torch.

Run on an H200 (SM90). Dispatch-level assertion: `selected_engine is None` (a backend plan ran).
"""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")


def _run(g: pygraph.Graph, bindings: dict) -> None:
    # These tests prove the BACKEND path: python engines that could serve the graph step aside.
    g.deselect_engines(["gemm_sm90"])
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([heur_mode.A, heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute(bindings, workspace)
    torch.cuda.synchronize()
    assert g.selected_engine is None
    assert g.lowered is not None


def _handle():
    cudnn = pytest.importorskip("cudnn")
    return cudnn.create_handle()


def test_matmul_bias_relu() -> None:
    torch.manual_seed(0)
    a = torch.randn(2, 64, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(2, 128, 96, device="cuda", dtype=torch.float16)
    bias = torch.randn(1, 1, 96, device="cuda", dtype=torch.float16)
    out = torch.full((2, 64, 96), float("nan"), device="cuda", dtype=torch.float16)
    g = pygraph.Graph("mm_bias_relu", dt.HALF, dt.FLOAT, dt.FLOAT, handle=_handle())
    ta, tb, tbias = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
    c = g.relu(g.bias(g.matmul(ta, tb), tbias))
    c.set_output(True).set_data_type(dt.HALF)
    _run(g, {ta: a, tb: b, tbias: bias, c: out})
    ref = torch.relu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=1e-2)


def test_layernorm_training() -> None:
    torch.manual_seed(0)
    n, h = 512, 768
    x = torch.randn(n, h, 1, 1, device="cuda", dtype=torch.float16)
    scale = torch.randn(1, h, 1, 1, device="cuda", dtype=torch.float32)
    bias = torch.randn(1, h, 1, 1, device="cuda", dtype=torch.float32)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    mean = torch.full((n, 1, 1, 1), float("nan"), device="cuda", dtype=torch.float32)
    inv_var = torch.full_like(mean, float("nan"))
    g = pygraph.Graph("layernorm", dt.HALF, dt.FLOAT, dt.FLOAT, handle=_handle())
    tx, ts, tb = g.tensor_like(x), g.tensor_like(scale), g.tensor_like(bias)
    te = g.tensor([1, 1, 1, 1], data_type=dt.FLOAT, is_pass_by_value=True)
    ty, tm, tv = g.layernorm(pygraph.norm_forward_phase.TRAINING, tx, ts, tb, te)
    ty.set_output(True)
    tm.set_output(True).set_data_type(dt.FLOAT)
    tv.set_output(True).set_data_type(dt.FLOAT)
    _run(g, {tx: x, ts: scale, tb: bias, te: eps, ty: y, tm: mean, tv: inv_var})
    xf = x.float().view(n, h)
    ref = torch.nn.functional.layer_norm(xf, (h,), scale.view(h), bias.view(h), eps=1e-5)
    torch.testing.assert_close(y.float().view(n, h), ref, atol=3e-2, rtol=1e-2)
    torch.testing.assert_close(mean.view(n), xf.mean(-1), atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(
        inv_var.view(n), torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5), atol=1e-2, rtol=1e-3
    )


def test_sdpa_forward() -> None:
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 256, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    scale = d**-0.5
    g = pygraph.Graph("sdpa", dt.HALF, dt.FLOAT, dt.FLOAT, handle=_handle())
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    to, stats = g.sdpa(tq, tk, tv, is_inference=True, attn_scale=scale, use_causal_mask=True)
    assert stats is None
    to.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    _run(g, {tq: q, tk: k, tv: v, to: o})
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True, scale=scale
    )
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=1e-2)
