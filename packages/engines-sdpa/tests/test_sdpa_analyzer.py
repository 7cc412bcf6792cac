"""The sdpa analyzer: facts of forward and backward graphs, as the graph writes them."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph_sdpa.analyzer import analyze


def _qkv(g, b=2, hq=8, hk=2, sq=128, skv=256, d=64, dv=None, dtype=dt.BFLOAT16):
    q = g.tensor(name="q", dim=[b, hq, sq, d], data_type=dtype)
    k = g.tensor(name="k", dim=[b, hk, skv, d], data_type=dtype)
    v = g.tensor(name="v", dim=[b, hk, skv, dv or d], data_type=dtype)
    return q, k, v


def _graph(dtype=dt.BFLOAT16):
    return pygraph.Graph(name="attn", io_data_type=dtype, compute_data_type=dt.FLOAT)


def test_forward_shapes_head_dims_gqa_and_stats():
    g = _graph()
    q, k, v = _qkv(g, dv=32)
    o, stats = g.sdpa(q=q, k=k, v=v, attn_scale=0.125, generate_stats=True, name="attn")
    facts = analyze(g)
    assert not facts.backward and facts.o is o and facts.stats is stats
    assert (facts.batch, facts.heads_q, facts.heads_k, facts.heads_v) == (2, 8, 2, 2)
    assert (facts.seq_q, facts.seq_kv, facts.head_dim_qk, facts.head_dim_v) == (128, 256, 64, 32)
    assert facts.gqa_ratio == 4 and facts.dtypes == (dt.BFLOAT16,) * 3
    assert facts.scale == 0.125 and not facts.scale_is_tensor
    assert facts.features == {"gqa", "stats"}
    assert facts.stray_nodes == () and facts.sm is None


def test_mqa_is_one_kv_head():
    g = _graph()
    q, k, v = _qkv(g, hq=8, hk=1)
    g.sdpa(q=q, k=k, v=v)
    assert analyze(g).gqa_ratio == 8


@pytest.mark.parametrize(
    ("attrs", "causal", "bottom_right", "left", "right", "features"),
    [
        pytest.param({}, False, False, None, None, set(), id="none"),
        pytest.param({"use_causal_mask": True}, True, False, None, 0, {"causal"}, id="causal-top-left"),
        pytest.param(
            {"use_causal_mask_bottom_right": True}, True, True, None, 0, {"causal_bottom_right"}, id="causal-br"
        ),
        pytest.param(
            {"use_causal_mask": True, "sliding_window_length": 64},
            True, False, 64, 0, {"causal", "window_left"}, id="sliding-window",
        ),
        pytest.param(
            {"diagonal_band_left_bound": 16, "sliding_window_length": 64, "diagonal_band_right_bound": 8},
            False, False, 16, 8, {"window_left", "window_right"}, id="band-left-bound-wins",
        ),
        pytest.param(
            {"diagonal_alignment": pygraph.diagonal_alignment.BOTTOM_RIGHT, "diagonal_band_right_bound": 4},
            False, True, None, 4, {"bottom_right", "window_right"}, id="band-bottom-right",
        ),
        pytest.param(
            {"diagonal_alignment": pygraph.diagonal_alignment.BOTTOM_RIGHT}, False, False, None, None, set(),
            id="alignment-without-a-band-is-inert",
        ),
    ],
)  # fmt: skip
def test_masks_resolve_as_the_backend_reads_them(attrs, causal, bottom_right, left, right, features):
    g = _graph()
    q, k, v = _qkv(g, hk=8)
    g.sdpa(q=q, k=k, v=v, **attrs)
    facts = analyze(g)
    assert (facts.causal, facts.bottom_right, facts.window_left, facts.window_right) == (
        causal,
        bottom_right,
        left,
        right,
    )
    assert facts.features == features


def test_padding_ragged_dropout_bias_and_a_scale_tensor_are_features():
    g = _graph()
    q, k, v = _qkv(g, b=3, hk=8)
    lens = [g.tensor(name=n, dim=[3, 1, 1, 1], data_type=dt.INT32) for n in ("sq", "skv")]
    g.sdpa(q=q, k=k, v=v, use_padding_mask=True, seq_len_q=lens[0], seq_len_kv=lens[1])
    facts = analyze(g)
    assert facts.padded and not facts.ragged and facts.features == {"padding"}

    g = _graph()
    q, k, v = _qkv(g, b=3, hk=8)
    for t in (q, k, v):
        t.set_ragged_offset(g.tensor(name=f"{t.name}_off", dim=[4, 1, 1, 1], data_type=dt.INT32))
    lens = [g.tensor(name=n, dim=[3, 1, 1, 1], data_type=dt.INT32) for n in ("sq", "skv")]
    g.sdpa(q=q, k=k, v=v, use_padding_mask=True, seq_len_q=lens[0], seq_len_kv=lens[1])
    facts = analyze(g)
    assert facts.ragged and facts.padded and {"ragged", "padding"} <= facts.features

    g = _graph()
    q, k, v = _qkv(g, hk=8)
    bias = g.tensor(name="bias", dim=[1, 8, 128, 256], data_type=dt.BFLOAT16)
    scale = g.tensor(name="scale", dim=[1, 1, 1, 1], data_type=dt.FLOAT, is_pass_by_value=True)
    g.sdpa(q=q, k=k, v=v, bias=bias, attn_scale=scale, dropout=(0.1, 7, 0), use_alibi_mask=True)
    facts = analyze(g)
    assert facts.dropout and facts.scale is None and facts.scale_is_tensor
    assert facts.features == {"bias", "dropout", "scale_tensor", "alibi"}


def test_backward_reads_the_forward_tensors_and_the_deterministic_flag():
    g = _graph(dt.HALF)
    q, k, v = _qkv(g, hk=8, dtype=dt.HALF)
    o, do = (g.tensor(name=n, dim=[2, 8, 128, 64], data_type=dt.HALF) for n in ("o", "dO"))
    stats = g.tensor(name="stats", dim=[2, 8, 128, 1], data_type=dt.FLOAT)
    g.sdpa_backward(q, k, v, o, do, stats, use_causal_mask=True, use_deterministic_algorithm=True)
    facts = analyze(g)
    assert facts.backward and facts.o is o and facts.stats is stats and facts.stats_requested
    assert facts.dtypes == (dt.HALF,) * 3
    assert facts.features == {"causal", "deterministic"}
    assert pygraph.engines.family_for(g).name == "sdpa_bwd"


def test_other_nodes_are_strays_not_rejections():
    g = _graph()
    q, k, v = _qkv(g, hk=8)
    o, _ = g.sdpa(q=q, k=k, v=v, name="attn")
    g.relu(input=o, name="act")
    assert analyze(g).stray_nodes == ("act",)
    with pytest.raises(ValueError, match="sdpa analyzer: graph 'empty' has no SDPA or SDPA_BWD node"):
        analyze(pygraph.Graph(name="empty"))
