"""Ranking, the one plan list, planning's one-shot rule and the at-index APIs, with stand-in engines."""

from __future__ import annotations

import pytest
from dispatch_helpers import ALPHA, BETA, GAMMA, matmul_graph, standin_family

from pygraph.engines.base import PlanConfig
from pygraph.engines.engine_ids import BACKEND_HEURISTIC_ENGINE_ID
from pygraph.errors import GraphNotSupportedError, GraphStateError
from pygraph.ir.dtypes import heur_mode
from pygraph.testing import manifest_override

A, FALLBACK, OSS = heur_mode.A, heur_mode.FALLBACK, heur_mode.OPENSOURCE
BACKEND = {"A": [(7, {"K": 1}), (8, {"K": 2})], "FALLBACK": [(9, {}), (7, {"K": 1})]}


def ids(g):
    return [(p.engine_id, dict(p.knobs or {}).get("TILE")) for p in g.plans]


def test_default_modes_order_ours_then_backend_per_mode(standins, fake_backend):
    fake = fake_backend(BACKEND)
    g, *_ = matmul_graph()
    g.create_execution_plans()
    assert fake.queries == ["A", "FALLBACK"]  # one query per mode
    assert ids(g) == [
        (ALPHA, 128), (BETA, 128), (GAMMA, 128), (ALPHA, 64), (BETA, 64), (GAMMA, 64),
        (7, None), (8, None),  # backend's A block where the marker sat
        (9, None),  # FALLBACK: ours (TILE=64 already listed: dedup keeps first) then backend's block
    ]  # fmt: skip
    entries = g.backend_plan_entries()
    assert [(e.engine_id, e.mode, e.cpp_index) for e in entries] == [(7, A, 0), (8, A, 1), (9, FALLBACK, 2)]
    modes, facts, offered, seen_entries = standins.HOOK["seen"]
    assert modes == [A, FALLBACK] and facts.node_count == 1
    assert offered == {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA}
    assert seen_entries == entries


def test_backend_first_places_block_at_marker(standins, fake_backend):
    fake_backend(BACKEND)
    standins.HOOK["style"] = "backend_first"
    g, *_ = matmul_graph()
    g.create_execution_plans([A])
    assert ids(g)[:2] == [(7, None), (8, None)] and ids(g)[2] == (ALPHA, 128)


def test_opensource_is_ours_then_delegating(standins, fake_backend):
    fake_backend(BACKEND)
    g, *_ = matmul_graph()
    g.create_execution_plans([OSS, A, FALLBACK])
    got = ids(g)
    delegating = got.index((BACKEND_HEURISTIC_ENGINE_ID, None))
    assert got[:delegating] == [(ALPHA, 128), (BETA, 128), (GAMMA, 128), (ALPHA, 64), (BETA, 64), (GAMMA, 64)]
    assert got[delegating + 1 :] == [(7, None), (8, None), (9, None)]
    assert g.get_plan_name_at_index(delegating) == "backend_heuristics"


def test_dedup_keeps_first_position(standins, fake_backend):
    fake_backend({"A": [(7, {"K": 1}), (7, {"K": 1})]})
    standins.HOOK["style"] = "dupes"
    g, *_ = matmul_graph()
    g.create_execution_plans([A, A])
    keys = [p.key for p in g.plans]
    assert len(keys) == len(set(keys))
    assert ids(g) == [
        (ALPHA, 128),
        (BETA, 128),
        (GAMMA, 128),
        (ALPHA, 64),
        (BETA, 64),
        (GAMMA, 64),
        (7, None),
    ]


def test_unoffered_id_raises(standins):
    standins.HOOK["style"] = "unoffered"
    g, *_ = matmul_graph()
    with pytest.raises(ValueError, match="did not offer"):
        g.create_execution_plans()


def test_marker_left_in_list_raises(standins):
    standins.HOOK["style"] = "marker_left"
    g, *_ = matmul_graph()
    with pytest.raises(ValueError, match="placement marker"):
        g.create_execution_plans()


def test_declining_engine_is_not_offered(standins):
    standins.BEHAVIOUR["beta"] = "decline"
    g, *_ = matmul_graph()
    g.create_execution_plans()
    assert BETA not in {p.engine_id for p in g.plans}
    assert "told to decline" in g.decline_reasons()["beta"]


def test_check_support_bug_propagates(standins):
    standins.BEHAVIOUR["alpha"] = "bug"
    g, *_ = matmul_graph()
    with pytest.raises(KeyError, match="a bug"):
        g.create_execution_plans()


def test_no_hook_is_unranked(fake_backend):
    import pygraph_standins

    pygraph_standins.reset()
    fake_backend(BACKEND)
    with manifest_override([standin_family(heuristics=False)]):
        g, *_ = matmul_graph()
        g.create_execution_plans()
    assert ids(g) == [(ALPHA, 128), (BETA, 128), (GAMMA, 128), (7, None), (8, None), (9, None)]


def test_empty_list_names_every_reason(standins, no_backend):
    for name in ("alpha", "beta", "gamma"):
        standins.BEHAVIOUR[name] = "decline_ni"
    g, *_ = matmul_graph()
    with pytest.raises(GraphNotSupportedError) as info:
        g.create_execution_plans()
    text = str(info.value)
    assert "backend:" in text and all(f"{n}: NotImplementedError" in text for n in ("alpha", "beta", "gamma"))


def test_planning_is_one_shot_and_facts_computed_once(standins):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    with pytest.raises(GraphStateError, match="runs once per graph") as info:
        g.create_execution_plans()
    assert isinstance(info.value, RuntimeError)  # classic parity
    assert str(info.value).startswith("create_execution_plans(): needs graph 'mm' not yet planned")
    assert "it is PLANNED" in str(info.value)
    assert len(standins.ANALYZED) == 1
    assert g.state.frozen


def test_backend_absent_gives_no_entries_and_a_reason(standins, no_backend):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    assert g.backend_plan_entries() == []
    assert g.backend_decline_reason()


def test_build_walk_advances_past_declines(standins):
    standins.BEHAVIOUR["alpha"] = "decline_build"
    standins.BEHAVIOUR["beta"] = "import_build"
    g, *_ = matmul_graph()
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_engine.name == "gamma"
    assert g.get_plan_name_at_index(2) == "gamma[TILE=128]"


def test_build_bug_propagates(standins):
    standins.BEHAVIOUR["alpha"] = "bug_build"
    g, *_ = matmul_graph()
    g.create_execution_plans()
    with pytest.raises(ZeroDivisionError):
        g.build_plans()


def test_pinned_decline_raises(standins):
    standins.BEHAVIOUR["beta"] = "decline_build"
    g, *_ = matmul_graph()
    g.create_execution_plans()
    g.select_plan(1)
    with pytest.raises(GraphNotSupportedError, match="pinned"):
        g.build_plans()


def test_select_plan_errors(standins):
    g, *_ = matmul_graph()
    with pytest.raises(
        GraphStateError, match=r"select_plan\(\): needs graph 'mm' planned .*; it is BUILDING"
    ):
        g.select_plan(0)
    g.create_execution_plans()
    for bad in (-1, len(g.plans), 99):
        with pytest.raises(IndexError):
            g.select_plan(bad)


def test_replay_by_engine_and_knobs(standins, fake_backend):
    fake = fake_backend(BACKEND)
    g, *_ = matmul_graph()
    g.create_execution_plan(BETA, {"TILE": 64})
    assert g.plans == (PlanConfig(BETA, {"TILE": 64}),)
    g.build_plans()
    assert g.selected_engine.name == "beta" and g.get_engine_and_knobs_at_index(0) == (BETA, {"TILE": 64})
    g2, *_ = matmul_graph("mm2")
    g2.create_execution_plan(8, {"K": 2})
    g2.build_plans()
    assert g2.selected_engine is None and fake.list[-1] == (8, {"K": 2})


def test_at_index_apis(standins, fake_backend):
    fake = fake_backend(BACKEND)
    g, *_ = matmul_graph()
    g.create_execution_plans()
    n = g.get_execution_plan_count()
    assert n == len(g.plans)
    assert g.get_plan_name_at_index(0) == "alpha[TILE=128]"
    assert g.get_plan_name_at_index(6) == "eng7_kK=1"
    assert g.get_engine_and_knobs_at_index(6) == (7, {"K": 1})
    assert g.get_workspace_size_plan_at_index(2) == 256
    g.build_plan_at_index(6)
    assert fake.built == [0]
    with pytest.raises(IndexError):
        g.get_plan_name_at_index(-1)


def test_deselect_engines_applies_to_python_plans(standins, fake_backend):
    fake = fake_backend(BACKEND)
    g, *_ = matmul_graph()
    g.deselect_engines(["alpha"])
    g.create_execution_plans()
    assert ALPHA not in {p.engine_id for p in g.plans}
    assert fake.deselected == ["alpha"]
    g.deselect_engines(["beta"])
    assert {p.engine_id for p in g.plans} & {ALPHA, BETA} == set()


def test_workspace_limit_declines_python_plan(standins):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    g.deselect_workspace_greater_than(100)
    g.select_plan(2)  # gamma needs 256
    with pytest.raises(GraphNotSupportedError, match="over the limit"):
        g.build_plans()
