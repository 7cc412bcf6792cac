"""The plain-torch attention reference against independent computations, in float64 on the CPU.

Dense cases against torch's own scaled_dot_product_attention; masks against boolean masks built
by hand; padding and ragged batches against one dense call per sequence; the backward against
torch's autograd of its own attention and against finite differences.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pygraph_sdpa.reference import sdpa_backward_reference, sdpa_reference  # noqa: E402

F64 = torch.float64


def _rand(*shape, dtype=F64):
    return torch.randn(*shape, dtype=dtype)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _hand_mask(s_q, s_kv, *, causal=False, bottom_right=False, left=-1, right=-1):
    """[s_q, s_kv] visible keys, one (i, j) at a time."""
    offset = s_kv - s_q if bottom_right else 0
    right = 0 if causal else right
    mask = torch.zeros(s_q, s_kv, dtype=torch.bool)
    for i in range(s_q):
        for j in range(s_kv):
            ok = right < 0 or j - (i + offset) <= right
            ok = ok and (left < 0 or (i + offset) - j < left)
            mask[i, j] = ok
    return mask


@pytest.mark.parametrize(
    ("b", "h", "s_q", "s_kv", "d", "dv"),
    [(1, 1, 1, 1, 8, 8), (2, 3, 17, 17, 16, 16), (2, 2, 5, 33, 32, 8), (1, 4, 40, 7, 8, 24)],
    ids=["B1-S1", "B2-H3-S17", "B2-Sq5-Skv33-Dv8", "B1-Sq40-Skv7-Dv24"],
)
def test_dense_matches_torch(b, h, s_q, s_kv, d, dv):
    q, k, v = _rand(b, h, s_q, d), _rand(b, h, s_kv, d), _rand(b, h, s_kv, dv)
    _close(sdpa_reference(q, k, v), F.scaled_dot_product_attention(q, k, v))
    _close(sdpa_reference(q, k, v, scale=0.3), F.scaled_dot_product_attention(q, k, v, scale=0.3))


@pytest.mark.parametrize(("s_q", "s_kv"), [(16, 16), (9, 23), (1, 8)], ids=["square", "Sq<Skv", "decode"])
def test_causal_top_left_matches_torch(s_q, s_kv):
    q, k, v = _rand(2, 2, s_q, 16), _rand(2, 2, s_kv, 16), _rand(2, 2, s_kv, 16)
    _close(sdpa_reference(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize(
    ("s_q", "s_kv", "flags"),
    [
        pytest.param(9, 23, {"is_causal": True, "causal_bottom_right": True}, id="causal-bottom-right"),
        pytest.param(23, 23, {"window_left": 4}, id="window-left"),
        pytest.param(23, 23, {"window_right": 3}, id="window-right"),
        pytest.param(12, 30, {"window_left": 5, "window_right": 2}, id="band"),
        pytest.param(
            12, 30, {"window_left": 5, "window_right": 2, "causal_bottom_right": True}, id="band-br"
        ),
        pytest.param(30, 30, {"is_causal": True, "window_left": 8}, id="sliding-window"),
        pytest.param(30, 12, {"is_causal": True, "window_left": 1}, id="diagonal-only"),
    ],
)
def test_masks_match_a_hand_built_mask(s_q, s_kv, flags):
    q, k, v = _rand(2, 3, s_q, 16), _rand(2, 3, s_kv, 16), _rand(2, 3, s_kv, 8)
    mask = _hand_mask(
        s_q,
        s_kv,
        causal=flags.get("is_causal", False),
        bottom_right=flags.get("causal_bottom_right", False),
        left=flags.get("window_left", -1),
        right=flags.get("window_right", -1),
    )
    rows = mask.any(dim=-1)
    expect = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~rows[:, None])
    out, lse = sdpa_reference(q, k, v, return_lse=True, **flags)
    _close(out[..., rows, :], expect[..., rows, :])
    assert torch.all(out[..., ~rows, :] == 0) and torch.all(torch.isneginf(lse[..., ~rows, :]))


@pytest.mark.parametrize(("h_q", "h_kv"), [(8, 2), (8, 1)], ids=["GQA-4to1", "MQA"])
def test_gqa_and_mqa_match_torch(h_q, h_kv):
    q, k, v = _rand(2, h_q, 13, 16), _rand(2, h_kv, 21, 16), _rand(2, h_kv, 21, 16)
    expect = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    _close(sdpa_reference(q, k, v, is_causal=True), expect)


def test_log_sum_exp_matches_torch():
    q, k, v = _rand(2, 2, 11, 16), _rand(2, 2, 19, 16), _rand(2, 2, 19, 16)
    mask = _hand_mask(11, 19, causal=True, bottom_right=True)
    scores = (q @ k.transpose(-1, -2)) * 0.2
    expect = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1, keepdim=True)
    _, lse = sdpa_reference(q, k, v, scale=0.2, is_causal=True, causal_bottom_right=True, return_lse=True)
    assert lse.shape == (2, 2, 11, 1)
    _close(lse, expect)


def test_padding_equals_one_dense_call_per_sequence():
    lens_q, lens_kv = [5, 12, 1], [12, 3, 12]
    q, k, v = _rand(3, 2, 12, 16), _rand(3, 2, 12, 16), _rand(3, 2, 12, 8)
    out, lse = sdpa_reference(
        q, k, v, is_causal=True, causal_bottom_right=True, return_lse=True,
        seq_len_q=torch.tensor(lens_q).reshape(3, 1, 1, 1), seq_len_kv=torch.tensor(lens_kv),
    )  # fmt: skip
    for b, (sq, skv) in enumerate(zip(lens_q, lens_kv)):
        one, one_lse = sdpa_reference(
            q[b : b + 1, :, :sq], k[b : b + 1, :, :skv], v[b : b + 1, :, :skv],
            is_causal=True, causal_bottom_right=True, return_lse=True,
        )  # fmt: skip
        _close(out[b, :, :sq], one[0])
        _close(lse[b, :, :sq], one_lse[0])
        assert torch.all(out[b, :, sq:] == 0)


def test_ragged_equals_one_dense_call_per_sequence_including_empty_and_single_token_ones():
    lens_q, lens_kv = [3, 0, 1, 7, 2], [5, 4, 1, 7, 0]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_kv = torch.tensor([0, *torch.tensor(lens_kv).cumsum(0).tolist()], dtype=torch.int32)
    q, k, v = _rand(sum(lens_q), 4, 16), _rand(sum(lens_kv), 2, 16), _rand(sum(lens_kv), 2, 8)
    out, lse = sdpa_reference(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, is_causal=True, return_lse=True, window_left=3
    )
    assert out.shape == (sum(lens_q), 4, 8) and lse.shape == (sum(lens_q), 4, 1)
    for n in range(len(lens_q)):
        q0, q1, k0, k1 = cu_q[n], cu_q[n + 1], cu_kv[n], cu_kv[n + 1]
        if q1 == q0:
            continue
        if k1 == k0:  # queries with no key at all: zero output, -inf statistics
            assert torch.all(out[q0:q1] == 0) and torch.all(torch.isneginf(lse[q0:q1]))
            continue
        dense = [t.transpose(0, 1).unsqueeze(0) for t in (q[q0:q1], k[k0:k1], v[k0:k1])]
        mask = _hand_mask(q1 - q0, k1 - k0, causal=True, left=3)
        rows = mask.any(dim=-1)
        expect = F.scaled_dot_product_attention(*dense, attn_mask=mask | ~rows[:, None], enable_gqa=True)
        _close(out[q0:q1][rows], expect[0].transpose(0, 1)[rows])


def test_backward_matches_torch_autograd():
    q, k, v = (_rand(2, 4, 9, 16).requires_grad_(True) for _ in range(3))
    d_o = _rand(2, 4, 9, 16)
    expect = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), d_o)
    got = sdpa_backward_reference(q, k, v, d_o, is_causal=True)
    for a, b in zip(got, expect):
        _close(a, b)


def test_backward_through_masks_gqa_and_lse_passes_gradcheck():
    q = _rand(1, 4, 5, 4).requires_grad_(True)
    k, v = _rand(1, 2, 7, 4).requires_grad_(True), _rand(1, 2, 7, 3).requires_grad_(True)

    def fn(q, k, v):
        return sdpa_reference(
            q, k, v, is_causal=True, causal_bottom_right=True, window_left=3, return_lse=True,
            seq_len_kv=torch.tensor([6]),
        )  # fmt: skip

    assert torch.autograd.gradcheck(fn, (q, k, v))
    # the backward helper agrees with autograd of the same forward, dO and dLSE both flowing
    d_o, d_lse = _rand(1, 4, 5, 3), _rand(1, 4, 5, 1)
    out, lse = fn(q, k, v)
    expect = torch.autograd.grad((out, lse), (q, k, v), (d_o, d_lse))
    got = sdpa_backward_reference(
        q, k, v, d_o, grad_lse=d_lse, is_causal=True, causal_bottom_right=True, window_left=3,
        seq_len_kv=torch.tensor([6]),
    )  # fmt: skip
    for a, b in zip(got, expect):
        _close(a, b)


def test_rows_that_see_no_key_have_zero_finite_gradients():
    q, k, v = (_rand(1, 1, 4, 8).requires_grad_(True) for _ in range(3))
    d_o, d_lse = torch.ones(1, 1, 4, 8, dtype=F64), torch.ones(1, 1, 4, 1, dtype=F64)
    dq, dk, dv = sdpa_backward_reference(q, k, v, d_o, grad_lse=d_lse, seq_len_q=torch.tensor([2]))
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))
    assert torch.all(dq[0, 0, 2:] == 0)


def test_low_precision_inputs_are_computed_in_the_asked_dtype():
    q, k, v = (_rand(1, 2, 8, 16, dtype=torch.bfloat16) for _ in range(3))
    out = sdpa_reference(q, k, v, dtype=torch.float32)
    assert out.dtype == torch.float32
    expect = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)))
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_left": 0}, "window_left counts the visible keys"),
        ({"is_causal": True, "window_right": 2}, "is_causal masks every key past the diagonal"),
        ({"causal_bottom_right": True}, "causal_bottom_right aligns a diagonal band"),
        ({"seq_len_q": torch.tensor([1, 2, 3])}, "seq_len_q has 3 values"),
        ({"cu_seqlens_q": torch.tensor([0, 4])}, "ragged \\(THD\\) inputs need both cu_seqlens_q"),
    ],
    ids=["window-left-0", "causal-and-right", "br-without-band", "lengths-count", "half-ragged"],
)
def test_bad_arguments_name_the_call_and_the_value(kwargs, message):
    q = _rand(2, 2, 4, 8)
    with pytest.raises(ValueError, match=f"pygraph_sdpa.reference.sdpa_reference: {message}"):
        sdpa_reference(q, q, q, **kwargs)
    with pytest.raises(ValueError, match="key head dim 4 differ"):
        sdpa_reference(q, _rand(2, 2, 4, 4), q)
    with pytest.raises(ValueError, match="key has 3 heads, which does not divide the query's 2"):
        sdpa_reference(q, _rand(2, 3, 4, 8), _rand(2, 3, 4, 8))
