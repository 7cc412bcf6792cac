"""The linear-attention torch ops in CUDA graphs, on the device: `gated_delta_net`,
`kimi_delta_attention` and `gated_delta_net_v2`, forward and backward, captured with
``torch.cuda.graph`` after an eager warm-up on a side stream (torch's recipe), replayed with new
values written into the captured inputs and compared with an eager run of the same values; a first
call (a graph build) inside a capture raises `StreamCaptureError` and leaves the process usable; and
`torch.compile(mode="reduce-overhead")` of a small layer over each op trains a few steps matching
eager mode. The plans are the planner's first (the CuTe DSL engines on Hopper). The CPU side of the
same rules is ``test_linear_attention_capture.py`` and ``pygraph-core/tests/test_op_support_capture.py``.
"""

from __future__ import annotations

import copy

import pytest

pytestmark = pytest.mark.sm90

torch = pytest.importorskip("torch")

from pygraph.errors import StreamCaptureError  # noqa: E402
from pygraph.op_support import GraphCache  # noqa: E402
from pygraph.testing import capture_against_eager  # noqa: E402
from pygraph_linear_attention import gated_delta_net, gated_delta_net_v2, kimi_delta_attention  # noqa: E402
from pygraph_linear_attention.common import op_graphs  # noqa: E402

OPS = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
LENGTHS = {"T64": (64,), "varlen": (100, 1, 155)}
TOLERANCE = 1e-2  # replay against eager: the same kernels; a backward may accumulate atomically


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.fixture(autouse=True)
def fresh_graphs(monkeypatch):
    monkeypatch.setattr(op_graphs, "GRAPHS", GraphCache())


def _values(op, lengths, seed, h=2, hv=4, d=128):
    """Fresh inputs of ``op`` (fp32 gates as the op's contract, normalised keys, a state)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t, n = sum(lengths), len(lengths)
    per_key = (d,) if op != "gdn" else ()

    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    x = {
        "q": normal(t, h, d).bfloat16(),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1).bfloat16(),
        "v": normal(t, hv, d).bfloat16(),
        "g": torch.nn.functional.logsigmoid(normal(t, hv, *per_key)) * 0.1,
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen, device="cuda"),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, d, generator=gen, device="cuda").bfloat16()
    x["cu_seqlens"] = torch.tensor([0, *lengths], device="cuda").cumsum(0).to(torch.int32)
    x["initial_state"] = normal(n, hv, d, d) * 0.1
    x["d_o"] = normal(t, hv, d).bfloat16()
    return x


def _write(static, op, lengths, seed):
    """New values into the captured buffers (the graph reads these very tensors)."""
    with torch.no_grad():
        for name, t in _values(op, lengths, seed).items():
            static[name].copy_(t)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("op", OPS)
def test_captured_forward_and_backward_replay_with_new_values_as_eager(op, lengths):
    static = _values(op, LENGTHS[lengths], seed=0)
    leaves = [n for n in static if n not in ("cu_seqlens", "d_o")]
    for name in leaves:
        static[name].requires_grad_(True)

    def step():
        args = {n: static[n] for n in leaves} | {"cu_seqlens": static["cu_seqlens"]}
        o, final = OPS[op](**args, output_final_state=True)
        grads = torch.autograd.grad(o, [static[n] for n in leaves], static["d_o"])
        return (o.detach(), final.detach(), *grads)

    names = ("o", "final_state", *(f"d{n}" for n in leaves))
    worst = capture_against_eager(step, lambda seed: _write(static, op, LENGTHS[lengths], seed), names)
    print(f"{op} {lengths} capture: {worst}")
    assert max(worst.values()) <= TOLERANCE, worst


@pytest.mark.parametrize("op", OPS)
def test_a_first_call_inside_a_capture_raises_and_the_process_goes_on(op):
    x = {n: t for n, t in _values(op, (64,), seed=0).items() if n != "d_o"}
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(
        StreamCaptureError, match=r"pygraph_linear_attention\.\w+\(\): the first call of graph"
    ):
        with torch.cuda.graph(graph):
            x["v"].add_(0)  # a kernel in the capture: an empty one warns, which the suite makes an error
            OPS[op](**x)
    assert op_graphs.GRAPHS.builds == 0
    o, _ = OPS[op](**x)  # the process is usable: the eager call builds and runs
    torch.cuda.synchronize()
    assert torch.isfinite(o).all() and op_graphs.GRAPHS.builds == 1


class TinyLayer(torch.nn.Module):
    """Projections around one op (bf16 projections, fp32 gates, L2-normalised q/k, sigmoid beta)."""

    def __init__(self, op: str, d_model: int = 256, heads: int = 2, head_dim: int = 128) -> None:
        super().__init__()
        self.op, self.h, self.d = op, heads, head_dim
        gate_width = heads * (head_dim if op != "gdn" else 1)
        self.q = torch.nn.Linear(d_model, heads * head_dim, bias=False)
        self.k = torch.nn.Linear(d_model, heads * head_dim, bias=False)
        self.v = torch.nn.Linear(d_model, heads * head_dim, bias=False)
        self.gate = torch.nn.Linear(d_model, gate_width, bias=False)
        self.beta = torch.nn.Linear(d_model, heads * (head_dim if op == "gdn2" else 1), bias=False)
        self.w = torch.nn.Linear(d_model, heads * head_dim, bias=False)
        self.out = torch.nn.Linear(heads * head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        t, h, d = x.shape[0], self.h, self.d
        per_key = (d,) if self.op != "gdn" else ()
        args = [
            self.q(x).view(t, h, d), self.k(x).view(t, h, d), self.v(x).view(t, h, d),
            torch.nn.functional.logsigmoid(self.gate(x).float()).view(t, h, *per_key),
            self.beta(x).float().view(t, h, *((d,) if self.op == "gdn2" else ())),
        ]  # fmt: skip
        if self.op == "gdn2":
            args.append(torch.sigmoid(self.w(x)).view(t, h, d))
        o, _ = OPS[self.op](*args, cu_seqlens, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
        return self.out(o.reshape(t, h * d))


# inductor's cudagraph trees capture an empty graph of their own when they start (torch's warning,
# not about the op)
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
@pytest.mark.parametrize("op", OPS)
def test_a_reduce_overhead_compiled_layer_trains_as_eager(op):
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = TinyLayer(op).cuda().to(torch.bfloat16)
    compiled_layer = copy.deepcopy(eager)
    x = torch.randn(200, 256, device="cuda").to(torch.bfloat16)
    cu = torch.tensor([0, 63, 64, 200], device="cuda", dtype=torch.int32)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_layer)]
    loss_of = torch.compile(lambda t: compiled_layer(t, cu).float().square().mean(), mode="reduce-overhead")
    losses = []
    for _ in range(4):  # cudagraph trees: warm-up, record, then replays on updated weights
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        want = eager(x, cu).float().square().mean()
        want.backward()
        torch.compiler.cudagraph_mark_step_begin()
        got = loss_of(x)
        got.backward()
        losses.append((float(want.detach()), float(got.detach())))  # a float of a grad-requiring tensor warns
        for opt in opts:
            opt.step()
    torch._dynamo.reset()
    print(f"{op} reduce-overhead layer (eager loss, compiled loss): {losses}")
    for want, got in losses:
        assert abs(got - want) <= 1e-2 * abs(want), losses
    for p, q in zip(eager.parameters(), compiled_layer.parameters()):
        assert _rel(q, p) <= 1e-2
    # inductor captured the op's forward and backward in its CUDA graphs (it skips, and counts, a
    # graph it finds not capturable)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
