"""The KDA and GDN-2 torch ops on the CPU: graphs built and cached per key, planned to kda_cutile /
gdn2_cutile (opted in), executed through their plan with the kernels' launch replaced by a stand-in
computing the chunked spec (`kda.chunked`) in float64 on the host tensors (``kda_stand_in``,
``conftest.py``); the outputs against the token loops (`kda.reference`); `torch.compile(fullgraph=True)`
and `torch.library.opcheck` over the same path; the gradients (kda_bwd / gdn2_bwd graphs on the backward
engines, whose stand-in computes `kda.chunked_bwd`) against autograd through the token loops; a
backward graph no engine serves surfacing the planner's error; typed argument errors.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import pygraph  # noqa: E402
from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention.common import op_graphs  # noqa: E402
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

OPS = {"kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
CUSTOM = {
    "kda": torch.ops.pygraph_linear_attention.kimi_delta_attention,
    "gdn2": torch.ops.pygraph_linear_attention.gated_delta_net_v2,
}


def _inputs(
    op, lengths=(5, 1, 9), h=1, hv=2, d=64, io=torch.bfloat16, *, state=False, safe_gate=False, seed=0
):
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lengths), len(lengths)

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    x = {
        "q": normal(t, h, d).to(io),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1).to(io),
        "v": normal(t, hv, d).to(io),
        "g": torch.nn.functional.logsigmoid(normal(t, hv, d)),
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, d, generator=gen).to(io)
    x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    if state:
        x["initial_state"] = normal(n, hv, d, d) * 0.1
    if safe_gate:
        x["g"] = normal(t, hv, d)
        x["a_log"] = torch.log(1 + 15 * torch.rand(hv, generator=gen))
        x["dt_bias"] = normal(hv, d)
    return x


def _rel(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


CASES = {
    "plain": ({}, {}),
    "state-final": ({"state": True}, {"output_final_state": True}),
    "options": ({"state": True}, {"output_final_state": True, "use_qk_l2norm_in_kernel": True,
                                  "use_beta_sigmoid_in_kernel": True, "allow_neg_eigval": True, "scale": 0.2}),
    "safe-gate-bound": ({"safe_gate": True}, {"output_final_state": True, "safe_gate": True,
                                               "gate_lower_bound": -3.0}),
    "fp16-mha": ({"io": torch.float16, "h": 2, "hv": 2}, {"output_final_state": True}),
}  # fmt: skip
REFERENCE_KEYS = {
    "use_qk_l2norm_in_kernel": "use_qk_l2norm",
    "use_beta_sigmoid_in_kernel": "use_beta_sigmoid",
}


def _reference(op, x, flags):
    options = {REFERENCE_KEYS.get(k, k): v for k, v in flags.items()}
    extra = {k: x[k] for k in ("initial_state", "a_log", "dt_bias") if k in x}
    gates = [x["g"], x["beta"], *([x["w"]] if op == "gdn2" else [])]
    ref = gated_delta_net_v2_reference if op == "gdn2" else kimi_delta_attention_reference
    return ref(x["q"], x["k"], x["v"], *gates, x["cu_seqlens"], **extra, **options)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", list(CASES))
def test_forward_values_equal_the_float64_reference(kda_stand_in, op, case):
    shape, flags = CASES[case]
    x = _inputs(op, **shape)
    o, final = OPS[op](**x, **flags)
    want_o, want_s = _reference(op, x, flags)
    assert o.dtype == x["q"].dtype and o.shape == want_o.shape
    assert _rel(o, want_o) <= 4e-3  # the stand-in is float64: O's rounding to the io dtype alone
    if flags.get("output_final_state"):
        assert final.dtype == torch.float32 and _rel(final, want_s) <= 1e-6
    else:
        assert final is None
    assert kda_stand_in.runs == [op]


@pytest.mark.parametrize("op", list(OPS))
def test_one_graph_per_key_reused_across_calls(kda_stand_in, op):
    x = _inputs(op)
    OPS[op](**x)
    OPS[op](**_inputs(op, seed=1))
    assert op_graphs.GRAPHS.builds == 1 and kda_stand_in.runs == [op, op]
    OPS[op](**x, output_final_state=True)  # another key
    assert op_graphs.GRAPHS.builds == 2


@pytest.mark.parametrize("op", list(OPS))
def test_a_disabled_engine_is_planned_out_of_the_next_call(kda_stand_in, op, monkeypatch):
    from pygraph.environment import DISABLE_ENV

    x = _inputs(op)
    OPS[op](**x)  # built on the cuTile engine (the CuTe DSL one declines here)
    monkeypatch.setenv(DISABLE_ENV, f"{op}_cutile")
    # the graph built before is not reused: the engine settings are part of the key
    with pytest.raises(pygraph.GraphNotSupportedError, match=rf"{op}_cutile: disabled by {DISABLE_ENV}"):
        OPS[op](**x)
    monkeypatch.delenv(DISABLE_ENV)
    OPS[op](**x)
    assert kda_stand_in.runs == [op, op] and op_graphs.GRAPHS.builds == 1


@pytest.mark.parametrize("op", list(OPS))
def test_an_operand_starting_mid_row_reaches_the_graph_aligned(kda_stand_in, op, monkeypatch):
    # the CuTe DSL plans refuse an operand not 16-byte aligned (they copy rows 16 bytes at a time);
    # the op copies such a view instead of passing it on
    x = _inputs(op)
    flat = torch.empty(x["k"].numel() + 1, dtype=x["k"].dtype)[1:]
    k = flat.view(x["k"].shape).copy_(x["k"])
    assert k.is_contiguous() and k.data_ptr() % 16 != 0
    seen = {}
    execute = op_graphs.execute

    def spy(built, tensors, device):
        seen.update({name: t.data_ptr() % 16 for name, t in tensors.items()})
        return execute(built, tensors, device)

    monkeypatch.setattr(op_graphs, "execute", spy)
    o, _ = OPS[op](**{**x, "k": k})
    assert seen["k"] == 0 and not any(seen.values()), seen
    torch.testing.assert_close(o, OPS[op](**x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("op", list(OPS))
def test_no_token_runs_nothing(kda_stand_in, op):
    x = _inputs(op, lengths=(0, 0), state=True)
    o, final = OPS[op](**x, output_final_state=True)
    assert o.shape == (0, 2, 64) and torch.equal(final, x["initial_state"])
    assert kda_stand_in.runs == [] and op_graphs.GRAPHS.builds == 0


def _leaves(op, x):
    names = ("q", "k", "v", "g", "beta", "w", "initial_state", "a_log", "dt_bias")
    return [n for n in names if n in x]


def _reference_grads(op, x, flags, grad_o, grad_final):
    leaves = {n: x[n].detach().double().requires_grad_(True) for n in _leaves(op, x)}
    o, final = _reference(op, {**x, **leaves}, flags)
    outputs, grads = [o], [grad_o.double()]
    if grad_final is not None:
        outputs.append(final)
        grads.append(grad_final.double())
    values = torch.autograd.grad(outputs, list(leaves.values()), grads)
    return dict(zip(leaves, values))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", list(CASES))
def test_autograd_gradients_equal_the_float64_reference(kda_stand_in, op, case):
    shape, flags = CASES[case]
    x = _inputs(op, **shape)
    leaves = {n: t.clone().requires_grad_(n in _leaves(op, x)) for n, t in x.items()}
    o, final = OPS[op](**leaves, **flags)
    gen = torch.Generator().manual_seed(7)
    outputs, grads = [o], [torch.randn(o.shape, generator=gen).to(o.dtype)]
    if final is not None:
        outputs.append(final)
        grads.append(torch.randn(final.shape, generator=gen))
    torch.autograd.backward(outputs, grads)
    want = _reference_grads(op, x, flags, grads[0], grads[1] if final is not None else None)
    assert kda_stand_in.runs == [op, f"{op}_bwd"]
    for name, w in want.items():
        got = leaves[name].grad
        assert got is not None and got.shape == w.shape and got.dtype == x[name].dtype, name
        # the stand-in is float64: each gradient's rounding to its input's dtype alone
        assert _rel(got, w) <= 4e-3, (name, _rel(got, w))


@pytest.mark.parametrize("op", list(OPS))
def test_a_backward_graph_no_engine_serves_raises_the_planners_error(kda_stand_in, op, monkeypatch):
    from pygraph_linear_attention.kda import engine_cutile as engine_mod

    real = engine_mod.support_reason

    def forward_only(facts, served, backward=False):
        return "the backward is switched off for this test" if backward else real(facts, served, backward)

    monkeypatch.setattr(engine_mod, "support_reason", forward_only)
    x = {n: t.requires_grad_(n in ("q", "k", "v")) for n, t in _inputs(op).items()}
    o, _ = OPS[op](**x)  # the forward is served
    with pytest.raises(
        pygraph.GraphNotSupportedError, match=rf"{op}_cutile_bwd: the backward is switched off"
    ):
        o.float().sum().backward()
    assert not any(k[0] == f"{op}_bwd" for k in op_graphs.GRAPHS.keys())  # a failure is not cached


@pytest.mark.parametrize("op", list(OPS))
def test_torch_compile_fullgraph_traces_the_op_and_its_gradient(kda_stand_in, op):
    torch._dynamo.reset()
    x = _inputs(op, state=True)
    leaves = _leaves(op, x)

    def step(**kw):
        o, final = OPS[op](**kw, output_final_state=True)
        return o.float().square().sum() + final.sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    compiled(**ours).backward()
    eager = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    step(**eager).backward()
    assert kda_stand_in.runs == [op, f"{op}_bwd", op, f"{op}_bwd"]
    for name in leaves:
        assert torch.equal(ours[name].grad, eager[name].grad), name
    torch._dynamo.reset()


@pytest.mark.parametrize("op", list(OPS))
def test_torch_compile_with_fake_inputs_traces_without_running(kda_stand_in, op):
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._dynamo.reset()
    captured = []

    def backend(gm, example_inputs):
        captured.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm

    def f(**kw):
        return OPS[op](**kw)[0]

    x = _inputs(op)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = {n: mode.from_tensor(t) for n, t in x.items()}
        out = torch.compile(f, fullgraph=True, backend=backend)(**fake)
    assert out.shape == (15, 2, 64)
    assert any(CUSTOM[op].default in targets for targets in captured), captured
    assert op_graphs.GRAPHS.builds == 0 and kda_stand_in.runs == []
    torch._dynamo.reset()


@pytest.mark.parametrize("op", list(OPS))
def test_opcheck(kda_stand_in, op):
    x = _inputs(op, state=True)
    x = {n: t.requires_grad_(n in _leaves(op, x)) for n, t in x.items()}
    positional = tuple(v for n, v in x.items() if n != "initial_state")
    torch.library.opcheck(
        CUSTOM[op], positional, {"initial_state": x["initial_state"], "output_final_state": True}
    )


@pytest.mark.parametrize(
    ("op", "change", "message"),
    [
        ("kda", {"g": lambda x: x["g"][..., 0].contiguous()}, r"kimi_delta_attention\(\): g must be \[T, HV, K\]"),
        ("kda", {"g": lambda x: x["g"].double()}, r"kimi_delta_attention\(\): g must be torch.float32"),
        ("gdn2", {"w": lambda x: x["w"].float()}, r"gated_delta_net_v2\(\): w must be q's dtype"),
        ("gdn2", {"beta": lambda x: x["beta"][..., 0].contiguous()}, r"gated_delta_net_v2\(\): beta must be \[T, HV, K\]"),
    ],
)  # fmt: skip
def test_a_bad_argument_raises_a_typed_error_naming_it(kda_stand_in, op, change, message):
    x = _inputs(op)
    x.update({n: f(x) for n, f in change.items()})
    with pytest.raises(OpInputError, match=message):
        OPS[op](**x)
    assert kda_stand_in.runs == []


def test_the_package_reaches_the_ops_on_first_access():
    import pygraph_linear_attention

    assert pygraph_linear_attention.kimi_delta_attention is kimi_delta_attention
    assert pygraph_linear_attention.gated_delta_net_v2 is gated_delta_net_v2


# --- the backward's prepared calls: as the forward's ---------------------------------------------------

BACKWARD = {
    "kda": torch.ops.pygraph_linear_attention.kimi_delta_attention_backward,
    "gdn2": torch.ops.pygraph_linear_attention.gated_delta_net_v2_backward,
}


@pytest.fixture
def backward_checks(monkeypatch):
    """Counts the backward's checks (check_backward) on its calls."""
    from pygraph_linear_attention.kda import op as kda_op

    seen = []
    real = kda_op.check_backward

    def counted(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(kda_op, "check_backward", counted)
    return seen


def _backward_args(op, x, seed=3):
    """The backward op's positional arguments of ``x``'s forward, with a dO and a d_final_state."""
    gen = torch.Generator().manual_seed(seed)
    t, hv, d = x["v"].shape
    d_o = torch.randn(t, hv, d, generator=gen).to(x["q"].dtype)
    d_final = torch.randn(len(x["cu_seqlens"]) - 1, hv, d, x["k"].shape[2], generator=gen)
    operands = [x[n] for n in ("q", "k", "v", "g", "beta", "w", "cu_seqlens") if n in x]
    return (*operands, d_o, d_final, None, x["initial_state"])


@pytest.mark.parametrize("op", list(OPS))
def test_a_repeated_backward_is_served_prepared_with_the_checked_calls_values(
    kda_stand_in, backward_checks, op
):
    args = _backward_args(op, _inputs(op, state=True))
    first = BACKWARD[op](*args)
    assert len(backward_checks) == 1 and op_graphs.GRAPHS.builds == 1
    again = BACKWARD[op](*args)
    assert len(backward_checks) == 1 and op_graphs.GRAPHS.builds == 1  # no check, no lookup, no build
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert kda_stand_in.runs == [f"{op}_bwd"] * 2
    BACKWARD[op](*args[:-2], 0.5, args[-1])  # the scale: checked again
    assert len(backward_checks) == 2


@pytest.mark.parametrize("op", list(OPS))
def test_autograds_repeated_backward_is_served_prepared(kda_stand_in, backward_checks, op):
    x = {n: t.requires_grad_(n != "cu_seqlens") for n, t in _inputs(op, state=True).items()}
    leaves = [t for n, t in x.items() if n != "cu_seqlens"]
    d_o, d_final = _backward_args(op, x)[-4:-2]
    grads = []
    for _ in range(2):
        o, final = OPS[op](**x, output_final_state=True)
        grads.append(torch.autograd.grad((o, final), leaves, (d_o, d_final)))
    assert len(backward_checks) == 1  # the first backward's
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert kda_stand_in.runs == [op, f"{op}_bwd"] * 2


@pytest.mark.parametrize("op", list(OPS))
def test_a_bad_backward_after_a_good_one_still_raises_the_typed_error(kda_stand_in, op):
    args = _backward_args(op, _inputs(op, state=True))
    BACKWARD[op](*args)
    *operands, d_o, d_final, scale, state = args
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of o must be q's dtype torch.bfloat16, got"):
        BACKWARD[op](*operands, d_o.half(), d_final, scale, state)
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of o must be \[T, HO, V\]"):
        BACKWARD[op](*operands, d_o[:4], d_final, scale, state)
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of final_state must be torch.float32"):
        BACKWARD[op](*operands, d_o, d_final.double(), scale, state)
