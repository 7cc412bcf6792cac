"""`pygraph_linear_attention.fla` on the CPU stand-ins: flash-linear-attention's signatures, layouts
([B, T, H, D], packed with B = 1 and cu_seqlens), defaults, state layout ([N, HV, K, V] in and out,
state_v_first) and gates (use_gate_in_kernel) against FLA's semantics written with the float64
token loops; the typed errors naming FLA's argument and its value. The device run against FLA
itself is ``test_fla_front_door_sm90.py``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_linear_attention import fla  # noqa: E402
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_reference,
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

B, T, H, HV, K, V = 2, 7, 1, 2, 64, 64
BF = torch.bfloat16


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _inputs(op="gdn", b=B, t=T, h=H, hv=HV, seed=0, gate_dtype=torch.float32):
    """FLA-layout inputs: q, k [B, T, H, K], v [B, T, HV, V], the gates [B, T, HV(, K)], an FLA-layout
    initial state [N, HV, K, V] (N = B)."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    per_key = (K,) if op != "gdn" else ()
    x = {
        "q": normal(b, t, h, K).to(BF),
        "k": F.normalize(normal(b, t, h, K), dim=-1).to(BF),
        "v": normal(b, t, hv, V).to(BF),
        "g": F.logsigmoid(normal(b, t, hv, *per_key)).to(gate_dtype),
    }
    if op == "gdn2":
        x["b"] = torch.rand(b, t, hv, K, generator=gen).to(BF)
        x["w"] = torch.rand(b, t, hv, V, generator=gen).to(BF)
    else:
        x["beta"] = torch.rand(b, t, hv, generator=gen).to(BF)
    x["initial_state"] = normal(b, hv, K, V) * 0.1  # FLA's layout
    return x


def _flat(t):
    return t.flatten(0, 1)


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)


@pytest.fixture
def stand_ins(request):
    request.getfixturevalue("gdn_stand_in")
    return request.getfixturevalue("kda_stand_in")


def test_chunk_gated_delta_rule_is_flas_on_its_layout(stand_ins):
    x = _inputs()
    o, final = fla.chunk_gated_delta_rule(**x, output_final_state=True)
    # FLA's semantics: B sequences of T tokens, the state [N, HV, K, V] (ours transposed)
    want_o, want_final = gated_delta_net_reference(
        *(_flat(x[n]) for n in ("q", "k", "v", "g", "beta")), _cu([T] * B),
        initial_state=x["initial_state"].transpose(-1, -2), output_final_state=True,
    )  # fmt: skip
    assert o.shape == (B, T, HV, V) and o.dtype == BF
    assert final.shape == (B, HV, K, V) and final.dtype == torch.float32
    assert _rel(_flat(o), want_o) <= 4e-3
    assert _rel(final, want_final.transpose(-1, -2)) <= 1e-6


def test_without_output_final_state_the_state_is_none(stand_ins):
    o, final = fla.chunk_gated_delta_rule(*(_inputs()[n] for n in ("q", "k", "v", "g", "beta")))
    assert final is None and o.shape == (B, T, HV, V)


def test_varlen_with_b_1_and_int64_cu_seqlens(stand_ins):
    x = _inputs(b=1, t=15)
    cu = _cu([5, 1, 9])
    h0 = torch.randn(3, HV, K, V, generator=torch.Generator().manual_seed(1)) * 0.1
    o, final = fla.chunk_gated_delta_rule(
        **{**x, "initial_state": h0}, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True
    )
    want_o, want_final = gated_delta_net_reference(
        *(x[n][0] for n in ("q", "k", "v", "g", "beta")), cu, initial_state=h0.transpose(-1, -2),
        output_final_state=True, use_qk_l2norm=True,
    )  # fmt: skip
    assert o.shape == (1, 15, HV, V) and _rel(o[0], want_o) <= 4e-3
    assert final.shape == (3, HV, K, V) and _rel(final, want_final.transpose(-1, -2)) <= 1e-6


def test_state_v_first_is_pygraphs_layout_untouched(stand_ins):
    x = _inputs()
    theirs = x["initial_state"].transpose(-1, -2).contiguous()  # [N, HV, V, K]
    o, final = fla.chunk_gated_delta_rule(
        **{**x, "initial_state": theirs}, output_final_state=True, state_v_first=True
    )
    want_o, want_final = fla.chunk_gated_delta_rule(**x, output_final_state=True)
    assert torch.equal(o, want_o) and torch.equal(final, want_final.transpose(-1, -2))
    assert final.is_contiguous()


def test_a_final_state_carried_into_the_next_call_continues_the_sequence(stand_ins):
    x = _inputs(b=1, t=12)
    names = ("q", "k", "v", "g", "beta")
    whole, whole_final = fla.chunk_gated_delta_rule(*(x[n] for n in names), output_final_state=True)
    first, state = fla.chunk_gated_delta_rule(*(x[n][:, :5] for n in names), output_final_state=True)
    second, final = fla.chunk_gated_delta_rule(
        *(x[n][:, 5:] for n in names), initial_state=state, output_final_state=True
    )
    assert _rel(torch.cat([first, second], 1), whole) <= 4e-3 and _rel(final, whole_final) <= 1e-6


def test_gradients_reach_every_input_in_flas_layout(stand_ins):
    x = _inputs(gate_dtype=BF)  # a bfloat16 g, as FLA takes it
    leaves = ("q", "k", "v", "g", "beta", "initial_state")
    ours = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    theirs = {n: t.detach().double().requires_grad_(True) for n, t in x.items()}
    o, final = fla.chunk_gated_delta_rule(**ours, output_final_state=True)
    want_o, want_final = gated_delta_net_reference(
        *(_flat(theirs[n]) for n in ("q", "k", "v", "g", "beta")), _cu([T] * B),
        initial_state=theirs["initial_state"].transpose(-1, -2), output_final_state=True,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(9)
    w_o = torch.randn(o.shape, generator=gen).to(BF).double()
    w_s = torch.randn(final.shape, generator=gen, dtype=torch.float64)
    ((o.double() * w_o).sum() + (final.double() * w_s).sum()).backward()
    (
        (_flat(want_o.unflatten(0, (B, T))) * _flat(w_o)).sum() + (want_final.transpose(-1, -2) * w_s).sum()
    ).backward()
    for name in leaves:
        got, want = ours[name].grad, theirs[name].grad
        assert got is not None and got.dtype == x[name].dtype and got.shape == x[name].shape, name
        tolerance = 8e-3 if got.dtype == BF else 1e-5
        assert _rel(got, want) <= tolerance, (name, _rel(got, want))


def test_use_gate_in_kernel_is_the_softplus_gate(stand_ins):
    x = _inputs()
    gen = torch.Generator().manual_seed(4)
    raw = torch.randn(B, T, HV, generator=gen)
    a_log, dt_bias = torch.log(1 + 15 * torch.rand(HV, generator=gen)), torch.randn(HV, generator=gen)
    o, _ = fla.chunk_gated_delta_rule(
        **{**x, "g": raw}, use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias
    )
    want_o, _ = gated_delta_net_reference(
        *(_flat(t) for t in (x["q"], x["k"], x["v"], raw, x["beta"])), _cu([T] * B),
        initial_state=x["initial_state"].transpose(-1, -2), safe_gate=True, a_log=a_log, dt_bias=dt_bias,
    )  # fmt: skip
    assert _rel(_flat(o), want_o) <= 4e-3
    # A_log and dt_bias without use_gate_in_kernel are not read (as FLA does not read them)
    plain, _ = fla.chunk_gated_delta_rule(**x, A_log=a_log, dt_bias=dt_bias)
    assert torch.equal(plain, fla.chunk_gated_delta_rule(**x)[0])


def test_chunk_kda_with_flas_bounded_gate(stand_ins):
    x = _inputs("kda")
    gen = torch.Generator().manual_seed(5)
    raw = torch.randn(B, T, HV, K, generator=gen)
    a_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV * K, generator=gen)  # FLA's [HV * K]
    o, final = fla.chunk_kda(
        **{**x, "g": raw}, use_gate_in_kernel=True, safe_gate=True, lower_bound=-4.0, A_log=a_log,
        dt_bias=dt_bias, output_final_state=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
    )  # fmt: skip
    want_o, want_final = kimi_delta_attention_reference(
        *(_flat(t) for t in (x["q"], x["k"], x["v"], raw, x["beta"])), _cu([T] * B),
        initial_state=x["initial_state"].transpose(-1, -2), output_final_state=True, safe_gate=True,
        gate_lower_bound=-4.0, a_log=a_log, dt_bias=dt_bias.view(HV, K), use_beta_sigmoid=True,
        allow_neg_eigval=True,
    )  # fmt: skip
    assert o.shape == (B, T, HV, V) and _rel(_flat(o), want_o) <= 4e-3
    assert _rel(final, want_final.transpose(-1, -2)) <= 1e-6


def test_chunk_kda_safe_gate_on_a_log_space_g_changes_nothing(stand_ins):
    x = _inputs("kda")
    o, _ = fla.chunk_kda(**x, safe_gate=True, lower_bound=-5.0, disable_recompute=True, chunk_size=32)
    assert torch.equal(o, fla.chunk_kda(**x)[0])


def test_chunk_gdn2_takes_flas_b_and_an_fp32_w_rounded_to_the_io_dtype(stand_ins):
    x = _inputs("gdn2", hv=H)
    w32 = torch.rand(B, T, H, V, generator=torch.Generator().manual_seed(6))
    o, final = fla.chunk_gdn2(**{**x, "w": w32}, output_final_state=True)
    want_o, want_final = gated_delta_net_v2_reference(
        *(_flat(t) for t in (x["q"], x["k"], x["v"], x["g"], x["b"], w32.to(BF))), _cu([T] * B),
        initial_state=x["initial_state"].transpose(-1, -2), output_final_state=True,
    )  # fmt: skip
    assert o.shape == (B, T, H, V) and _rel(_flat(o), want_o) <= 4e-3
    assert _rel(final, want_final.transpose(-1, -2)) <= 1e-6


def test_the_names_fla_users_import():
    assert fla.chunk_gdn is fla.chunk_gated_delta_rule
    assert set(fla.__all__) == {"chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "chunk_gdn2"}


BAD = [
    ("gdn", "cp-batch", {"cp_context": object()}, "cp_context: the batch size must be 1 (packed sequences), got q"),
    ("kda", "intermediates", {"return_intermediate_states": True}, "return_intermediate_states=True"),
    ("kda", "unbounded-gate", {"use_gate_in_kernel": True, "A_log": torch.zeros(HV)},
     "use_gate_in_kernel=True with lower_bound=None asks for FLA's unbounded gate"),
    ("gdn2", "unbounded-gate", {"use_gate_in_kernel": True, "A_log": torch.zeros(H)},
     "use_gate_in_kernel=True with lower_bound=None"),
    ("kda", "bound-range", {"use_gate_in_kernel": True, "safe_gate": True, "lower_bound": -6.0},
     "`lower_bound` must be in the safe range [-5, 0), got -6.0"),
    ("gdn", "no-a-log", {"use_gate_in_kernel": True}, "A_log must be provided when use_gate_in_kernel=True"),
    ("gdn", "fp32-q", {"q": "fp32"}, "q is torch.float32: pygraph's kernels take bfloat16 or float16 q, k and v"),
    ("gdn", "unknown", {"use_gate": True}, "use_gate: not an argument of FLA's function"),
    ("gdn", "head-first", {"head_first": True}, "head_first=True: FLA removed it"),
    ("gdn", "neg-eigval", {"allow_neg_eigval": True}, "`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`."),
    ("gdn", "batch-with-cu", {"cu_seqlens": _cu([T, T])}, "The batch size is expected to be 1 rather than 2"),
    ("gdn", "chunk-size", {"chunk_size": 128}, "chunk_size=128: FLA takes 16 or 32 or 64 here"),
    ("gdn2", "chunk-size", {"chunk_size": 32}, "chunk_size=32: FLA takes 64 here"),
    ("gdn", "state-layout", {"initial_state": torch.zeros(B, HV, V, K + 64)},
     "initial_state must be [N, HV, K, V] = [2, 2, 64, 64], got shape [2, 2, 64, 128]"),
    ("gdn", "thd", {"q": "thd"}, "q must be [B, T, H, D] (FLA's layout), got shape [14, 1, 64]"),
    ("gdn", "g-heads", {"g": "heads"}, "pygraph_linear_attention.gated_delta_net(): g must be [T, HV]"),
    ("gdn2", "b-shape", {"b": "heads"}, "beta must be [T, HV, K] = [14, 1, 64], got shape [14, 1, 1] (FLA's b is its beta)"),
]  # fmt: skip
_FUNCTIONS = {"gdn": fla.chunk_gated_delta_rule, "kda": fla.chunk_kda, "gdn2": fla.chunk_gdn2}


@pytest.mark.parametrize(
    ("op", "change", "says"), [(r[0], r[2], r[3]) for r in BAD], ids=[f"{r[0]}-{r[1]}" for r in BAD]
)
def test_what_fla_accepts_and_pygraph_cannot_serve_is_a_typed_error_naming_it(stand_ins, op, change, says):
    x = _inputs(op, hv=H if op == "gdn2" else HV)
    change = dict(change)
    if change.get("q") == "fp32":
        change.update(q=x["q"].float(), k=x["k"].float(), v=x["v"].float())
    if change.get("q") == "thd":
        change.update({n: _flat(x[n]) for n in ("q", "k", "v", "g", "beta")})
    if change.get("g") == "heads":
        change["g"] = x["g"][..., :1]
    if change.get("b") == "heads":
        change["b"] = x["b"][..., :1]
    with pytest.raises(OpInputError) as err:
        _FUNCTIONS[op](**{**x, **change})
    call = {"gdn": "chunk_gated_delta_rule", "kda": "chunk_kda", "gdn2": "chunk_gdn2"}[op]
    assert str(err.value).startswith(f"pygraph_linear_attention.fla.{call}(): "), str(err.value)
    assert says in str(err.value), str(err.value)


def test_the_deprecated_transpose_state_layout_is_state_v_first(stand_ins):
    x = _inputs()
    theirs = x["initial_state"].transpose(-1, -2).contiguous()
    with pytest.warns(DeprecationWarning, match="renamed to `state_v_first`"):
        o, _ = fla.chunk_gated_delta_rule(**{**x, "initial_state": theirs}, transpose_state_layout=True)
    assert torch.equal(o, fla.chunk_gated_delta_rule(**x)[0])
