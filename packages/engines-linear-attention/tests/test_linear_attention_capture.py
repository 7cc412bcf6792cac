"""The linear-attention torch ops inside a (stood-in) CUDA-graph capture, on the CPU: a first call of
a key builds its graph, which a capture forbids, so it raises `StreamCaptureError` naming the op's
call and the graph before anything is built; once the op has run eagerly (forward and backward), the
same calls inside the capture are served by the graphs built then, with the same values, and build
nothing. ``op_support.capturing`` stands in for torch's capture state; the plans are the family's
CPU stand-ins (``gdn_stand_in``, ``kda_stand_in``). The device run (a real capture and replay) is
``test_linear_attention_capture_sm90.py``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph import op_support  # noqa: E402
from pygraph.errors import StreamCaptureError  # noqa: E402
from pygraph_linear_attention import gated_delta_net, gated_delta_net_v2, kimi_delta_attention  # noqa: E402
from pygraph_linear_attention.common import op_graphs  # noqa: E402

OPS = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
CALLS = {
    "gdn": r"pygraph_linear_attention\.gated_delta_net\(\)",
    "kda": r"pygraph_linear_attention\.kimi_delta_attention\(\)",
    "gdn2": r"pygraph_linear_attention\.gated_delta_net_v2\(\)",
}


def _inputs(op, lengths=(5, 1, 9), h=1, hv=2, d=64):
    gen = torch.Generator().manual_seed(0)
    t = sum(lengths)
    per_key = (d,) if op != "gdn" else ()
    x = {
        "q": torch.randn(t, h, d, generator=gen).bfloat16(),
        "k": torch.nn.functional.normalize(torch.randn(t, h, d, generator=gen), dim=-1).bfloat16(),
        "v": torch.randn(t, hv, d, generator=gen).bfloat16(),
        "g": torch.nn.functional.logsigmoid(torch.randn(t, hv, *per_key, generator=gen)),
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, d, generator=gen).bfloat16()
    x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return {n: v.requires_grad_(n not in ("cu_seqlens",)) for n, v in x.items()}


def _step(op, x):
    """Forward and backward: O and the gradient of every differentiable input."""
    o, _ = OPS[op](**x)
    leaves = [t for n, t in x.items() if n != "cu_seqlens"]
    grads = torch.autograd.grad(o.float().square().sum(), leaves)
    return [o.detach(), *grads]


def _check(op, monkeypatch, runs):
    x = _inputs(op)
    monkeypatch.setattr(op_support, "capturing", lambda device: True)  # as inside torch.cuda.graph()
    with pytest.raises(StreamCaptureError, match=rf"^{CALLS[op]}: the first call of graph \('{op}', "):
        OPS[op](**x)
    assert runs == [] and op_graphs.GRAPHS.builds == 0
    monkeypatch.setattr(op_support, "capturing", lambda device: False)
    eager = _step(op, x)  # the warm-up: the forward and backward graphs built
    assert op_graphs.GRAPHS.builds == 2
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    captured = _step(op, x)
    assert op_graphs.GRAPHS.builds == 2  # nothing built inside the capture
    assert all(torch.equal(a, b) for a, b in zip(eager, captured))
    assert runs == [op, f"{op}_bwd"] * 2


def test_gdn_refuses_a_first_call_inside_a_capture_and_serves_a_warmed_one(gdn_stand_in, monkeypatch):
    _check("gdn", monkeypatch, gdn_stand_in.runs)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_kda_and_gdn2_refuse_a_first_call_inside_a_capture_and_serve_a_warmed_one(
    kda_stand_in, monkeypatch, op
):
    _check(op, monkeypatch, kda_stand_in.runs)
