"""torch's ``enable_gqa`` on `pygraph_sdpa.sdpa`, and `pygraph_sdpa.flash_attn` on the CPU stand-in
(``stand_in``, `test_sdpa_ops`): flash-attn's layout ([B, S, H, D]; packed [total, H, D] with
cu_seqlens), causal convention (bottom-right when S_q != S_k), window_size and softmax_scale
against flash-attn's semantics written here in float64 from its documented mask; the typed errors
naming flash-attn's argument. The device run against flash-attn itself is
``test_sdpa_front_doors_sm90.py``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import test_sdpa_ops  # noqa: E402

from pygraph.errors import OpInputError  # noqa: E402
from pygraph_sdpa.flash_attn import flash_attn_func, flash_attn_varlen_func  # noqa: E402
from pygraph_sdpa.ops import sdpa  # noqa: E402

BF = torch.bfloat16
stand_in = test_sdpa_ops.stand_in  # the CPU stand-in fixture


def _rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _flash_reference(q, k, v, scale=None, causal=False, window=(-1, -1)):
    """flash-attn's documented semantics on [B, S, H, D], in float64: query i sees key j when
    i + S_k - S_q - left <= j <= i + S_k - S_q + right (causal: right = 0; -1 unbounded); returns
    (out [B, S_q, H, D_v], lse [B, H, S_q])."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    s_q, s_k = q.shape[2], k.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * q @ k.transpose(-1, -2)
    left, right = window
    right = 0 if causal else right
    i = torch.arange(s_q)[:, None] + s_k - s_q
    j = torch.arange(s_k)[None, :]
    seen = torch.ones(s_q, s_k, dtype=torch.bool)
    if right >= 0:
        seen &= j <= i + right
    if left >= 0:
        seen &= j >= i - left
    scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    p = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    return (p @ v).transpose(1, 2), lse


def _inputs(b=2, s_q=9, s_k=13, h=4, h_kv=2, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(b, s, heads, d, generator=gen).to(BF) for s, heads in ((s_q, h), (s_k, h_kv), (s_k, h_kv))
    )


CASES = {
    "plain": {},
    "causal-bottom-right": {"causal": True},
    "window": {"causal": True, "window_size": (3, 0)},
    "window-without-causal": {"window_size": (4, 0)},
    "scale": {"softmax_scale": 0.3},
}


@pytest.mark.parametrize("name", list(CASES))
def test_flash_attn_func_is_flash_attns_semantics(stand_in, name):
    q, k, v = _inputs()
    options = CASES[name]
    out, lse, probs = flash_attn_func(q, k, v, return_attn_probs=True, **options)
    want, want_lse = _flash_reference(
        q,
        k,
        v,
        options.get("softmax_scale"),
        options.get("causal", False),
        options.get("window_size", (-1, -1)),
    )
    assert out.shape == (2, 9, 4, 16) and out.dtype == BF and out.is_contiguous()
    assert lse.shape == (2, 4, 9) and lse.dtype == torch.float32 and probs is None
    assert _rel(out, want) <= 4e-3 and _rel(lse, want_lse) <= 1e-6


def test_causal_with_equal_lengths_is_the_top_left_graph(stand_in):
    q, k, v = _inputs(s_q=11, s_k=11)
    out = flash_attn_func(q, k, v, causal=True)
    assert _rel(out, _flash_reference(q, k, v, causal=True)[0]) <= 4e-3
    (masks,) = {m for _, m, _ in stand_in.problems.values()}
    assert masks.is_causal and not masks.causal_bottom_right


def test_gradients_in_flash_attns_layout(stand_in):
    q, k, v = (t.requires_grad_(True) for t in _inputs())
    ref = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    out = flash_attn_func(q, k, v, causal=True)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(BF).double()
    (out.double() * w).sum().backward()
    (_flash_reference(*ref, causal=True)[0] * w).sum().backward()
    for got, want in zip((q, k, v), ref):
        assert got.grad.shape == got.shape and _rel(got.grad, want.grad) <= 8e-3


def test_flash_attn_varlen_func_is_bottom_right_per_sequence(stand_in):
    lengths_q, lengths_k = [3, 9, 1], [5, 9, 4]
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(sum(lengths_q), 4, 16, generator=gen).to(BF)
    k = torch.randn(sum(lengths_k), 2, 16, generator=gen).to(BF)
    v = torch.randn(sum(lengths_k), 2, 16, generator=gen).to(BF)
    cu_q = torch.tensor([0, 3, 12, 13], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 14, 18], dtype=torch.int32)
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, causal=True, return_attn_probs=True)
    assert out.shape == (13, 4, 16) and lse.shape == (4, 13)
    for n in range(3):
        rows, keys = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        want, want_lse = _flash_reference(q[None, rows], k[None, keys], v[None, keys], causal=True)
        assert _rel(out[rows], want[0]) <= 4e-3, n
        assert _rel(lse[:, rows], want_lse[0]) <= 1e-6, n


BAD = [
    ("dropout", {"dropout_p": 0.1}, "dropout_p=0.1: attention dropout is not served"),
    ("softcap", {"softcap": 30.0}, "softcap=30.0: a soft cap on the scores is not served"),
    ("alibi", {"alibi_slopes": torch.zeros(4)}, "alibi_slopes=Tensor: ALiBi biases are not served"),
    ("deterministic", {"deterministic": True}, "deterministic=True: a deterministic backward is not promised"),
    ("band", {"window_size": (2, 2)}, "window_size=(2, 2) with causal=False: a band reaching past the diagonal"),
    ("left-only", {"window_size": (2, -1)}, "window_size=(2, -1) with causal=False"),
    ("window-type", {"window_size": 3}, "window_size must be a pair of ints (left, right), got 3"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "says"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_what_flash_attn_accepts_and_pygraph_cannot_serve_is_a_typed_error(stand_in, change, says):
    with pytest.raises(OpInputError) as err:
        flash_attn_func(*_inputs(), **change)
    assert str(err.value).startswith("pygraph_sdpa.flash_attn.flash_attn_func(): "), str(err.value)
    assert says in str(err.value), str(err.value)


def test_a_paged_kv_cache_is_refused_naming_block_table(stand_in):
    q = torch.zeros(4, 2, 16, dtype=BF)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(OpInputError, match=r"flash_attn_varlen_func\(\): block_table=Tensor: a paged KV"):
        flash_attn_varlen_func(q, q, q, cu, cu, 4, 4, block_table=torch.zeros(1, 1, dtype=torch.int32))


def test_torch_layout_is_refused_naming_the_tensor(stand_in):
    q, k, v = _inputs()
    with pytest.raises(OpInputError, match=r"flash_attn_func\(\): q must be \[B, S, H, D\]"):
        flash_attn_func(q[0], k, v)


# --- enable_gqa --------------------------------------------------------------------------------------


def _torch_inputs(h=4, h_kv=2):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, heads, 9, 16, generator=gen).to(BF) for heads in (h, h_kv, h_kv))


def test_enable_gqa_false_refuses_fewer_key_heads_as_torch_does(stand_in):
    with pytest.raises(
        OpInputError, match=r"pygraph_sdpa.sdpa\(\): enable_gqa=False with key/value heads H_kv = 2"
    ):
        sdpa(*_torch_inputs(), enable_gqa=False)
    sdpa(*_torch_inputs(h_kv=4), enable_gqa=False)  # equal heads: served


def test_enable_gqa_true_and_none_serve_gqa(stand_in):
    q, k, v = _torch_inputs()
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True
    )
    for flag in (True, None):
        assert _rel(sdpa(q, k, v, is_causal=True, enable_gqa=flag), want) <= 4e-3


def test_enable_gqa_must_be_a_bool(stand_in):
    with pytest.raises(OpInputError, match=r"enable_gqa must be a bool or None, got int 1"):
        sdpa(*_torch_inputs(), enable_gqa=1)
