"""The GDN-2 reference (channel-wise decay and erase gate, a write gate per value channel) against
independent computations, in float64 on the CPU: two tokens written out by hand in the key-major
form of the formulation, KDA's reference where beta and w are one value per head, the safe gate
per channel, a varlen batch as one run per sequence, dW by a central difference, bad arguments,
and the chunked algorithm (`chunked.chunked_gated_delta_net_v2`) at several chunk sizes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_backward_reference,
    gated_delta_net_v2_reference,
    kimi_delta_attention_reference,
)

F64 = torch.float64


def _rand(*shape):
    return torch.randn(*shape, dtype=F64)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _cu(*lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def _inputs(t=10, h=2, k=8, v=6, seed=0):
    torch.manual_seed(seed)
    q, kk, vv = _rand(t, h, k), _rand(t, h, k), _rand(t, h, v)
    gate = -torch.rand(t, h, k, dtype=F64)  # log decay per key channel
    beta = torch.rand(t, h, k, dtype=F64)  # erase gate per key channel
    w = torch.rand(t, h, v, dtype=F64)  # write gate per value channel
    return q, kk, vv, gate, beta, w


def test_two_tokens_by_hand_in_the_key_major_form():
    q, k, v, g, beta, w = _inputs(t=2, h=1)
    o, final = gated_delta_net_v2_reference(q, k, v, g, beta, w, _cu(2), scale=0.5, output_final_state=True)
    # X [K, V] = S^T: X_t = (I - k (beta * k)^T) Diag(exp(g)) X_{t-1} + k (w * v)^T, o_t = scale X_t^T q
    x = torch.zeros(8, 6, dtype=F64)
    for t in range(2):
        kt = k[t, 0]
        erase = torch.eye(8, dtype=F64) - torch.outer(kt, beta[t, 0] * kt)
        x = erase @ torch.diag(torch.exp(g[t, 0])) @ x + torch.outer(kt, w[t, 0] * v[t, 0])
        _close(o[t, 0], 0.5 * x.T @ q[t, 0])
    _close(final[0, 0], x.T)


def test_beta_and_w_one_value_per_head_is_kda():
    q, k, v, g, _, _ = _inputs()
    per_head = torch.rand(10, 2, dtype=F64)
    state = _rand(1, 2, 6, 8)
    gdn2 = gated_delta_net_v2_reference(
        q, k, v, g, per_head[..., None].expand(-1, -1, 8), per_head[..., None].expand(-1, -1, 6), _cu(10),
        initial_state=state, output_final_state=True,
    )  # fmt: skip
    kda = kimi_delta_attention_reference(
        q, k, v, g, per_head, _cu(10), initial_state=state, output_final_state=True
    )
    _close(gdn2[0], kda[0])
    _close(gdn2[1], kda[1])


def test_the_options_apply_to_the_channel_gates():
    q, k, v, raw, logits, w = _inputs(seed=4)
    a_log, dt_bias = _rand(2), _rand(2, 8)
    got = gated_delta_net_v2_reference(
        q, k, v, raw, logits, w, _cu(10), safe_gate=True, a_log=a_log, dt_bias=dt_bias, gate_lower_bound=-4.0,
        use_beta_sigmoid=True, allow_neg_eigval=True, use_qk_l2norm=True,
    )  # fmt: skip
    g = -4.0 * torch.sigmoid(torch.exp(a_log)[:, None] * (raw + dt_bias))
    beta = 2 * torch.sigmoid(logits)
    qn, kn = (t / t.norm(dim=-1, keepdim=True) for t in (q, k))
    _close(got[0], gated_delta_net_v2_reference(qn, kn, v, g, beta, w, _cu(10))[0])


def test_grouped_heads_share_their_inputs():
    q, k, v, g, beta, w = _inputs(h=4)
    o = gated_delta_net_v2_reference(q[:, :2], k[:, :2], v, g, beta, w, _cu(10))[0]
    o_full = gated_delta_net_v2_reference(
        q[:, :2].repeat_interleave(2, 1), k[:, :2].repeat_interleave(2, 1), v, g, beta, w, _cu(10)
    )[0]
    _close(o, o_full)


def test_a_varlen_batch_is_one_run_per_sequence():
    q, k, v, g, beta, w = _inputs(t=11, seed=2)
    o, final = gated_delta_net_v2_reference(q, k, v, g, beta, w, _cu(4, 0, 7), output_final_state=True)
    for n, (lo, hi) in enumerate([(0, 4), (4, 4), (4, 11)]):
        part = [t[lo:hi] for t in (q, k, v, g, beta, w)]
        o_n, final_n = gated_delta_net_v2_reference(*part, _cu(hi - lo), output_final_state=True)
        _close(o[lo:hi], o_n)
        _close(final[n], final_n[0])


def test_the_backward_gives_dw_and_channel_gradients():
    q, k, v, g, beta, w = _inputs(t=5, seed=3)
    d_o = _rand(5, 2, 6)
    grads = gated_delta_net_v2_backward_reference(q, k, v, g, beta, w, _cu(5), d_o)
    assert sorted(grads) == ["dBeta", "dG", "dK", "dQ", "dV", "dW"]
    assert grads["dBeta"].shape == (5, 2, 8) and grads["dW"].shape == (5, 2, 6)
    eps = 1e-6
    for name, (t, h, j) in (("dW", (2, 1, 4)), ("dBeta", (3, 0, 5))):
        diff = 0.0
        for sign in (1, -1):
            ww, bb = w.clone(), beta.clone()
            (ww if name == "dW" else bb)[t, h, j] += sign * eps
            diff += sign * float((gated_delta_net_v2_reference(q, k, v, g, bb, ww, _cu(5))[0] * d_o).sum())
        diff /= 2 * eps
        assert abs(diff - float(grads[name][t, h, j])) <= 1e-6 * max(1.0, abs(diff)), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"beta": _rand(10, 2)}, r"beta must be \[T, heads, K\] \(one value per key channel\), K = 8"),
        ({"w": _rand(10, 2, 5)}, r"w must be \[T, heads, V\] \(one value per value channel\), V = 6"),
        ({"w": _rand(10, 1, 6)}, r"g, beta and w must have the same heads, got 2, 2 and 1"),
        ({"gate_lower_bound": -5.0}, r"gate_lower_bound=-5.0 bounds the gate safe_gate computes"),
    ],
)
def test_bad_arguments_raise_naming_them(change, message):
    q, k, v, g, beta, w = _inputs()
    args = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "w": w, "cu_seqlens": _cu(10), **change}
    with pytest.raises(ValueError, match=message):
        gated_delta_net_v2_reference(**args)


@pytest.mark.parametrize("chunk", [1, 3, 4, 64])
def test_the_chunked_algorithm_is_the_recurrence(chunk):
    from pygraph_linear_attention.kda.chunked import chunked_gated_delta_net_v2

    q, k, v, g, beta, w = _inputs(t=11, seed=4)
    state = _rand(3, 2, 6, 8)
    args = (q, k, v, g, beta, w, _cu(4, 0, 7))
    opts = {"initial_state": state, "output_final_state": True, "use_qk_l2norm": True}
    want = gated_delta_net_v2_reference(*args, **opts)
    got = chunked_gated_delta_net_v2(*args, chunk_size=chunk, **opts)
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_the_sub_chunk_products_are_the_recurrence():
    from pygraph_linear_attention.kda.chunked import chunked_gated_delta_net_v2

    q, k, v, g, beta, w = _inputs(t=70, seed=5)
    args = (q, k, v, g, beta, w, _cu(70))
    want = gated_delta_net_v2_reference(*args, output_final_state=True)
    got = chunked_gated_delta_net_v2(*args, chunk_size=64, sub_chunk=16, output_final_state=True)
    _close(got[0], want[0])
    _close(got[1], want[1])
