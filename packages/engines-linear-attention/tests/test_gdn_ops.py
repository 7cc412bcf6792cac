"""The torch op's execution path on the CPU: graphs built and cached per key, planned to gdn_cutile,
executed through its plan with the kernels' launch replaced by a stand-in that computes the chunked
spec (`gdn.chunked`, `gdn.chunked_bwd`) in float64 on the host tensors; the op's outputs and autograd
gradients against the token loop's (`gdn.reference`); `torch.compile(fullgraph=True)` and
`torch.library.opcheck` over the same path; a gdn_bwd graph no engine serves surfacing the
planner's error. The stand-in is the ``gdn_stand_in`` fixture (``conftest.py``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import pygraph  # noqa: E402
from pygraph_linear_attention.common import op_graphs  # noqa: E402
from pygraph_linear_attention.gdn import engine_cutile as engine_mod  # noqa: E402
from pygraph_linear_attention.gdn import engine_sm90 as sm90_mod  # noqa: E402
from pygraph_linear_attention.ops import gated_delta_net  # noqa: E402
from pygraph_linear_attention.reference import gated_delta_net_reference  # noqa: E402

OP = torch.ops.pygraph_linear_attention.gated_delta_net


def _inputs(lengths=(5, 1, 9), h=1, hv=2, d=64, io=torch.bfloat16, *, state=False, safe_gate=False,
            beta_io=False, seed=0):  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lengths), len(lengths)

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    x = {
        "q": normal(t, h, d).to(io),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1).to(io),
        "v": normal(t, hv, d).to(io),
        "g": torch.nn.functional.logsigmoid(normal(t, hv)),
        "beta": torch.rand(t, hv, generator=gen).to(io if beta_io else torch.float32),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32),
    }
    if state:
        x["initial_state"] = normal(n, hv, d, d) * 0.1
    if safe_gate:
        x["g"] = normal(t, hv)
        x["a_log"] = torch.log(1 + 15 * torch.rand(hv, generator=gen))
        x["dt_bias"] = normal(hv)
    return x


def _rel(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


CASES = {
    "plain": ({}, {}),
    "state-final": ({"state": True}, {"output_final_state": True}),
    "options": ({"state": True}, {"output_final_state": True, "use_qk_l2norm_in_kernel": True,
                                  "use_beta_sigmoid_in_kernel": True, "allow_neg_eigval": True, "scale": 0.2}),
    "safe-gate": ({"safe_gate": True, "beta_io": True}, {"output_final_state": True, "safe_gate": True}),
    "fp16-mha": ({"io": torch.float16, "h": 2, "hv": 2}, {"output_final_state": True}),
}  # fmt: skip
REFERENCE_KEYS = {
    "use_qk_l2norm_in_kernel": "use_qk_l2norm",
    "use_beta_sigmoid_in_kernel": "use_beta_sigmoid",
}


def _reference(x, flags, dtype=torch.float64):
    options = {REFERENCE_KEYS.get(k, k): v for k, v in flags.items()}
    extra = {k: x[k] for k in ("initial_state", "a_log", "dt_bias") if k in x}
    return gated_delta_net_reference(
        x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], **extra, **options, dtype=dtype
    )


@pytest.mark.parametrize("case", list(CASES))
def test_forward_values_equal_the_float64_reference(gdn_stand_in, case):
    shape, flags = CASES[case]
    x = _inputs(**shape)
    o, final = gated_delta_net(**x, **flags)
    want_o, want_final = _reference(x, flags)
    assert gdn_stand_in.runs == ["gdn"]
    assert o.dtype == x["q"].dtype and o.shape == want_o.shape
    assert _rel(o, want_o) <= 4e-3  # bf16 rounding of O (2 ** -8 relative at most per element)
    if flags.get("output_final_state"):
        assert final.dtype == torch.float32 and _rel(final, want_final) <= 1e-6
    else:
        assert final is None


@pytest.mark.parametrize("case", list(CASES))
def test_autograd_gradients_equal_the_float64_reference(gdn_stand_in, case):
    shape, flags = CASES[case]
    x = _inputs(**shape)
    leaves = [n for n in ("q", "k", "v", "g", "beta", "initial_state", "a_log", "dt_bias") if n in x]
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    theirs = {n: t.detach().double().requires_grad_(True) if n in leaves else t for n, t in x.items()}
    gen = torch.Generator().manual_seed(7)
    o, final = gated_delta_net(**ours, **flags)
    # dO in the io dtype exactly (o's gradient arrives rounded to it): only the outputs' rounding differs
    w_o = torch.randn(o.shape, generator=gen).to(o.dtype).double()
    loss = (o.double() * w_o).sum()
    want_o, want_final = _reference(theirs, flags)
    want_loss = (want_o * w_o).sum()
    if final is not None:
        w_s = torch.randn(final.shape, generator=gen, dtype=torch.float64)
        loss, want_loss = loss + (final.double() * w_s).sum(), want_loss + (want_final * w_s).sum()
    loss.backward()
    want_loss.backward()
    assert gdn_stand_in.runs == ["gdn", "gdn_bwd"]
    for name in leaves:
        got, want = ours[name].grad, theirs[name].grad
        assert got is not None and got.dtype == x[name].dtype, name
        # bf16 gradients of q, k, v (and beta in the io dtype): their rounding; the rest fp32
        tolerance = 4e-3 if got.dtype in (torch.bfloat16, torch.float16) else 1e-5
        assert _rel(got, want) <= tolerance, (name, _rel(got, want))


def test_one_graph_per_key_reused_across_calls(gdn_stand_in):
    x = _inputs()
    for seed in (1, 2):  # new values, the same key: the same graph
        gated_delta_net(**_inputs(seed=seed))
    assert op_graphs.GRAPHS.builds == 1 and len(op_graphs.GRAPHS.keys()) == 1
    gated_delta_net(**x, output_final_state=True)  # a flag: a graph of its own
    gated_delta_net(**_inputs(lengths=(4, 4)))  # another T and N
    gated_delta_net(**_inputs(io=torch.float16))  # another dtype
    assert op_graphs.GRAPHS.builds == 4
    gated_delta_net(**x, output_final_state=True)
    assert op_graphs.GRAPHS.builds == 4
    (key,) = [k for k in op_graphs.GRAPHS.keys() if k[0] == "gdn" and dict(k[3])["output_final_state"]]
    problem = key[1]
    assert (problem.tokens, problem.sequences, problem.heads_qk, problem.heads_v) == (15, 3, 1, 2)
    assert problem.device == torch.device("cpu")
    built = op_graphs.GRAPHS.get(key, lambda: pytest.fail("a cached key built again"))
    # 3 sequences: a small scan grid (BLOCK_V 32), at the measured occupancy hint
    assert built.plan_name == "gdn_cutile[BLOCK_V=32,OCCUPANCY=2,SEGMENT=0]"


def test_max_seqlen_reaches_the_forward_and_backward_graphs(gdn_stand_in):
    # the hint is a graph attribute (the ranking reads it), so a call with it has graphs of its own
    x = {n: t.requires_grad_(n in ("q", "k", "v")) for n, t in _inputs().items()}
    o, _ = gated_delta_net(**x, max_seqlen=9)
    o.float().sum().backward()
    hinted = [k for k in op_graphs.GRAPHS.keys() if k[1].max_seqlen == 9]
    assert sorted(k[0] for k in hinted) == ["gdn", "gdn_bwd"]
    for key in hinted:
        built = op_graphs.GRAPHS.get(key, lambda: pytest.fail("a cached key built again"))
        (node,) = [n for n in built.graph.nodes if n.type.name.startswith("GDN")]
        assert node.params["max_seqlen"] == 9
    gated_delta_net(**_inputs())
    assert op_graphs.GRAPHS.builds == 3  # the unhinted call: a graph of its own


def test_a_non_contiguous_input_runs_its_contiguous_copy(gdn_stand_in):
    x = _inputs()
    v = x["v"]  # [T, HV, V] stored head-major
    x["v"] = torch.empty(v.shape[1], v.shape[0], v.shape[2], dtype=v.dtype).transpose(0, 1)
    x["v"].copy_(v)
    assert not x["v"].is_contiguous()
    o, _ = gated_delta_net(**x)
    assert _rel(o, _reference(x, {})[0]) <= 4e-3


def test_no_token_runs_nothing(gdn_stand_in):
    x = _inputs(lengths=(0, 0), state=True)
    o, final = gated_delta_net(**x, output_final_state=True)
    assert o.shape == (0, 2, 64) and torch.equal(final, x["initial_state"])
    assert gdn_stand_in.runs == [] and op_graphs.GRAPHS.builds == 0


def test_a_gdn_bwd_graph_no_engine_serves_raises_the_planners_error(gdn_stand_in, monkeypatch):
    real = engine_mod.support_reason

    def forward_only(facts):
        return "the backward is switched off for this test" if facts.backward else real(facts)

    monkeypatch.setattr(engine_mod, "support_reason", forward_only)
    monkeypatch.setattr(sm90_mod, "support_reason", forward_only)  # gdn_sm90_bwd's copy of the rule
    x = {n: t.requires_grad_(n in ("q", "k", "v")) for n, t in _inputs().items()}
    o, _ = gated_delta_net(**x)  # the forward is served
    with pytest.raises(
        pygraph.GraphNotSupportedError, match="gdn_cutile_bwd: the backward is switched off for this test"
    ):
        o.float().sum().backward()
    assert not any(k[0] == "gdn_bwd" for k in op_graphs.GRAPHS.keys())  # a failure is not cached


def test_a_forward_graph_no_engine_serves_names_the_engines_reason(gdn_stand_in):
    x = _inputs(d=96)  # head dim 96: gdn_cutile serves 64, 128 and 256
    with pytest.raises(pygraph.GraphNotSupportedError, match=r"head dims K=96, V=96"):
        gated_delta_net(**x)


def test_torch_compile_fullgraph_traces_the_op_and_its_gradient(gdn_stand_in):
    torch._dynamo.reset()
    x = _inputs(state=True)
    leaves = ("q", "k", "v", "g", "beta", "initial_state")

    def step(q, k, v, g, beta, cu_seqlens, initial_state):
        o, final = gated_delta_net(q, k, v, g, beta, cu_seqlens, initial_state=initial_state,
                                   output_final_state=True)  # fmt: skip
        return o.float().square().sum() + final.sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    compiled(**ours).backward()
    eager = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    step(**eager).backward()
    assert gdn_stand_in.runs == ["gdn", "gdn_bwd", "gdn", "gdn_bwd"]
    for name in leaves:
        assert torch.equal(ours[name].grad, eager[name].grad), name
    torch._dynamo.reset()


def test_torch_compile_dynamic_shapes_runs_one_graph_per_token_count(gdn_stand_in):
    torch._dynamo.reset()

    def f(q, k, v, g, beta, cu_seqlens):
        return gated_delta_net(q, k, v, g, beta, cu_seqlens)[0]

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    for lengths in ((5, 1, 9), (3, 4, 20), (7,)):
        x = _inputs(lengths=lengths)
        assert _rel(compiled(**x), _reference(x, {})[0]) <= 4e-3, lengths
    assert op_graphs.GRAPHS.builds == 3  # one pygraph graph per (T, N)
    torch._dynamo.reset()


def test_torch_compile_with_fake_inputs_traces_without_running(gdn_stand_in):
    """fullgraph tracing on meta tensors: only the fake kernel runs (no graph is built)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._dynamo.reset()
    captured = []

    def backend(gm, example_inputs):
        captured.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm

    def f(q, k, v, g, beta, cu_seqlens):
        o, _ = gated_delta_net(q, k, v, g, beta, cu_seqlens)
        return o

    x = _inputs()
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = {n: mode.from_tensor(t) for n, t in x.items()}
        torch._dynamo.explain(f)(**fake)  # no graph break under fullgraph rules
        out = torch.compile(f, fullgraph=True, backend=backend)(**fake)
    assert out.shape == (15, 2, 64)
    assert any(OP.default in targets for targets in captured), captured
    assert op_graphs.GRAPHS.builds == 0 and gdn_stand_in.runs == []
    torch._dynamo.reset()


def test_opcheck(gdn_stand_in):
    x = _inputs(state=True)
    x = {n: t.requires_grad_(n in ("q", "k", "v", "g", "beta", "initial_state")) for n, t in x.items()}
    torch.library.opcheck(
        OP, tuple(x.values())[:6], {"initial_state": x["initial_state"], "output_final_state": True}
    )


def test_the_package_reaches_the_op_on_first_access():
    import pygraph_linear_attention

    assert pygraph_linear_attention.gated_delta_net is gated_delta_net
    with pytest.raises(AttributeError, match="has no attribute 'gated_delta_rule'"):
        pygraph_linear_attention.gated_delta_rule  # noqa: B018


# --- prepared calls: a repeated signature skips the checks, a changed one is checked again ------------


@pytest.fixture
def checks(monkeypatch):
    """Counts the ops' argument checks (check_forward) on the forward's calls."""
    seen = []
    real = op_graphs.check_forward

    def counted(*args, **kwargs):
        seen.append(kwargs.get("op"))
        return real(*args, **kwargs)

    monkeypatch.setattr(op_graphs, "check_forward", counted)
    return seen


@pytest.mark.parametrize("grad", [False, True], ids=["direct", "through the dispatcher"])
def test_a_repeated_call_is_served_prepared_with_the_checked_calls_values(gdn_stand_in, checks, grad):
    x = {n: t.requires_grad_(grad and n != "cu_seqlens") for n, t in _inputs(state=True).items()}
    first = gated_delta_net(**x, output_final_state=True)
    again = gated_delta_net(**x, output_final_state=True)
    assert checks == ["gdn"] and op_graphs.GRAPHS.builds == 1  # the second: no check, lookup or build
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert gdn_stand_in.runs == ["gdn", "gdn"]


def test_a_repeated_direct_call_makes_no_stand_in_for_an_absent_final_state(gdn_stand_in, monkeypatch):
    # the custom op must return a tensor where the final state is absent; the direct call returns
    # None there, so it allocates nothing for it
    made = []
    real = op_graphs.none_state
    monkeypatch.setattr(op_graphs, "none_state", lambda like: made.append(like.shape) or real(like))
    x = _inputs()
    first, _ = gated_delta_net(**x)
    made.clear()
    o, final = gated_delta_net(**x)
    assert final is None and made == [] and torch.equal(o, first)
    assert gdn_stand_in.runs == ["gdn", "gdn"]


def test_a_call_differing_in_anything_the_checks_read_is_checked_again(gdn_stand_in, checks):
    x = _inputs()
    gated_delta_net(**x)
    v = x["v"]
    strided = torch.empty(v.shape[1], v.shape[0], v.shape[2], dtype=v.dtype).transpose(0, 1).copy_(v)
    changed = [
        {**x, "cu_seqlens": x["cu_seqlens"].long()},  # a dtype
        {**x, "v": strided},  # a stride
        _inputs(lengths=(4, 4)),  # shapes
        {**x, "use_qk_l2norm_in_kernel": True},  # a flag
        {**x, "scale": 0.25},  # the scale
        {**x, "max_seqlen": 9},  # the ranking's hint
    ]
    for n, call in enumerate(changed, start=2):
        gated_delta_net(**call)
        assert len(checks) == n, n
    gated_delta_net(**x, scale=0.25)
    assert len(checks) == len(changed) + 1  # remembered
    # a flag of another type misses the direct path; torch's dispatcher reads 1 as True, as before,
    # and that call is remembered
    runs = len(gdn_stand_in.runs)
    gated_delta_net(**x, use_qk_l2norm_in_kernel=1)
    assert len(checks) == len(changed) + 1 and len(gdn_stand_in.runs) == runs + 1


def test_a_bad_call_after_a_good_one_still_raises_the_typed_error(gdn_stand_in):
    x = _inputs()
    gated_delta_net(**x)
    with pytest.raises(pygraph.errors.OpInputError, match=r"g must be torch.float32"):
        gated_delta_net(**{**x, "g": x["g"].double()})
    with pytest.raises(pygraph.errors.OpInputError, match=r"a_log given with safe_gate=False"):
        gated_delta_net(**x, a_log=torch.zeros(2))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("name", ["q", "v", "g", "cu_seqlens", "initial_state"])
@pytest.mark.parametrize("batched", [False, True], ids=["thd", "batched"])
def test_a_sparse_or_nested_operand_is_a_typed_error_naming_it(gdn_stand_in, name, batched):
    x = _inputs(lengths=(4, 4), state=True)
    if batched:  # [B, T, ...]: the layouts leave a sparse tensor to the op's checks
        x = {
            n: t.unflatten(0, (2, 4)) if n not in ("cu_seqlens", "initial_state") else t for n, t in x.items()
        }
        del x["cu_seqlens"]
    gated_delta_net(**x)  # remembered: the bad calls below are not served by it
    if name not in x:
        return
    with pytest.raises(
        pygraph.errors.OpInputError, match=rf"{name} must be a dense \(torch.strided\) tensor"
    ):
        gated_delta_net(**{**x, name: x[name].to_sparse()})
    if x[name].dim() > 1:
        nested = torch.nested.nested_tensor(list(x[name]))
        with pytest.raises(pygraph.errors.OpInputError, match=rf"{name} must be a dense .* got a nested one"):
            gated_delta_net(**{**x, name: nested})


def test_a_misaligned_operand_of_a_remembered_call_is_copied(gdn_stand_in):
    x = _inputs()
    want, _ = gated_delta_net(**x)
    flat = torch.empty(x["q"].numel() + 1, dtype=x["q"].dtype)[1:]
    q = flat.view(x["q"].shape).copy_(x["q"])
    assert q.data_ptr() % 16 != 0
    got, _ = gated_delta_net(**{**x, "q": q})  # the same signature: served prepared, q copied
    assert torch.equal(got, want)


# --- the backward's prepared calls: as the forward's ---------------------------------------------------

BACKWARD = torch.ops.pygraph_linear_attention.gated_delta_net_backward


@pytest.fixture
def backward_checks(monkeypatch):
    """Counts the backward's checks (check_backward) on its calls."""
    from pygraph_linear_attention.gdn import op as gdn_op

    seen = []
    real = gdn_op.check_backward

    def counted(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(gdn_op, "check_backward", counted)
    return seen


def _backward_call(x, *, final=True, seed=3):
    """The backward op's arguments (positional, then by name) of ``x``'s forward: a dO (and a
    d_final_state with ``final``)."""
    gen = torch.Generator().manual_seed(seed)
    t, hv, d = x["v"].shape
    d_o = torch.randn(t, hv, d, generator=gen).to(x["q"].dtype)
    n = len(x["cu_seqlens"]) - 1
    d_final = torch.randn(n, hv, d, x["k"].shape[2], generator=gen) if final else None
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["cu_seqlens"], d_o, d_final)
    return args, {"initial_state": x.get("initial_state")}


def test_a_repeated_backward_is_served_prepared_with_the_checked_calls_values(gdn_stand_in, backward_checks):
    x = _inputs(state=True)
    args, named = _backward_call(x)
    first = BACKWARD(*args, **named)
    assert len(backward_checks) == 1 and op_graphs.GRAPHS.builds == 1
    again = BACKWARD(*args, **named)
    assert len(backward_checks) == 1 and op_graphs.GRAPHS.builds == 1  # no check, no lookup, no build
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert gdn_stand_in.runs == ["gdn_bwd", "gdn_bwd"]


@pytest.mark.parametrize("create_graph", [False, True], ids=["direct", "through the dispatcher"])
def test_autograds_repeated_backward_is_served_prepared(
    gdn_stand_in, backward_checks, create_graph, monkeypatch
):
    # create_graph keeps grad mode on in the backward: the call goes through torch's dispatcher
    from pygraph_linear_attention.gdn import op as gdn_op

    dispatched = []
    op = gdn_op._backward_op
    monkeypatch.setattr(gdn_op, "_backward_op", lambda *args: dispatched.append(1) or op(*args))
    x = {n: t.requires_grad_(n != "cu_seqlens") for n, t in _inputs(state=True).items()}
    leaves = [t for n, t in x.items() if n != "cu_seqlens"]
    d_o, d_final = _backward_call(x)[0][6:]
    grads = []
    for _ in range(2):
        o, final = gated_delta_net(**x, output_final_state=True)
        got = torch.autograd.grad((o, final), leaves, (d_o, d_final), create_graph=create_graph)
        grads.append([t.detach() for t in got])
    assert len(backward_checks) == 1 and op_graphs.GRAPHS.builds == 2  # the first backward's
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert gdn_stand_in.runs == ["gdn", "gdn_bwd"] * 2
    assert len(dispatched) == (2 if create_graph else 1)  # the repeated call: without the dispatcher


def test_a_backward_differing_in_anything_the_checks_read_is_checked_again(gdn_stand_in, backward_checks):
    x = _inputs(state=True)
    args, named = _backward_call(x)
    BACKWARD(*args, **named)
    d_o = args[6]
    strided = (
        torch.empty(d_o.shape[1], d_o.shape[0], d_o.shape[2], dtype=d_o.dtype).transpose(0, 1).copy_(d_o)
    )
    changed = [
        ((*args[:6], strided, args[7]), named),  # dO's stride
        ((*args[:7], None), named),  # no d_final_state
        (args, {**named, "scale": 0.25}),  # the scale
        (args, {**named, "use_qk_l2norm_in_kernel": True}),  # a flag
        ((*args[:5], args[5].long(), *args[6:]), named),  # cu_seqlens' dtype
    ]
    for n, (call, kwargs) in enumerate(changed, start=2):
        BACKWARD(*call, **kwargs)
        assert len(backward_checks) == n, n
    BACKWARD(*args, **{**named, "scale": 0.25})
    assert len(backward_checks) == len(changed) + 1  # remembered


def test_a_bad_backward_after_a_good_one_still_raises_the_typed_error(gdn_stand_in):
    x = _inputs(state=True)
    args, named = _backward_call(x)
    BACKWARD(*args, **named)
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of o must be q's dtype torch.bfloat16, got"):
        BACKWARD(*args[:6], args[6].half(), args[7], **named)
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of final_state must be \[N, HO, V, K\]"):
        BACKWARD(*args[:7], args[7][:2], **named)
    with pytest.raises(pygraph.errors.OpInputError, match=r"grad of final_state must be torch.float32"):
        BACKWARD(*args[:7], args[7].double(), **named)
    with pytest.raises(pygraph.errors.OpInputError, match=r"g must be torch.float32"):
        BACKWARD(*args[:3], args[3].double(), *args[4:], **named)
