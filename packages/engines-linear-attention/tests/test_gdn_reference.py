"""The Gated DeltaNet reference against independent computations, in float64 on the CPU.

What each test compares against is computed another way: closed forms where the recurrence has
one (no write: pure decay of the initial state; mutually orthogonal keys: causal linear attention
with decay, a masked matrix product), the delta rule's own property (a unit key written with
beta 1 reads back its value), the options applied by hand, and batching laws (a varlen batch is
one run per sequence; a sequence split in two, with the state handed over, is the whole run).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_backward_reference,
    gated_delta_net_reference,
)

F64 = torch.float64


def _rand(*shape):
    return torch.randn(*shape, dtype=F64)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _cu(*lengths, dtype=torch.int32):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype)


def _inputs(t=12, h=2, hv=2, k=8, v=6):
    q, kk, vv = _rand(t, h, k), _rand(t, h, k), _rand(t, hv, v)
    gate = -torch.rand(t, hv, dtype=F64)  # log decay in (-1, 0]
    beta = torch.rand(t, hv, dtype=F64)
    return q, kk, vv, gate, beta


def test_without_writes_the_output_reads_the_decayed_initial_state():
    q, k, v, gate, beta = _inputs()
    state = _rand(1, 2, 6, 8)
    out, final = gated_delta_net_reference(
        q, k, v, gate, torch.zeros_like(beta), _cu(12), initial_state=state, output_final_state=True
    )
    decay = torch.exp(gate.cumsum(0))  # [T, H]
    expect = 8**-0.5 * decay[:, :, None] * torch.einsum("hvk,thk->thv", state[0], q)
    _close(out, expect)
    _close(final[0], decay[-1][:, None, None] * state[0])


def test_orthogonal_keys_reduce_the_delta_rule_to_causal_linear_attention_with_decay():
    t, h, dk, dv = 6, 2, 8, 5
    keys = torch.linalg.qr(_rand(h, dk, dk))[0][:, :t, :].transpose(0, 1)  # [T, H, K], orthonormal per head
    q, _, v, gate, beta = _inputs(t=t, h=h, hv=h, k=dk, v=dv)
    out, _ = gated_delta_net_reference(q, keys, v, gate, beta, _cu(t), scale=0.7)
    cum = gate.cumsum(0).T  # [H, T]
    weights = torch.einsum("thk,jhk->htj", q, keys) * torch.exp(cum[:, :, None] - cum[:, None, :])
    weights = torch.where(torch.ones(t, t, dtype=torch.bool).tril(), weights * beta.T[:, None, :], 0.0)
    _close(out, 0.7 * torch.einsum("htj,jhv->thv", weights, v))


def test_a_unit_key_written_with_beta_one_reads_back_its_value():
    _, k, v, gate, _ = _inputs()
    out, _ = gated_delta_net_reference(
        k, k, v, gate, torch.ones(12, 2, dtype=F64), _cu(12), use_qk_l2norm=True, scale=1.0
    )
    _close(out, v)


def test_a_varlen_batch_is_one_run_per_sequence():
    lengths = (5, 1, 0, 9)
    q, k, v, gate, beta = _inputs(t=sum(lengths))
    state = _rand(4, 2, 6, 8)
    cu = _cu(*lengths, dtype=torch.int64)
    out, final = gated_delta_net_reference(
        q, k, v, gate, beta, cu, initial_state=state, output_final_state=True
    )
    for n, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        one, one_final = gated_delta_net_reference(
            q[a:b], k[a:b], v[a:b], gate[a:b], beta[a:b], _cu(b - a),
            initial_state=state[n : n + 1], output_final_state=True,
        )  # fmt: skip
        _close(out[a:b], one)
        _close(final[n], one_final[0])
    _close(final[2], state[2])  # an empty sequence hands its initial state through


def test_a_sequence_split_in_two_with_the_state_handed_over_is_the_whole_run():
    q, k, v, gate, beta = _inputs(t=10)
    whole, whole_final = gated_delta_net_reference(q, k, v, gate, beta, _cu(10), output_final_state=True)
    first, mid = gated_delta_net_reference(
        q[:4], k[:4], v[:4], gate[:4], beta[:4], _cu(4), output_final_state=True
    )
    second, last = gated_delta_net_reference(
        q[4:], k[4:], v[4:], gate[4:], beta[4:], _cu(6), initial_state=mid, output_final_state=True
    )
    _close(torch.cat([first, second]), whole)
    _close(last, whole_final)


def test_gva_equals_repeating_the_query_and_key_heads():
    q, k, v, gate, beta = _inputs(h=2, hv=6)
    out, final = gated_delta_net_reference(q, k, v, gate, beta, _cu(12), output_final_state=True)
    assert out.shape == (12, 6, 6) and final.shape == (1, 6, 6, 8)
    q3, k3 = (t.repeat_interleave(3, dim=1) for t in (q, k))
    expect, expect_final = gated_delta_net_reference(q3, k3, v, gate, beta, _cu(12), output_final_state=True)
    _close(out, expect)
    _close(final, expect_final)


def test_options_equal_applying_them_by_hand():
    q, k, v, _, beta = _inputs()
    logits, a_log, dt_bias = _rand(12, 2), _rand(2), _rand(2)
    out, _ = gated_delta_net_reference(
        q, k, v, logits, beta, _cu(12), use_qk_l2norm=True, use_beta_sigmoid=True, allow_neg_eigval=True,
        safe_gate=True, a_log=a_log, dt_bias=dt_bias,
    )  # fmt: skip
    by_hand_gate = -torch.exp(a_log) * F.softplus(logits + dt_bias)
    expect, _ = gated_delta_net_reference(
        F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, by_hand_gate, 2 * torch.sigmoid(beta), _cu(12)
    )
    _close(out, expect)


def test_a_single_token():
    q, k, v, gate, beta = _inputs(t=1)
    out, final = gated_delta_net_reference(q, k, v, gate, beta, _cu(1), output_final_state=True)
    expect_state = beta[0][:, None, None] * torch.einsum("hv,hk->hvk", v[0], k[0])
    _close(final[0], expect_state)
    _close(out[0], 8**-0.5 * torch.einsum("hvk,hk->hv", expect_state, q[0]))


def test_the_backward_passes_gradcheck_with_every_option():
    q, k, v, logits, beta = (t.requires_grad_(True) for t in _inputs(t=5, h=1, hv=2, k=3, v=2))
    state, a_log, dt_bias = (t.requires_grad_(True) for t in (_rand(2, 2, 2, 3), _rand(2), _rand(2)))
    cu = _cu(2, 3)

    def fn(q, k, v, logits, beta, state, a_log, dt_bias):
        return gated_delta_net_reference(
            q, k, v, logits, beta, cu, initial_state=state, output_final_state=True, use_qk_l2norm=True,
            use_beta_sigmoid=True, allow_neg_eigval=True, safe_gate=True, a_log=a_log, dt_bias=dt_bias,
        )  # fmt: skip

    assert torch.autograd.gradcheck(fn, (q, k, v, logits, beta, state, a_log, dt_bias))


def test_the_backward_helper_returns_the_graphs_gradients():
    q, k, v, gate, beta = _inputs(t=7)
    state = _rand(2, 2, 6, 8)
    d_o, d_final = _rand(7, 2, 6), _rand(2, 2, 6, 8)
    cu = _cu(3, 4)
    grads = gated_delta_net_backward_reference(
        q, k, v, gate, beta, cu, d_o, grad_final_state=d_final, initial_state=state
    )
    assert set(grads) == {"dQ", "dK", "dV", "dG", "dBeta", "d_initial_state"}
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, gate, beta, state)]
    out, final = gated_delta_net_reference(*leaves[:5], cu, initial_state=leaves[5], output_final_state=True)
    expect = torch.autograd.grad((out, final), leaves, (d_o, d_final))
    for name, e in zip(("dQ", "dK", "dV", "dG", "dBeta", "d_initial_state"), expect):
        _close(grads[name], e)
        assert grads[name].shape == e.shape
    safe = gated_delta_net_backward_reference(
        q, k, v, gate, beta, cu, d_o, safe_gate=True, a_log=_rand(2), dt_bias=_rand(2)
    )
    assert set(safe) == {"dQ", "dK", "dV", "dG", "dBeta", "d_a_log", "d_dt_bias"}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_any_dtype_runs_and_stays_close_to_float64(dtype):
    q, k, v, gate, beta = _inputs()
    low = [t.to(dtype) for t in (q, k, v)]
    out, final = gated_delta_net_reference(
        *low, gate.float(), beta.to(dtype), _cu(12), use_qk_l2norm=True, output_final_state=True, dtype=dtype
    )
    assert out.dtype == dtype and final.dtype == dtype
    expect, _ = gated_delta_net_reference(
        *(t.double() for t in low), gate, beta.to(dtype).double(), _cu(12), use_qk_l2norm=True
    )
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(out.double(), expect, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda a: {**a, "cu_seqlens": torch.tensor([0, 5], dtype=torch.int32)},
            "cu_seqlens must run from 0",
        ),
        (lambda a: {**a, "cu_seqlens": torch.tensor([0.0, 12.0])}, "cu_seqlens must be a 1-d int32 or int64"),
        (lambda a: {**a, "k": a["k"][:, :, :4]}, "q \\[12, 2, 8\\] and k \\[12, 2, 4\\] must have the same"),
        (lambda a: {**a, "v": _rand(12, 3, 6)}, "q has 2 heads, which does not divide the output's 3"),
        (lambda a: {**a, "safe_gate": True}, "safe_gate needs a_log"),
        (lambda a: {**a, "a_log": _rand(2)}, "a_log and dt_bias are read only with safe_gate=True"),
        (lambda a: {**a, "initial_state": _rand(2, 2, 6, 8)}, "initial_state must be \\[N, HO, V, K\\]"),
    ],
    ids=[
        "cu-total",
        "cu-dtype",
        "head-dim",
        "heads",
        "safe-gate-no-a-log",
        "a-log-without-safe-gate",
        "state",
    ],
)
def test_bad_arguments_name_the_call_and_the_value(change, message):
    q, k, v, gate, beta = _inputs()
    args = change({"q": q, "k": k, "v": v, "g": gate, "beta": beta, "cu_seqlens": _cu(12)})
    with pytest.raises(
        ValueError, match=f"pygraph_linear_attention.reference.gated_delta_net_reference: {message}"
    ):
        gated_delta_net_reference(**args)
