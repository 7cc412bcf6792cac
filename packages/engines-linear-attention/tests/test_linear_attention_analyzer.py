"""The linear-attention analyzer: facts of gdn, kda and gdn2 graphs and their backwards."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph_linear_attention.analyzer import analyze


def _inputs(g, t=96, h=2, hv=4, k=64, v=32, n=3, gate_dim=None, beta_dim=None):
    q = g.tensor(name="q", dim=[t, h, k], data_type=dt.BFLOAT16)
    kk = g.tensor(name="k", dim=[t, h, k], data_type=dt.BFLOAT16)
    vv = g.tensor(name="v", dim=[t, hv, v], data_type=dt.BFLOAT16)
    gate = g.tensor(name="g", dim=gate_dim or [t, hv], data_type=dt.FLOAT)
    beta = g.tensor(name="beta", dim=beta_dim or [t, hv], data_type=dt.FLOAT)
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT64)
    return q, kk, vv, gate, beta, cu


def test_gdn_forward_shapes_gva_and_dtypes():
    g = pygraph.Graph(name="gdn", io_data_type=dt.BFLOAT16)
    q, k, v, gate, beta, cu = _inputs(g)
    g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, scale=0.1)
    facts = analyze(g)
    assert (facts.op, facts.backward) == ("gdn", False)
    assert (facts.tokens, facts.sequences) == (96, 3)
    assert (facts.heads_qk, facts.heads_v, facts.heads_out, facts.gva_ratio) == (2, 4, 4, 2)
    assert (facts.head_dim_k, facts.head_dim_v) == (64, 32)
    assert facts.dtypes == (dt.BFLOAT16,) * 3
    assert (facts.gate_dtype, facts.beta_dtype, facts.state_dtype, facts.cu_seqlens_dtype) == (
        dt.FLOAT,
        dt.FLOAT,
        None,
        dt.INT64,
    )
    assert facts.scale == 0.1 and facts.features == {"gva"} and facts.stray_nodes == ()


def test_every_flag_is_a_fact_and_a_feature():
    g = pygraph.Graph(name="gdn", io_data_type=dt.BFLOAT16)
    q, k, v, gate, beta, cu = _inputs(g, hv=2)
    state = g.tensor(name="h0", dim=[3, 2, 32, 64], data_type=dt.FLOAT)
    a_log, dt_bias = (g.tensor(name=n, dim=[2], data_type=dt.FLOAT) for n in ("a_log", "dt_bias"))
    g.gdn(
        q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, initial_state=state, a_log=a_log, dt_bias=dt_bias,
        output_final_state=True, use_qk_l2norm=True, use_beta_sigmoid=True, allow_neg_eigval=True,
        safe_gate=True,
    )  # fmt: skip
    facts = analyze(g)
    assert facts.use_qk_l2norm and facts.use_beta_sigmoid and facts.allow_neg_eigval and facts.safe_gate
    assert facts.initial_state and facts.output_final_state and facts.state_dtype is dt.FLOAT
    assert facts.gva_ratio == 1 and facts.scale is None
    assert facts.features == {
        "qk_l2norm",
        "beta_sigmoid",
        "neg_eigval",
        "safe_gate",
        "initial_state",
        "final_state",
    }


def test_gdn_backward_reads_d_final_state_as_the_final_state_request():
    g = pygraph.Graph(name="gdn_bwd", io_data_type=dt.BFLOAT16)
    q, k, v, gate, beta, cu = _inputs(g, hv=2)
    d_o = g.tensor(name="dO", dim=[96, 2, 32], data_type=dt.BFLOAT16)
    d_final = g.tensor(name="dht", dim=[3, 2, 32, 64], data_type=dt.FLOAT)
    g.gdn_bwd(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, dO=d_o, d_final_state=d_final)
    facts = analyze(g)
    assert (facts.op, facts.backward, facts.output_final_state) == ("gdn", True, True)
    assert facts.features == {"final_state"}
    assert pygraph.engines.family_for(g).name == "gdn"


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_kda_and_gdn2_share_the_analyzer(op):
    g = pygraph.Graph(name=op, io_data_type=dt.BFLOAT16)
    gate_dim = [96, 4, 64]
    beta_dim = [96, 4, 64] if op == "gdn2" else None
    q, k, v, gate, beta, cu = _inputs(g, gate_dim=gate_dim, beta_dim=beta_dim)
    extra = {"w": g.tensor(name="w", dim=[96, 4, 32], data_type=dt.BFLOAT16)} if op == "gdn2" else {}
    getattr(g, op)(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, gate_lower_bound=-5.0, **extra)
    facts = analyze(g)
    assert (facts.op, facts.heads_out) == (op, 4)
    assert facts.features == {"gva", "gate_lower_bound"}
    assert pygraph.engines.family_for(g).name == op


def test_a_graph_without_a_linear_attention_node_is_a_caller_bug():
    with pytest.raises(
        ValueError, match="linear-attention analyzer: graph 'empty' has no gdn, kda or gdn2 node"
    ):
        analyze(pygraph.Graph(name="empty"))
