"""The sdpa hook takes the device every family's hook takes, and no cell's rule reads its SM count:
the same graph ranks the same for the H200 (132 SMs) and an H100 PCIe (114 SMs). Its cells are set
by head dim, causality, key length and grouped heads, and its kernels are not persistent."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph.engines.base import DeviceInfo, PlanConfig
from pygraph_sdpa.analyzer import analyze
from pygraph_sdpa.heuristics import recommend

H200, H100_PCIE = 132, 114
ENTRIES = [PlanConfig(-1), PlanConfig(3, {}, mode=heur_mode.A), PlanConfig(1, {}, mode=heur_mode.FALLBACK)]


def _attention_graph(*, batch, heads, seq, sm_count=None):
    g = pygraph.Graph(
        name="attn", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT, sm_version=90, sm_count=sm_count
    )
    q, k, v = (g.tensor(name=n, dim=[batch, heads, seq, 128], data_type=dt.BFLOAT16) for n in "qkv")
    o, _stats = g.sdpa(q=q, k=k, v=v, attn_scale=0.088, use_causal_mask=False, name="sdpa")
    o.set_output(True)
    return g


# one CTA per 128-row query block, head and batch: 64, 120 and 512 CTAs, under, between and past the
# two cards' SM counts
@pytest.mark.parametrize(("batch", "heads", "seq"), [(1, 8, 1024), (1, 15, 1024), (4, 16, 1024)])
def test_the_same_graph_ranks_the_same_on_either_card(batch, heads, seq):
    facts = analyze(_attention_graph(batch=batch, heads=heads, seq=seq))
    modes = [heur_mode.A, heur_mode.FALLBACK]
    offered = {"sdpa_fwd_sm90": 20500}
    on_h200 = recommend(modes, facts, offered, ENTRIES, device=DeviceInfo(90, None, H200))
    on_pcie = recommend(modes, facts, offered, ENTRIES, device=DeviceInfo(90, None, H100_PCIE))
    assert on_h200 == on_pcie
    # the cell's rule on either card: the backend's entries first, P in registers first after them
    assert [c.engine_id for c in on_h200[:4]] == [-1, 3, 20500, 20500]
    assert [dict(c.knobs) for c in on_h200[2:4]] == [{"P_REGS": 1}, {"P_REGS": 0}]


def test_planning_hands_the_hook_the_declared_device(monkeypatch):
    from pygraph_sdpa import heuristics

    seen = []
    real = heuristics.recommend

    def recording(*args, **kwargs):
        seen.append(kwargs["device"])
        return real(*args, **kwargs)

    monkeypatch.setattr(heuristics, "recommend", recording)
    names = []
    for sm_count in (H200, H100_PCIE):
        g = _attention_graph(batch=1, heads=15, seq=1024, sm_count=sm_count)
        g.create_execution_plans([heur_mode.A])
        names.append([g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())])
    assert [d.sms for d in seen] == [H200, H100_PCIE]
    assert names[0] == names[1] and any(n.startswith("sdpa_fwd_sm90[") for n in names[0])
