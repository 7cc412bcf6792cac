"""The linear-attention rules read the device's SM count: the same graph ranked for the H200 (132
SMs) and for an H100 PCIe (114 SMs) gets each card's answer where its scan grid falls between the
two cards' thresholds.

The scan grid of the CuTe DSL engines is sequences x heads x V / 32 CTAs; gdn_cutile's at BLOCK_V
64 is sequences x heads x V / 64 programs. With two heads and V = 128 that is 8 and 4 per sequence,
so the sequence count alone places a graph against each threshold (measured on the H200's 132 SMs,
stated as fractions of the device's): under the SMs (`split_first`), up to two CTAs per SM
(`sm90_order`, `kda_sm90_order`), at least half the SMs (`block_v_order`)."""

from __future__ import annotations

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph.engines.base import DeviceInfo
from pygraph_linear_attention.heuristics import (
    block_v_order,
    kda_sm90_order,
    recommend,
    sm90_order,
    split_first,
)

H200, H100_PCIE = 132, 114
T, H, D = 4096, 2, 128


def _forward(n, *, op="gdn", sm_count=None, tokens=T):
    g = pygraph.Graph(name=op, io_data_type=dt.BFLOAT16, sm_version=90, sm_count=sm_count)
    q, k, v = (g.tensor(name=x, dim=[tokens, H, D], data_type=dt.BFLOAT16) for x in "qkv")
    gate = g.tensor(name="g", dim=[tokens, H] if op == "gdn" else [tokens, H, D], data_type=dt.FLOAT)
    beta = g.tensor(name="beta", dim=[tokens, H], data_type=dt.FLOAT)
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    o, _ = getattr(g, op)(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu)
    o.set_output(True)
    return g


def _backward(n):
    g = pygraph.Graph(name="gdn_bwd", io_data_type=dt.BFLOAT16, sm_version=90)
    q, k, v, grad = (g.tensor(name=x, dim=[T, H, D], data_type=dt.BFLOAT16) for x in ("q", "k", "v", "dO"))
    gate, beta = (g.tensor(name=x, dim=[T, H], data_type=dt.FLOAT) for x in ("g", "beta"))
    cu = g.tensor(name="cu_seqlens", dim=[n + 1], data_type=dt.INT32)
    outs = g.gdn_bwd(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, dO=grad)
    for out, like in zip(outs, (q, k, v, gate, beta)):
        if out is not None:
            out.set_output(True).set_data_type(like.data_type)
    return g


def _facts(graph):
    return graph.engine_request().facts


def _ranked(facts, offered, sm_count):
    return recommend([heur_mode.A], facts, offered, [], device=DeviceInfo(90, None, sm_count))


def test_the_backward_scans_prefetch_under_the_devices_sms():
    # 15 sequences: 120 scan CTAs, under the H200's 132 SMs, past the PCIe card's 114
    facts = _facts(_backward(15))
    assert split_first(facts, sms=H200) and not split_first(facts, sms=H100_PCIE)
    offered = {"gdn_sm90_bwd": 20103, "gdn_cutile_bwd": 20102}
    on_h200, on_pcie = _ranked(facts, offered, H200), _ranked(facts, offered, H100_PCIE)
    # gdn_sm90_bwd leads on both, its chunk gradients fused (WGMMA 2); under the SMs its prefetching
    # scans (STAGES 2) first, past them STAGES 1
    assert on_h200[0].engine_id == on_pcie[0].engine_id == 20103
    assert dict(on_h200[0].knobs) == {"BLOCK_V": 32, "STAGES": 2, "WGMMA": 2, "SEGMENT": 0}
    assert dict(on_pcie[0].knobs) == {"BLOCK_V": 32, "STAGES": 1, "WGMMA": 2, "SEGMENT": 0}


def test_the_backward_leads_between_one_and_two_ctas_per_sm_too():
    # 30 sequences: 240 scan CTAs, within two per SM of the H200 (264), past two of 114 SMs (228):
    # gdn_sm90_bwd leads on both since its chunk gradients run fused
    facts = _facts(_backward(30))
    offered = {"gdn_sm90_bwd": 20103, "gdn_cutile_bwd": 20102}
    for sms in (H200, H100_PCIE):
        first = _ranked(facts, offered, sms)[0]
        assert first.engine_id == 20103
        assert dict(first.knobs) == {"BLOCK_V": 32, "STAGES": 1, "WGMMA": 2, "SEGMENT": 0}


def test_the_kda_scans_prefetch_up_to_two_ctas_per_sm_of_the_device():
    # 240 scan CTAs at BLOCK_V 32: within two per SM of the H200's 132, past two of 114
    kda = _facts(_forward(30, op="kda"))
    assert kda_sm90_order(kda, sms=H200)[0] == {"BLOCK_V": 32, "STAGES": 2}
    assert kda_sm90_order(kda, sms=H100_PCIE)[0] == {"BLOCK_V": 32, "STAGES": 1}


def test_the_gdn_forward_segments_under_half_the_devices_sms_else_runs_two_warpgroups():
    # 15 sequences of 8192 tokens: 60 scan CTAs at BLOCK_V 64, under half the H200's SMs (66), not
    # under half of 114 (57); the two-warpgroup scan serves every unsegmented grid
    facts = _facts(_forward(15, tokens=15 * 8192))
    fused = {"BLOCK_V": 64, "SPLIT": 0}
    assert sm90_order(facts, sms=H200)[0] == {**fused, "STAGES": 1, "WGMMA": 1, "SEGMENT": 64}
    assert sm90_order(facts, sms=H100_PCIE)[0] == {**fused, "STAGES": 2, "WGMMA": 4, "SEGMENT": 0}
    wide = _facts(_forward(30))  # 120 CTAs at BLOCK_V 64, 4096 tokens a sequence: never segmented
    assert (
        sm90_order(wide, sms=H200)[0]
        == sm90_order(wide, sms=H100_PCIE)[0]
        == {**fused, "STAGES": 2, "WGMMA": 4, "SEGMENT": 0}
    )


def test_planning_ranks_for_the_sm_count_the_graph_declares():
    def first(sm_count):
        g = _forward(15, sm_count=sm_count, tokens=15 * 8192)
        g.create_execution_plans([heur_mode.A])
        assert g.engine_request().device.sms == sm_count
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        return next(name for name in names if name.startswith("gdn_sm90["))

    assert first(H200) == "gdn_sm90[BLOCK_V=64,SEGMENT=64,SPLIT=0,STAGES=1,WGMMA=1]"
    assert first(H100_PCIE) == "gdn_sm90[BLOCK_V=64,SEGMENT=0,SPLIT=0,STAGES=2,WGMMA=4]"


def test_block_v_32_doubles_the_programs_under_half_the_devices_sms():
    # 15 sequences: 60 programs at BLOCK_V 64, under half the H200's SMs (66), not under 57
    facts = _facts(_forward(15))
    assert block_v_order(facts, sms=H200)[0] == 32
    assert block_v_order(facts, sms=H100_PCIE)[0] == 64
    # the backward's gdn_cutile_bwd block leads with the rule's BLOCK_V
    bwd = _facts(_backward(15))
    offered = {"gdn_cutile_bwd": 20102}
    assert _ranked(bwd, offered, H200)[0].knobs["BLOCK_V"] == 32
    assert _ranked(bwd, offered, H100_PCIE)[0].knobs["BLOCK_V"] == 64


def test_no_device_known_ranks_as_the_reference_card():
    facts = _facts(_backward(15))
    offered = {"gdn_sm90_bwd": 20103, "gdn_cutile_bwd": 20102}
    assert recommend([heur_mode.A], facts, offered, []) == _ranked(facts, offered, H200)
