"""The sdpa families as the manifest ships them: blocks, planned slots, the hook, planning on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import assemble
from pygraph_sdpa.analyzer import analyze
from pygraph_sdpa.heuristics import recommend


def _attention_graph(name="attn"):
    g = pygraph.Graph(name=name, io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    q, k, v = (g.tensor(name=n, dim=[2, 4, 128, 64], data_type=dt.BFLOAT16) for n in "qkv")
    o, _stats = g.sdpa(q=q, k=k, v=v, attn_scale=0.125, use_causal_mask=True, name="sdpa")
    o.set_output(True)
    return g


def test_forward_and_backward_are_separate_families_with_their_own_blocks():
    fwd, bwd = pygraph.engines.family_by_name("sdpa_fwd"), pygraph.engines.family_by_name("sdpa_bwd")
    assert (fwd.engine_id, fwd.anchors, fwd.distribution) == (20500, ("SDPA",), "pygraph-engines-sdpa")
    assert (bwd.engine_id, bwd.anchors) == (20600, ("SDPA_BWD",))
    for fam in (fwd, bwd):
        assert fam.package == "pygraph_sdpa"
        assert fam.analyzer == ("pygraph_sdpa.analyzer", "analyze")
        assert fam.heuristics == ("pygraph_sdpa.heuristics", "recommend")


@pytest.mark.parametrize(
    ("family", "engine", "engine_id", "cls"),
    [
        ("sdpa_fwd", "sdpa_fwd_sm90", 20500, "SdpaFwdSm90Engine"),
        ("sdpa_bwd", "sdpa_bwd_sm90", 20600, "SdpaBwdSm90Engine"),
    ],
)
def test_the_python_engines_are_offered_by_default(monkeypatch, family, engine, engine_id, cls):
    fam = pygraph.engines.family_by_name(family)
    slot = fam.slots[engine]
    assert slot.impl == ("pygraph_sdpa.engines.sm90", cls) and not slot.opt_in
    monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", raising=False)
    assert pygraph.engines.offered_ids(fam) == {engine: engine_id}
    (built,) = pygraph.engines.instantiate(fam).engines
    assert (built.name, built.engine_id) == (engine, engine_id)


def test_the_hook_keeps_the_backend_block_exactly_as_a_family_without_a_hook():
    a1, a2, fb = (
        PlanConfig(3, {}, mode=heur_mode.A),
        PlanConfig(7, {}, mode=heur_mode.A),
        PlanConfig(1, {}, mode=heur_mode.FALLBACK),
    )
    delegating = PlanConfig(-1)
    entries = [delegating, a1, a2, fb]
    for modes in ([heur_mode.A, heur_mode.FALLBACK], [heur_mode.OPENSOURCE, heur_mode.A]):
        ranked = recommend(modes, analyze(_attention_graph()), {}, entries)
        assert ranked == assemble(modes, lambda kind: [], entries)
    ranked = recommend([heur_mode.A, heur_mode.FALLBACK], analyze(_attention_graph()), {}, entries)
    assert [c.engine_id for c in ranked] == [-1, 3, 7, -1, 1, -1]


def test_the_untimed_python_backward_goes_after_the_backend_its_own_dq_pass_first():
    entries = [PlanConfig(-1), PlanConfig(3, {}, mode=heur_mode.A)]
    g = pygraph.Graph(name="bwd", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
    q, k, v, o, d_o = (
        g.tensor(name=n, dim=[2, 4, 128, 64], data_type=dt.BFLOAT16) for n in ("q", "k", "v", "o", "dO")
    )
    stats = g.tensor(name="stats", dim=[2, 4, 128, 1], data_type=dt.FLOAT)
    for port in g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.125, name="sdpa_bwd"):
        port.set_output(True)
    ranked = recommend([heur_mode.A], analyze(g), {"sdpa_bwd_sm90": 20600}, entries)
    assert [(c.engine_id, c.knobs or {}) for c in ranked][:4] == [
        (-1, {}), (3, {}), (20600, {"DETERMINISTIC": 1}), (20600, {"DETERMINISTIC": 0}),
    ]  # fmt: skip


def test_the_untimed_python_forward_goes_after_the_backend_in_every_mode_but_opensource():
    entries = [
        PlanConfig(-1),
        PlanConfig(3, {}, mode=heur_mode.A),
        PlanConfig(1, {}, mode=heur_mode.FALLBACK),
    ]
    facts = analyze(_attention_graph())
    ranked = recommend([heur_mode.A, heur_mode.FALLBACK], facts, {"sdpa_fwd_sm90": 20500}, entries)
    assert [c.engine_id for c in ranked] == [-1, 3, 20500, 20500, -1, 1, 20500, 20500, -1]
    assert [c.knobs for c in ranked[2:4]] == [{"P_REGS": 1}, {"P_REGS": 0}]  # P in registers first
    ranked = recommend([heur_mode.OPENSOURCE], facts, {"sdpa_fwd_sm90": 20500}, entries)
    assert [c.engine_id for c in ranked] == [20500, 20500, -1, -1]


def test_without_the_backend_the_python_forward_still_plans_the_graph(monkeypatch):
    monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", raising=False)
    graph = _attention_graph()
    graph.create_execution_plans([heur_mode.A])
    names = [graph.get_plan_name_at_index(i) for i in range(graph.get_execution_plan_count())]
    python = [i for i, c in enumerate(graph.plans) if pygraph.engines.is_python_engine(c.engine_id)]
    # the python forward's plans (P in registers first) come after every backend plan, and without a
    # cuDNN runtime (the CPU machine) they are the whole list
    assert [names[i] for i in python][:2] == ["sdpa_fwd_sm90[P_REGS=1]", "sdpa_fwd_sm90[P_REGS=0]"]
    assert python == list(range(len(names) - len(python), len(names)))


def test_the_planning_path_imports_no_framework():
    code = (
        "import json, sys; import pygraph_sdpa, pygraph_sdpa.family, pygraph_sdpa.analyzer, "
        "pygraph_sdpa.heuristics; print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert [m for m in loaded if m.split(".")[0] in ("torch", "cutlass", "cudnn", "numpy")] == []


def test_a_timed_cell_where_the_python_forward_leads_puts_it_first_with_its_knob_first(monkeypatch):
    from pygraph_sdpa import heuristics

    facts = analyze(_attention_graph())  # d 64, causal, 128 keys, no grouped heads
    assert heuristics.cell_of(facts) == (64, True, 0, False)
    monkeypatch.setitem(heuristics.FWD_RULES, (64, True, 0, False), heuristics.Rule(leads=True, first=1))
    entries = [PlanConfig(-1), PlanConfig(3, {}, mode=heur_mode.A)]
    ranked = recommend([heur_mode.A], facts, {"sdpa_fwd_sm90": 20500}, entries)
    assert [(c.engine_id, c.knobs or {}) for c in ranked][:4] == [
        (20500, {"P_REGS": 1}), (20500, {"P_REGS": 0}), (-1, {}), (3, {}),
    ]  # fmt: skip


def test_the_key_length_buckets():
    from pygraph_sdpa import heuristics

    def bucket(s_kv):
        g = pygraph.Graph(name="b", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT)
        q = g.tensor(name="q", dim=[1, 2, 64, 128], data_type=dt.BFLOAT16)
        k, v = (g.tensor(name=n, dim=[1, 1, s_kv, 128], data_type=dt.BFLOAT16) for n in "kv")
        g.sdpa(q=q, k=k, v=v, attn_scale=0.1, name="sdpa")[0].set_output(True)
        return heuristics.cell_of(analyze(g))

    assert [bucket(s) for s in (1024, 1025, 4096, 8192)] == [
        (128, False, 0, True), (128, False, 1, True), (128, False, 1, True), (128, False, 2, True),
    ]  # fmt: skip
