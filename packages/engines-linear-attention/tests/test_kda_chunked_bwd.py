"""The chunked KDA / GDN-2 backward (`kda.chunked_bwd`, the kernels' spec) against autograd through the
float64 token loops (`kda.reference`): every gradient, at several chunk sizes, over varlen batches with
empty and length-1 sequences, each option, grouped heads and both states."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph_linear_attention.kda.chunked_bwd import (  # noqa: E402
    chunked_gated_delta_net_v2_backward,
    chunked_kimi_delta_attention_backward,
)
from pygraph_linear_attention.reference import (  # noqa: E402
    gated_delta_net_v2_backward_reference,
    kimi_delta_attention_backward_reference,
)


def _inputs(op, lengths, h=2, hv=2, d=8, *, safe_gate=False, strong=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t, n, ho = sum(lengths), len(lengths), max(h, hv)

    def normal(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    x = {
        "q": normal(t, h, d),
        "k": torch.nn.functional.normalize(normal(t, h, d), dim=-1),
        "v": normal(t, hv, d),
        "g": torch.nn.functional.logsigmoid(normal(t, hv, d)) * (6 if strong else 1),
        "beta": torch.rand(t, hv, *((d,) if op == "gdn2" else ()), generator=gen, dtype=torch.float64),
    }
    if op == "gdn2":
        x["w"] = torch.rand(t, hv, d, generator=gen, dtype=torch.float64)
    x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    x["grad_out"] = normal(t, ho, d)
    x["initial_state"] = normal(n, ho, d, d) * 0.3
    x["grad_final_state"] = normal(n, ho, d, d)
    if safe_gate:
        x["g"] = normal(t, hv, d)
        x["a_log"] = torch.log(1 + 15 * torch.rand(hv, generator=gen, dtype=torch.float64))
        x["dt_bias"] = normal(hv, d)
    return x


OPTIONS = {
    "plain": {},
    "l2norm-sigmoid-negeig-scale": {"use_qk_l2norm": True, "use_beta_sigmoid": True, "allow_neg_eigval": True,
                                    "scale": 0.3},
    "safe-gate": {"safe_gate": True, "gate_lower_bound": -3.0},
}  # fmt: skip


def _both(op, x, options, chunk_size):
    args = [
        x[n]
        for n in ("q", "k", "v", "g", "beta", *(("w",) if op == "gdn2" else ()), "cu_seqlens", "grad_out")
    ]
    extra = {n: x[n] for n in ("initial_state", "grad_final_state", "a_log", "dt_bias") if n in x}
    if op == "gdn2":
        want = gated_delta_net_v2_backward_reference(*args, **extra, **options)
        got = chunked_gated_delta_net_v2_backward(*args, **extra, **options, chunk_size=chunk_size)
    else:
        want = kimi_delta_attention_backward_reference(*args, **extra, **options)
        got = chunked_kimi_delta_attention_backward(*args, **extra, **options, chunk_size=chunk_size)
    return got, want


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("chunk_size", [1, 3, 4, 16])
def test_every_gradient_equals_autograd_through_the_recurrence(op, option, chunk_size):
    options = OPTIONS[option]
    x = _inputs(op, (5, 0, 1, 11), safe_gate=bool(options.get("safe_gate")))
    got, want = _both(op, x, options, chunk_size)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        torch.testing.assert_close(got[name], value, rtol=1e-9, atol=1e-10, msg=name)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize(("h", "hv"), [(1, 4), (4, 2)], ids=["gva", "gqa"])
def test_grouped_heads_sum_their_gradients(op, h, hv):
    x = _inputs(op, (7, 9), h=h, hv=hv, safe_gate=True)
    got, want = _both(op, x, {"safe_gate": True}, 4)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-9, atol=1e-10, msg=name)


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_a_whole_chunk_of_strong_gates_stays_exact_in_float64(op):
    # gates near -5 a token (the safe gate's bound): exp(-gamma) over a 64-token chunk reaches about
    # exp(300), far past fp32's range (about exp(88)), inside float64's
    x = _inputs(op, (70,), strong=True)
    got, want = _both(op, x, {}, 64)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-7, atol=1e-9, msg=name)
