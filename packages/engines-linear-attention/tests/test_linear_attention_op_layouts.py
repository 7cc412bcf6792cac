"""The ops' Python functions' layouts on the CPU stand-ins (``gdn_stand_in``, ``kda_stand_in``):
[B, T, H, D] inputs without cu_seqlens (B sequences of T tokens), [1, T, H, D] with cu_seqlens,
THD without cu_seqlens (one sequence), half-precision gates converted to fp32, GQA (more q/k heads
than v heads) against the float64 token loops; the prepared calls' fast path for the new layouts;
the typed errors naming the call and the tensor (`common.op_layout`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention.common import op_graphs, op_layout  # noqa: E402
from pygraph_linear_attention.kda.op import gated_delta_net_v2, kimi_delta_attention  # noqa: E402
from pygraph_linear_attention.ops import gated_delta_net  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_reference,
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

B, T, D = 3, 6, 64
OPS = {"gdn": gated_delta_net, "kda": kimi_delta_attention, "gdn2": gated_delta_net_v2}
REFERENCES = {
    "gdn": gated_delta_net_reference,
    "kda": kimi_delta_attention_reference,
    "gdn2": gated_delta_net_v2_reference,
}


def _batched(op, b=B, t=T, h=1, hv=2, io=torch.bfloat16, seed=0):
    """[B, T, ...] inputs of ``op`` (gates per output head HO = max(h, hv))."""
    gen = torch.Generator().manual_seed(seed)
    ho = max(h, hv)
    per_key = (D,) if op != "gdn" else ()

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    x = {
        "q": normal(b, t, h, D).to(io),
        "k": torch.nn.functional.normalize(normal(b, t, h, D), dim=-1).to(io),
        "v": normal(b, t, hv, D).to(io),
        "g": torch.nn.functional.logsigmoid(normal(b, t, ho, *per_key)),
        "beta": torch.rand(b, t, ho, *((D,) if op == "gdn2" else ()), generator=gen),
    }
    if op == "gdn2":
        x["w"] = torch.rand(b, t, ho, D, generator=gen).to(io)
    return x


def _flat(x):
    return {n: t.flatten(0, 1) for n, t in x.items()}


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _reference(op, x, cu, **options):
    tensors = [x[n] for n in ("q", "k", "v", "g", "beta")] + ([x["w"]] if op == "gdn2" else [])
    return REFERENCES[op](*tensors, cu, **options)


@pytest.fixture
def stand_ins(request):
    """Both stand-ins: gdn's (gdn_cutile) and kda's / gdn2's (their cuTile engines)."""
    request.getfixturevalue("gdn_stand_in")
    return request.getfixturevalue("kda_stand_in")


@pytest.mark.parametrize("op", list(OPS))
def test_a_batch_without_cu_seqlens_is_b_sequences_of_t_tokens(stand_ins, op):
    x = _batched(op)
    o, final = OPS[op](**x, output_final_state=True)
    want_o, want_final = _reference(op, _flat(x), _cu([T] * B), output_final_state=True)
    assert o.shape == (B, T, 2, D) and o.dtype == torch.bfloat16
    assert _rel(o.flatten(0, 1), want_o) <= 4e-3
    assert final.shape == (B, 2, D, D) and _rel(final, want_final) <= 1e-6


@pytest.mark.parametrize("op", list(OPS))
def test_packed_sequences_with_b_1_and_cu_seqlens(stand_ins, op):
    x = _batched(op, b=1, t=15)
    cu = _cu([5, 1, 9])
    o, _ = OPS[op](**x, cu_seqlens=cu)
    want_o, _ = _reference(op, _flat(x), cu)
    assert o.shape == (1, 15, 2, D) and _rel(o[0], want_o) <= 4e-3


def test_thd_without_cu_seqlens_is_one_sequence(gdn_stand_in):
    x = _flat(_batched("gdn", b=1, t=11))
    o, _ = gated_delta_net(**x)
    assert o.shape == (11, 2, D) and _rel(o, _reference("gdn", x, _cu([11]))[0]) <= 4e-3


@pytest.mark.parametrize("op", list(OPS))
def test_gqa_more_q_k_heads_than_v_heads(stand_ins, op):
    """H = 4 q/k heads over HV = 2 v heads: the output, gates and states per q/k head (HO = 4)."""
    x = _flat(_batched(op, b=2, t=7, h=4, hv=2))
    cu = _cu([7, 7])
    state = torch.randn(2, 4, D, D, generator=torch.Generator().manual_seed(3)) * 0.1
    leaves = ("q", "k", "v", "g", "beta")
    ours = {n: t.clone().requires_grad_(n in leaves) for n, t in x.items()}
    theirs = {n: t.detach().double().requires_grad_(n in leaves) for n, t in x.items()}
    o, final = OPS[op](**ours, cu_seqlens=cu, initial_state=state, output_final_state=True)
    want_o, want_final = _reference(op, theirs, cu, initial_state=state, output_final_state=True)
    assert o.shape == (14, 4, D) and final.shape == (2, 4, D, D)
    assert _rel(o, want_o) <= 4e-3 and _rel(final, want_final) <= 1e-6
    w_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(5)).to(o.dtype).double()
    (o.double() * w_o).sum().backward()
    (want_o * w_o).sum().backward()
    for name in leaves:
        got, want = ours[name].grad, theirs[name].grad
        assert got.shape == x[name].shape, name
        tolerance = 4e-3 if got.dtype == torch.bfloat16 else 1e-5
        assert _rel(got, want) <= tolerance, (name, _rel(got, want))


@pytest.mark.parametrize("op", ["gdn", "kda"])
@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_a_half_precision_gate_is_converted_to_fp32(stand_ins, op, half):
    x = _flat(_batched(op))
    cu = _cu([T] * B)
    rounded = {**x, "g": x["g"].to(half)}
    want_o, _ = OPS[op](**{**rounded, "g": rounded["g"].float()}, cu_seqlens=cu)
    g = rounded["g"].clone().requires_grad_(True)
    o, _ = OPS[op](**{**rounded, "g": g}, cu_seqlens=cu)
    assert torch.equal(o, want_o)
    o.float().sum().backward()
    assert g.grad is not None and g.grad.dtype == half and g.grad.shape == g.shape


def test_a_half_precision_beta_of_another_dtype_is_converted(gdn_stand_in):
    x = _flat(_batched("gdn"))
    cu = _cu([T] * B)
    want, _ = gated_delta_net(**{**x, "beta": x["beta"].half().float()}, cu_seqlens=cu)
    got, _ = gated_delta_net(**{**x, "beta": x["beta"].half()}, cu_seqlens=cu)  # q is bf16
    assert torch.equal(got, want)


def test_a_repeated_batched_call_is_served_prepared(gdn_stand_in, monkeypatch):
    seen = []
    real = op_graphs.check_forward
    monkeypatch.setattr(op_graphs, "check_forward", lambda *a, **k: seen.append(1) or real(*a, **k))
    x = _batched("gdn")
    first, _ = gated_delta_net(**x)
    again, _ = gated_delta_net(**x)
    assert len(seen) == 1 and op_graphs.GRAPHS.builds == 1 and torch.equal(first, again)
    # another batch shape of the same B * T: another implied cu_seqlens, checked and built again
    other = {n: t.reshape(B * T // 2, 2, *t.shape[2:]) for n, t in x.items()}
    o, _ = gated_delta_net(**other)
    assert len(seen) == 2 and op_graphs.GRAPHS.builds == 2 and o.shape == (B * T // 2, 2, 2, D)
    want, _ = _reference("gdn", _flat(x), _cu([2] * (B * T // 2)))
    assert _rel(o.flatten(0, 1), want) <= 4e-3


def test_the_implied_cu_seqlens_is_made_once_per_batch_shape(gdn_stand_in):
    op_layout._implied.clear()
    x = _batched("gdn")
    gated_delta_net(**x)
    (cu,) = op_layout._implied.values()
    assert cu.tolist() == [0, T, 2 * T, 3 * T] and cu.dtype == torch.int32
    gated_delta_net(**x)
    assert list(op_layout._implied.values()) == [cu]


def test_an_implied_cu_seqlens_made_under_inference_mode_serves_a_later_training_call(gdn_stand_in):
    # an inference tensor kept for later calls: autograd refuses to save it for the backward
    op_layout._implied.clear()
    x = _batched("gdn")
    with torch.inference_mode():
        want, _ = gated_delta_net(**x)
    x = {n: t.clone().requires_grad_() for n, t in x.items()}
    o, _ = gated_delta_net(**x)
    o.sum().backward()
    assert torch.equal(o.detach(), want) and x["q"].grad is not None


def test_a_fake_tensor_mode_call_neither_keeps_nor_reads_the_implied_cu_seqlens(gdn_stand_in):
    from torch._subclasses.fake_tensor import FakeTensorMode

    op_layout._implied.clear()
    x = _batched("gdn")
    with FakeTensorMode() as mode:
        o, _ = gated_delta_net(**{n: mode.from_tensor(t) for n, t in x.items()})
        assert o.shape == (B, T, 2, D)
    want, _ = gated_delta_net(**x)  # a fake cu_seqlens kept would reach this real call
    assert all(type(cu) is torch.Tensor for cu in op_layout._implied.values())
    with FakeTensorMode() as mode:  # and the real one kept is not handed to the fake mode
        o, _ = gated_delta_net(**{n: mode.from_tensor(t) for n, t in x.items()})
        assert o.shape == (B, T, 2, D)
    got, _ = gated_delta_net(**x)
    assert torch.equal(got, want)


BAD = [
    ("cu-with-batch", lambda x: {**x, "cu_seqlens": _cu([T] * B)},
     "cu_seqlens given with q [B, T, H, K] of B = 3: variable-length sequences are packed along T with B = 1"),
    ("k-lead", lambda x: {**x, "k": x["k"][:, :-1]}, "k must be [B, T, ...] with q's [B, T] = [3, 6] (q is [B, T, H, K]), got shape [3, 5, 1, 64]"),
    ("g-thd", lambda x: {**x, "g": x["g"].flatten(0, 1)}, "g must be [B, T, ...] with q's [B, T] = [3, 6]"),
    ("q-rank", lambda x: {**x, "q": x["q"][None]}, "q must be [T, H, K] (THD) or [B, T, H, K], got shape [1, 3, 6, 1, 64]"),
    ("g-heads", lambda x: {**x, "g": x["g"][..., :1]}, "g must be [T, HV] = [18, 2], got shape [18, 1]"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "says"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_a_bad_layout_is_a_typed_error_naming_the_tensor(gdn_stand_in, change, says):
    with pytest.raises(OpInputError) as err:
        gated_delta_net(**change(_batched("gdn")))
    assert str(err.value).startswith("pygraph_linear_attention.gated_delta_net(): "), str(err.value)
    assert says in str(err.value), str(err.value)
