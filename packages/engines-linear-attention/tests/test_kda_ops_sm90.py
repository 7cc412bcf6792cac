"""The KDA and GDN-2 torch ops on the H200, through each forward engine (the cuTile pair alone, and the
CuTe DSL forward with the cuTile backward): outputs and every gradient against the float64 reference
and its autograd, `torch.library.opcheck`, a call on a side stream, and a
`torch.compile(fullgraph=True)` training step of a small KDA layer against the same step run eagerly.

Inputs are `kda_cases` (this folder)' (the cases whose q/k heads divide v heads, the
ops' GVA contract). Relative error bound: the case's (1e-2 for bf16 and fp16 io), numbers printed.
The same checks run on the CPU through a float64 stand-in (`test_kda_ops.py`).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kda_cases  # noqa: E402
from kda_cases import CASES, make_inputs  # noqa: E402
from pygraph.environment import OPT_IN_ENV  # noqa: E402
from pygraph_linear_attention.common import op_graphs  # noqa: E402
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

pytestmark = pytest.mark.sm90

OPS = {"kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
REFERENCES = {"kda": kimi_delta_attention_reference, "gdn2": gated_delta_net_v2_reference}
# the engines each run opts in (the CuTe DSL ones are default-on and ranked first; the "cutile" run
# has them decline, the "sm90-cutile-bwd" run their backwards): the forward and the backward the op's
# plans rank first among them
ENGINES = {
    "cutile": "kda_cutile,gdn2_cutile,kda_cutile_bwd,gdn2_cutile_bwd",
    "sm90-cutile-bwd": "kda_cutile_bwd,gdn2_cutile_bwd",
    "sm90": "",
}
OP_CASES = [
    c for c in CASES if c.heads_v % c.heads_qk == 0 and c.block_v is None and c.name != "long-4097"
]  # the reference's autograd runs the token loop
_LEAVES = ("q", "k", "v", "g", "beta", "w", "initial_state", "a_log", "dt_bias")


@pytest.fixture(params=list(ENGINES))
def engines(request, monkeypatch):
    """The opted-in engines (by name), the op's graph cache empty before and after."""
    monkeypatch.setenv(OPT_IN_ENV, ENGINES[request.param])
    if request.param == "cutile":
        request.getfixturevalue("no_cute_dsl_kda")
    if request.param == "sm90-cutile-bwd":
        request.getfixturevalue("no_cute_dsl_kda_bwd")
    monkeypatch.setenv("PYGRAPH_PLAN_CACHE", "off")
    op_graphs.GRAPHS.clear()
    yield request.param
    op_graphs.GRAPHS.clear()


def _rel(got, want) -> float:
    return kda_cases.relative_error(got, want)


def _op_kwargs(options: dict) -> dict:
    names = {"use_qk_l2norm": "use_qk_l2norm_in_kernel", "use_beta_sigmoid": "use_beta_sigmoid_in_kernel"}
    return {names.get(k, k): v for k, v in options.items()}


def _call(op, x, options):
    return OPS[op](**x, **_op_kwargs(options))


@pytest.mark.parametrize("case", OP_CASES, ids=[c.id for c in OP_CASES])
def test_the_op_and_its_gradients_match_the_float64_reference(engines, case):
    tensors, options = make_inputs(case, seed=3)
    leaves = [n for n in _LEAVES if n in tensors]
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in tensors.items()}
    theirs = {n: t.detach().double().requires_grad_(True) if n in leaves else t for n, t in tensors.items()}
    o, final = _call(case.op, ours, options)
    gates = [theirs["g"], theirs["beta"], *([theirs["w"]] if case.op == "gdn2" else [])]
    extra = {n: theirs[n] for n in ("initial_state", "a_log", "dt_bias") if n in theirs}
    want_o, want_final = REFERENCES[case.op](
        theirs["q"], theirs["k"], theirs["v"], *gates, tensors["cu_seqlens"].cpu(), **extra, **options
    )
    result = {"o": _rel(o, want_o)}
    gen = torch.Generator(device=kda_cases.DEVICE).manual_seed(11)
    w_o = torch.randn(o.shape, device=kda_cases.DEVICE, generator=gen).to(o.dtype).double()
    loss, want_loss = (o.double() * w_o).sum(), (want_o.to(kda_cases.DEVICE) * w_o).sum()
    if options["output_final_state"]:
        result["final_state"] = _rel(final, want_final.to(kda_cases.DEVICE))
        w_s = torch.randn(final.shape, device=kda_cases.DEVICE, generator=gen, dtype=torch.float64) * 0.1
        loss, want_loss = (
            loss + (final.double() * w_s).sum(),
            want_loss + (want_final.to(kda_cases.DEVICE) * w_s).sum(),
        )
    loss.backward()
    want_loss.backward()
    for name in leaves:
        assert ours[name].grad is not None and ours[name].grad.dtype == tensors[name].dtype, name
        result[f"d{name}"] = kda_cases.gradient_error(
            f"d_{name}", ours[name].grad, theirs[name].grad, theirs, theirs["g"].grad
        )
    print(f"{case.id} {engines}: " + ", ".join(f"{k} {v:.2e}" for k, v in result.items()))
    assert max(result.values()) <= case.tolerance, result


@pytest.mark.parametrize("op", list(OPS))
def test_opcheck_on_the_device(engines, op):
    case = next(c for c in OP_CASES if c.op == op and c.name == "varlen-odd")
    tensors, _ = make_inputs(case, seed=5)
    leaves = [n for n in _LEAVES if n in tensors]
    x = {n: t.requires_grad_(n in leaves) for n, t in tensors.items()}
    positional = tuple(
        x[n] for n in ("q", "k", "v", "g", "beta", *(("w",) if op == "gdn2" else ()), "cu_seqlens")
    )
    custom = getattr(torch.ops.pygraph_linear_attention, OPS[op].__name__)
    torch.library.opcheck(
        custom, positional, {"initial_state": x["initial_state"], "output_final_state": True}
    )


@pytest.mark.parametrize("op", list(OPS))
def test_a_call_on_a_side_stream_is_ordered_on_it(engines, op):
    case = next(c for c in OP_CASES if c.op == op and c.name == "varlen-odd")
    tensors, options = make_inputs(case, seed=6)
    want, _ = _call(op, tensors, options)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        inputs = {n: t.clone() for n, t in tensors.items()}  # written on the side stream, read by the op
        got, _ = _call(op, inputs, options)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, want)


class TinyKdaLayer(torch.nn.Module):
    """A KDA layer as models write it: projections, the bounded safe gate per key channel, sigmoid
    beta, L2-normalised q/k (GDN-2: beta per channel and a sigmoid write gate)."""

    def __init__(self, op: str, d_model: int = 256, heads: int = 2, head_dim: int = 128) -> None:
        super().__init__()
        self.op, self.h, self.d = op, heads, head_dim
        width = heads * head_dim
        self.q, self.k, self.v = (torch.nn.Linear(d_model, width, bias=False) for _ in range(3))
        self.gate = torch.nn.Linear(d_model, width, bias=False)
        self.beta = torch.nn.Linear(d_model, width if op == "gdn2" else heads, bias=False)
        self.write = torch.nn.Linear(d_model, width, bias=False)
        self.out = torch.nn.Linear(width, d_model, bias=False)
        self.a_log = torch.nn.Parameter(torch.log(torch.linspace(1, 16, heads)))
        self.dt_bias = torch.nn.Parameter(torch.zeros(heads, head_dim))

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        t, h, d = x.shape[0], self.h, self.d
        beta = self.beta(x).float().view(t, h, d) if self.op == "gdn2" else self.beta(x).float()
        gates = [self.gate(x).float().view(t, h, d), beta]
        if self.op == "gdn2":
            gates.append(torch.sigmoid(self.write(x)).view(t, h, d))
        o, _ = OPS[self.op](
            self.q(x).view(t, h, d), self.k(x).view(t, h, d), self.v(x).view(t, h, d), *gates, cu_seqlens,
            use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
            a_log=self.a_log, dt_bias=self.dt_bias,
        )  # fmt: skip
        return self.out(o.reshape(t, h * d))


@pytest.mark.parametrize("op", list(OPS))
def test_a_compiled_training_step_matches_eager(engines, op):
    import copy

    torch.manual_seed(0)
    eager = TinyKdaLayer(op).to(kda_cases.DEVICE)
    for m in (eager.q, eager.k, eager.v, eager.gate, eager.beta, eager.write, eager.out):
        m.to(torch.bfloat16)  # the projections in bf16; a_log and dt_bias stay fp32 (the ops' contract)
    compiled_layer = copy.deepcopy(eager)
    x = torch.randn(200, 256, device=kda_cases.DEVICE).to(torch.bfloat16)
    cu = torch.tensor([0, 63, 64, 200], device=kda_cases.DEVICE, dtype=torch.int32)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_layer)]
    torch._dynamo.reset()
    loss_of = torch.compile(lambda: compiled_layer(x, cu).float().square().sum(), fullgraph=True)
    steps = []
    for _ in range(2):  # the second step runs the compiled graph again, on updated weights
        for opt in opts:
            opt.zero_grad()
        want = eager(x, cu).float().square().sum()
        want.backward()
        got = loss_of()
        got.backward()
        ref = dict(eager.named_parameters())
        grads = {
            n: p.grad
            for n, p in compiled_layer.named_parameters()
            if p.grad is not None or ref[n].grad is not None
        }
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), grads
        steps.append((want.item(), got.item(), max(_rel(g, ref[n].grad) for n, g in grads.items())))
        for opt in opts:
            opt.step()
    torch._dynamo.reset()
    print(f"{op} {engines} steps (eager loss, compiled loss, worst gradient rel diff): {steps}")
    for want, got, worst in steps:
        assert abs(got - want) <= 1e-2 * abs(want) and worst <= 1e-2, steps
