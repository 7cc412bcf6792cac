"""The sdpa torch op in CUDA graphs, on the device: forward and backward captured with
``torch.cuda.graph`` after an eager warm-up on a side stream (torch's recipe), replayed with new
values written into the captured inputs and compared with an eager run of the same values, on the
backend's plan and on the CuTe DSL engines; a first call (a graph build) inside a capture raises
`StreamCaptureError` and leaves the process usable; and `torch.compile(mode="reduce-overhead")` of a
small attention block (cudagraph trees) trains a few steps matching eager mode. The CPU side of the
same rules (the stream, no sync, the refusal) is ``test_sdpa_ops.py`` and
``pygraph-core/tests/test_op_support_capture.py``.
"""

from __future__ import annotations

import copy

import pytest

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from pygraph.errors import StreamCaptureError  # noqa: E402
from pygraph.op_support import GraphCache  # noqa: E402
from pygraph.testing import capture_against_eager  # noqa: E402
from pygraph_sdpa import op_graphs  # noqa: E402
from pygraph_sdpa.ops import sdpa  # noqa: E402

# bf16; each case's inputs: (B, H, H_kv, S_q, S_kv, D), its options
CASES = {
    "tiny-1x1x128x64": ((1, 1, 1, 128, 128, 64), {}),
    "causal-gqa": ((2, 8, 2, 160, 160, 128), {"is_causal": True}),
    "window-d64": ((2, 4, 4, 96, 130, 64), {"is_causal": True, "window_left": 48}),
}
RAGGED = (([70, 1, 120], [64, 5, 130]), {"is_causal": True})  # lengths of q, of kv; options
TOLERANCE = 2e-2  # replay against eager: the same kernels; cuDNN's backward accumulates dQ atomically


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.fixture(params=["backend", "python"])
def plans(request, monkeypatch):
    """The plans the op's graphs run: the planner's first (the cuDNN backend's) or the CuTe DSL
    engines' (sdpa_fwd_sm90, sdpa_bwd_sm90); a fresh graph cache either way."""
    monkeypatch.setattr(op_graphs, "GRAPHS", GraphCache())
    if request.param == "python":

        def plan_and_build(g):
            g.create_execution_plans()
            names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
            ours = [i for i, n in enumerate(names) if n.startswith(("sdpa_fwd_sm90", "sdpa_bwd_sm90"))]
            assert ours, f"no python plan among {names}: {g.decline_reasons()}"
            g.select_plan(ours[0])
            g.build_plans()

        monkeypatch.setattr(op_graphs, "plan_and_build", plan_and_build)
    return request.param


def _fill(tensors, seed):
    """New values written into ``tensors`` in place (the captured graph reads these very buffers)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for t in tensors:
            if t.dtype == torch.int32:
                continue
            t.copy_(torch.randn(t.shape, generator=gen, device="cuda").to(t.dtype))


def _dense(shape, options):
    b, h, h_kv, s_q, s_kv, d = shape
    q = torch.empty(b, h, s_q, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.empty(b, h_kv, s_kv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.empty(b, h_kv, s_kv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    d_o = torch.empty(b, h, s_q, d, device="cuda", dtype=torch.bfloat16)
    return (q, k, v), d_o, dict(options)


def _ragged():
    (lengths_q, lengths_kv), options = RAGGED
    q = torch.empty(sum(lengths_q), 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (
        torch.empty(sum(lengths_kv), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(2)
    )
    d_o = torch.empty(sum(lengths_q), 4, 64, device="cuda", dtype=torch.bfloat16)
    kwargs = dict(options)
    for name, lengths in (("cu_seqlens_q", lengths_q), ("cu_seqlens_kv", lengths_kv)):
        kwargs[name] = torch.tensor([0, *lengths], device="cuda").cumsum(0).to(torch.int32)
    kwargs |= {"max_seqlen_q": max(lengths_q), "max_seqlen_kv": max(lengths_kv)}
    return (q, k, v), d_o, kwargs


def _capture_and_replay(inputs, d_o, kwargs):
    """Capture forward + backward after a side-stream warm-up, then replay twice with new values
    against an eager run of each: the worst relative difference of O, dQ, dK, dV."""

    def step():
        o = sdpa(*inputs, **kwargs)
        return (o.detach(), *torch.autograd.grad(o, inputs, d_o))

    _fill((*inputs, d_o), seed=0)
    return capture_against_eager(step, lambda seed: _fill((*inputs, d_o), seed), ("o", "dq", "dk", "dv"))


@pytest.mark.parametrize("name", CASES)
def test_captured_forward_and_backward_replay_with_new_values_as_eager(plans, name):
    inputs, d_o, kwargs = _dense(*CASES[name])
    worst = _capture_and_replay(inputs, d_o, kwargs)
    print(f"sdpa capture {name} ({plans}): {worst}")
    assert max(worst.values()) <= TOLERANCE, worst


def test_the_ragged_op_captured_replays_as_eager(plans):
    inputs, d_o, kwargs = _ragged()
    worst = _capture_and_replay(inputs, d_o, kwargs)
    print(f"sdpa capture ragged ({plans}): {worst}")
    assert max(worst.values()) <= TOLERANCE, worst


def test_a_first_call_inside_a_capture_raises_and_the_process_goes_on(plans):
    q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(StreamCaptureError, match=r"pygraph_sdpa\.sdpa\(\): the first call of graph"):
        with torch.cuda.graph(graph):
            q.add_(0)  # a kernel in the capture: an empty one warns, which the suite makes an error
            sdpa(q, k, v)
    assert op_graphs.GRAPHS.builds == 0
    o = sdpa(q, k, v)  # the process is usable: the eager call builds and runs
    torch.cuda.synchronize()
    assert torch.isfinite(o).all() and op_graphs.GRAPHS.builds == 1


# inductor's cudagraph trees capture an empty graph of their own when they start (torch's warning,
# not about the op)
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
def test_a_reduce_overhead_compiled_block_trains_as_eager(plans):
    from torch._dynamo.utils import counters

    counters.clear()
    torch.manual_seed(0)
    dim, heads = 256, 4

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
            self.out = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            o = sdpa(q, k, v, is_causal=True)
            return self.out(o.transpose(1, 2).reshape(b, s, dim))

    eager = Block().cuda().to(torch.bfloat16)
    compiled_block = copy.deepcopy(eager)
    x = torch.randn(2, 128, dim, device="cuda", dtype=torch.bfloat16)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_block)]
    loss_of = torch.compile(lambda t: compiled_block(t).float().square().mean(), mode="reduce-overhead")
    losses = []
    for _ in range(4):  # cudagraph trees: warm-up, record, then replays on updated weights
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        want = eager(x).float().square().mean()
        want.backward()
        torch.compiler.cudagraph_mark_step_begin()
        got = loss_of(x)
        got.backward()
        losses.append((float(want), float(got)))
        for opt in opts:
            opt.step()
    print("reduce-overhead block (eager loss, compiled loss):", losses)
    # inductor captured the op's forward and backward in its CUDA graphs (it skips, and counts, a
    # graph it finds not capturable)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    for want, got in losses:
        assert abs(got - want) <= 1e-2 * abs(want), losses
    for p, q in zip(eager.parameters(), compiled_block.parameters()):
        assert _rel(q, p) <= 1e-2
