"""The torch op on the H200: forward and every gradient against the float64 reference (and its
autograd), `torch.library.opcheck`, a call on a side stream, and a `torch.compile(fullgraph=True)`
training step of a small GDN layer against the same step run eagerly (that last one also on the
CPU through the ``gdn_stand_in`` fixture, unmarked, so the layer and the step are checked in CI).

Inputs are `gdn_cases` (this folder)' (the cases whose q/k heads divide v heads, the
op's GVA contract); the op's outputs are fresh allocations, so they are not poisoned here: the
graph-level suite (`test_gdn_cutile_sm90.py`) poisons the engine's. Relative error bound 1e-2 (bf16
and fp16 io), the numbers printed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gdn_cases import BWD_CASES, gate_parameter_error, make_inputs  # noqa: E402
from pygraph_linear_attention.ops import gated_delta_net  # noqa: E402
from pygraph_linear_attention.reference import gated_delta_net_reference  # noqa: E402

# the backward's table (its long case 1100 tokens: the reference's autograd runs the token loop)
OP_CASES = [c for c in BWD_CASES if c.heads_v % c.heads_qk == 0 and c.block_v is None and c.segment is None]
_FLAG_NAMES = {"use_qk_l2norm": "use_qk_l2norm_in_kernel", "use_beta_sigmoid": "use_beta_sigmoid_in_kernel"}
_LEAVES = ("q", "k", "v", "g", "beta", "initial_state", "a_log", "dt_bias")


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()  # detached: the op's outputs carry grad
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _op_kwargs(options: dict) -> dict:
    return {_FLAG_NAMES.get(k, k): v for k, v in options.items()}


@pytest.mark.sm90
@pytest.mark.parametrize("case", OP_CASES, ids=[c.name for c in OP_CASES])
def test_the_op_and_its_gradients_match_the_float64_reference(case):
    tensors, options = make_inputs(case, seed=3)
    leaves = [n for n in _LEAVES if n in tensors]
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in tensors.items()}
    theirs = {n: t.detach().double().requires_grad_(True) if n in leaves else t for n, t in tensors.items()}
    o, final = gated_delta_net(**ours, **_op_kwargs(options))
    extra = {n: theirs[n] for n in ("initial_state", "a_log", "dt_bias") if n in theirs}
    core = ("q", "k", "v", "g", "beta")
    want_o, want_final = gated_delta_net_reference(
        *(theirs[n] for n in core), tensors["cu_seqlens"].cpu(), **extra, **options
    )
    result = {"o": _rel(o, want_o)}
    gen = torch.Generator(device="cuda").manual_seed(11)
    w_o = torch.randn(o.shape, device="cuda", generator=gen).to(o.dtype).double()  # dO exact in the io dtype
    loss, want_loss = (o.double() * w_o).sum(), (want_o * w_o).sum()
    if options["output_final_state"]:
        result["final_state"] = _rel(final, want_final)
        w_s = torch.randn(final.shape, device="cuda", generator=gen, dtype=torch.float64) * 0.1
        loss, want_loss = loss + (final.double() * w_s).sum(), want_loss + (want_final * w_s).sum()
    else:
        assert final is None
    loss.backward()
    want_loss.backward()
    for name in leaves:
        assert ours[name].grad is not None and ours[name].grad.dtype == tensors[name].dtype, name
        result[f"d{name}"] = _rel(ours[name].grad, theirs[name].grad)
    # the safe gate's parameters: sums of terms of both signs, measured against the terms' magnitudes
    # (`gdn_cases.gate_parameter_error`); their error relative to ||want|| is printed beside
    for name in ("a_log", "dt_bias"):
        if name in leaves:
            plain = result.pop(f"d{name}")
            result[f"d{name}"] = gate_parameter_error(
                name, ours[name].grad, theirs[name].grad, tensors, theirs["g"].grad
            )
            print(f"{case.name}: d{name} {plain:.2e} of ||want||")
    print(f"{case.name}: " + ", ".join(f"{k} {v:.2e}" for k, v in result.items()))
    assert max(result.values()) <= case.tolerance, result


@pytest.mark.sm90
def test_opcheck_on_the_device():
    case = next(c for c in OP_CASES if c.name == "initial-final")
    tensors, _ = make_inputs(case, seed=5)
    leaves = ("q", "k", "v", "g", "beta", "initial_state")
    x = {n: t.requires_grad_(n in leaves) for n, t in tensors.items()}
    args = tuple(x[n] for n in ("q", "k", "v", "g", "beta", "cu_seqlens"))
    torch.library.opcheck(
        torch.ops.pygraph_linear_attention.gated_delta_net,
        args,
        {"initial_state": x["initial_state"], "output_final_state": True},
    )


@pytest.mark.sm90
def test_a_call_on_a_side_stream_is_ordered_on_it():
    case = next(c for c in OP_CASES if c.name == "varlen-odd")
    tensors, options = make_inputs(case, seed=6)
    want, _ = gated_delta_net(**tensors, **_op_kwargs(options))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        inputs = {n: t.clone() for n, t in tensors.items()}  # written on the side stream, read by the op
        got, _ = gated_delta_net(**inputs, **_op_kwargs(options))
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, want)


class TinyGdnLayer(torch.nn.Module):
    """A Gated DeltaNet layer as models write it: projections, safe-gate decay, sigmoid beta, L2-normalised q/k."""

    def __init__(self, d_model: int = 256, heads_qk: int = 1, heads_v: int = 2, head_dim: int = 128) -> None:
        super().__init__()
        self.hq, self.hv, self.d = heads_qk, heads_v, head_dim
        self.q = torch.nn.Linear(d_model, heads_qk * head_dim, bias=False)
        self.k = torch.nn.Linear(d_model, heads_qk * head_dim, bias=False)
        self.v = torch.nn.Linear(d_model, heads_v * head_dim, bias=False)
        self.gate = torch.nn.Linear(d_model, heads_v, bias=False)
        self.write = torch.nn.Linear(d_model, heads_v, bias=False)
        self.out = torch.nn.Linear(heads_v * head_dim, d_model, bias=False)
        self.a_log = torch.nn.Parameter(torch.log(torch.linspace(1, 16, heads_v)))
        self.dt_bias = torch.nn.Parameter(torch.zeros(heads_v))

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        o, _ = gated_delta_net(
            self.q(x).view(t, self.hq, self.d), self.k(x).view(t, self.hq, self.d),
            self.v(x).view(t, self.hv, self.d), self.gate(x).float(), self.write(x).float(), cu_seqlens,
            use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
            a_log=self.a_log, dt_bias=self.dt_bias,
        )  # fmt: skip
        return self.out(o.reshape(t, self.hv * self.d))


def _compiled_step_against_eager(device: str, backend: str) -> list:
    """Two SGD steps of `TinyGdnLayer`, eager and with its loss compiled (fullgraph), from one
    initialisation: [(eager loss, compiled loss, worst parameter-gradient relative difference)]."""
    import copy

    torch.manual_seed(0)
    eager = TinyGdnLayer().to(device)
    for m in (eager.q, eager.k, eager.v, eager.gate, eager.write, eager.out):
        m.to(torch.bfloat16)  # the projections in bf16; a_log and dt_bias stay fp32 (the op's contract)
    compiled_layer = copy.deepcopy(eager)
    x = torch.randn(200, 256, device=device).to(torch.bfloat16)
    cu = torch.tensor([0, 63, 64, 200], device=device, dtype=torch.int32)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_layer)]
    torch._dynamo.reset()
    loss_of = torch.compile(
        lambda: compiled_layer(x, cu).float().square().sum(), fullgraph=True, backend=backend
    )
    steps = []
    for _ in range(2):  # the second step runs the compiled graph again, on updated weights
        for opt in opts:
            opt.zero_grad()
        want = eager(x, cu).float().square().sum()
        want.backward()
        got = loss_of()
        got.backward()
        grads = {n: p.grad for n, p in compiled_layer.named_parameters()}
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), grads
        ref = dict(eager.named_parameters())
        steps.append(
            (want.detach().item(), got.detach().item(), max(_rel(g, ref[n].grad) for n, g in grads.items()))
        )
        for opt in opts:
            opt.step()
    torch._dynamo.reset()
    return steps


def _check_steps(steps: list) -> None:
    print("steps (eager loss, compiled loss, worst gradient rel diff):", steps)
    for want, got, worst in steps:
        assert abs(got - want) <= 1e-2 * abs(want) and worst <= 1e-2, steps


def test_a_compiled_training_step_of_a_gdn_layer_matches_eager_on_the_cpu(gdn_stand_in):
    _check_steps(_compiled_step_against_eager("cpu", backend="aot_eager"))
    assert gdn_stand_in.runs.count("gdn_bwd") == 4  # two steps, eager and compiled


@pytest.mark.sm90
def test_a_compiled_training_step_of_a_gdn_layer_matches_eager():
    _check_steps(_compiled_step_against_eager("cuda", backend="inductor"))
