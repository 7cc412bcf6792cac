"""The KDA reference (per-key-channel decay) against independent computations, in float64 on the CPU:
two tokens written out by hand, GDN's reference where every channel decays alike, the gate options
applied by hand, and a varlen batch as one run per sequence.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_reference,
    kimi_delta_attention_backward_reference,
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
    gate = -torch.rand(t, h, k, dtype=F64)  # log decay per channel in (-1, 0]
    beta = torch.rand(t, h, dtype=F64)
    return q, kk, vv, gate, beta


def test_two_tokens_by_hand():
    q, k, v, g, beta = _inputs(t=2, h=1)
    o, final = kimi_delta_attention_reference(q, k, v, g, beta, _cu(2), scale=0.5, output_final_state=True)
    s = beta[0, 0] * torch.outer(v[0, 0], k[0, 0])  # the first write into a zero state
    want0 = 0.5 * s @ q[0, 0]
    s = s * torch.exp(g[1, 0])[None, :]  # column j of S decays by exp(g[1, 0, j])
    s = s + beta[1, 0] * torch.outer(v[1, 0] - s @ k[1, 0], k[1, 0])
    _close(o[0, 0], want0)
    _close(o[1, 0], 0.5 * s @ q[1, 0])
    _close(final[0, 0], s)


def test_a_gate_equal_across_channels_is_gated_deltanet():
    q, k, v, _, beta = _inputs()
    per_head = -torch.rand(10, 2, dtype=F64)
    state = _rand(1, 2, 6, 8)
    kda = kimi_delta_attention_reference(
        q,
        k,
        v,
        per_head[..., None].expand(-1, -1, 8),
        beta,
        _cu(10),
        initial_state=state,
        output_final_state=True,
    )
    gdn = gated_delta_net_reference(
        q, k, v, per_head, beta, _cu(10), initial_state=state, output_final_state=True
    )
    _close(kda[0], gdn[0])
    _close(kda[1], gdn[1])


@pytest.mark.parametrize("bound", [None, -3.0])
@pytest.mark.parametrize("with_params", [True, False], ids=["a_log-dt_bias", "neither"])
def test_safe_gate_is_the_bounded_gate_applied_by_hand(bound, with_params):
    q, k, v, raw, beta = _inputs(seed=1)
    raw = _rand(10, 2, 8)
    a_log, dt_bias = (_rand(2), _rand(2 * 8)) if with_params else (None, None)
    rate = torch.exp(a_log)[:, None] if with_params else 1.0
    bias = dt_bias.view(2, 8) if with_params else 0.0
    lower = -5.0 if bound is None else bound  # the default bound
    g = lower * torch.sigmoid(rate * (raw + bias))
    got = kimi_delta_attention_reference(
        q, k, v, raw, beta, _cu(10), safe_gate=True, a_log=a_log, dt_bias=dt_bias, gate_lower_bound=bound
    )
    _close(got[0], kimi_delta_attention_reference(q, k, v, g, beta, _cu(10))[0])
    assert bool((g > lower).all() and (g < 0).all())


def test_a_varlen_batch_is_one_run_per_sequence():
    q, k, v, g, beta = _inputs(t=11, seed=2)
    o, final = kimi_delta_attention_reference(q, k, v, g, beta, _cu(4, 0, 7), output_final_state=True)
    for n, (lo, hi) in enumerate([(0, 4), (4, 4), (4, 11)]):
        part = [t[lo:hi] for t in (q, k, v, g, beta)]
        o_n, final_n = kimi_delta_attention_reference(*part, _cu(hi - lo), output_final_state=True)
        _close(o[lo:hi], o_n)
        _close(final[n], final_n[0])


def test_the_backward_gives_a_gradient_per_key_channel_of_the_gate():
    q, k, v, g, beta = _inputs(t=5, seed=3)
    grads = kimi_delta_attention_backward_reference(q, k, v, g, beta, _cu(5), _rand(5, 2, 6))
    assert sorted(grads) == ["dBeta", "dG", "dK", "dQ", "dV"] and grads["dG"].shape == (5, 2, 8)
    # one channel's decay gradient, by a central difference
    eps, (t, h, j) = 1e-6, (3, 1, 5)
    d_o = _rand(5, 2, 6)
    grads = kimi_delta_attention_backward_reference(q, k, v, g, beta, _cu(5), d_o)
    plus, minus = g.clone(), g.clone()
    plus[t, h, j] += eps
    minus[t, h, j] -= eps
    diff = sum(
        float((kimi_delta_attention_reference(q, k, v, gg, beta, _cu(5))[0] * d_o).sum()) * sign
        for gg, sign in ((plus, 1), (minus, -1))
    ) / (2 * eps)
    assert abs(diff - float(grads["dG"][t, h, j])) <= 1e-6 * max(1.0, abs(diff))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"g": _rand(10, 2)}, r"g must be \[T, heads, K\] \(one value per key channel\), K = 8"),
        ({"gate_lower_bound": -5.0}, r"gate_lower_bound=-5.0 bounds the gate safe_gate computes"),
        ({"gate_lower_bound": 1.0}, r"gate_lower_bound must be a negative float"),
    ],
)
def test_bad_arguments_raise_naming_them(change, message):
    q, k, v, g, beta = _inputs()
    args = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": _cu(10), **change}
    with pytest.raises(ValueError, match=message):
        kimi_delta_attention_reference(**args)


@pytest.mark.parametrize("chunk", [1, 3, 4, 64])
def test_the_chunked_algorithm_is_the_recurrence(chunk):
    from pygraph_linear_attention.kda.chunked import chunked_kimi_delta_attention

    q, k, v, g, beta = _inputs(t=11, seed=4)
    state = _rand(3, 2, 6, 8)
    args = (q, k, v, g, beta, _cu(4, 0, 7))
    opts = {"initial_state": state, "output_final_state": True, "use_qk_l2norm": True}
    want = kimi_delta_attention_reference(*args, **opts)
    got = chunked_kimi_delta_attention(*args, chunk_size=chunk, **opts)
    _close(got[0], want[0])
    _close(got[1], want[1])


@pytest.mark.parametrize("sub", [1, 4, 16, 64])
def test_the_sub_chunk_products_are_the_recurrence(sub):
    from pygraph_linear_attention.kda.chunked import chunked_kimi_delta_attention

    q, k, v, g, beta = _inputs(t=70, seed=5)
    args = (q, k, v, g, beta, _cu(70))
    want = kimi_delta_attention_reference(*args, output_final_state=True)
    got = chunked_kimi_delta_attention(*args, chunk_size=64, sub_chunk=sub, output_final_state=True)
    _close(got[0], want[0])
    _close(got[1], want[1])


def test_sub_chunks_of_16_keep_fp32_finite_at_the_gate_bound():
    # every gate at the safe gate's bound (-5 per token): across a 64-token chunk the key-side factor
    # of one reference row would reach exp(315), past fp32; across a sub-chunk of 16 exp(75) stays in it
    from pygraph_linear_attention.kda.chunked import chunked_kimi_delta_attention

    q, k, v, _, beta = _inputs(t=64, seed=6)
    k = F.normalize(k, dim=-1)
    g = torch.full((64, 2, 8), -5.0, dtype=F64)
    args = (q, k, v, g, beta, _cu(64))
    want = kimi_delta_attention_reference(*args)[0]
    fp32 = {"chunk_size": 64, "dtype": torch.float32}
    good = chunked_kimi_delta_attention(*args, sub_chunk=16, **fp32)[0]
    assert float((good.double() - want).norm() / want.norm()) < 1e-5
    whole = chunked_kimi_delta_attention(*args, sub_chunk=64, **fp32)[0]
    assert not bool(torch.isfinite(whole).all())
