"""A hook's `Deferred` blocks: planning builds the ranked prefix only; the rest is built when something
reads past it, and the whole list (count, every index, names, dedup, identity) is the one the same
hook gives with every config named outright (the stand-in hook's "place_first" style)."""

from __future__ import annotations

import pytest
from dispatch_helpers import ALPHA, BETA, GAMMA, RANKED, matmul_graph

from pygraph.engines.base import PlanConfig
from pygraph.engines.plan_list import Deferred, PlanList, PlanSequence
from pygraph.errors import PlanIndexError
from pygraph.ir.dtypes import heur_mode
from pygraph.tuning import plan_cache

A, FALLBACK, OSS = heur_mode.A, heur_mode.FALLBACK, heur_mode.OPENSOURCE
BACKEND = {"A": [(7, {"K": 1}), (8, {"K": 2})], "FALLBACK": [(9, {}), (7, {"K": 1})]}


def planned(standins, style, modes=None, *, deselect=()):
    standins.HOOK.clear()
    standins.HOOK["style"] = style
    g, a, b, c = matmul_graph()
    if deselect:
        g.deselect_engines(list(deselect))
    g.create_execution_plans(modes)
    return g, (a, b, c)


def whole(g):
    return [
        (g.get_plan_name_at_index(i), g.get_engine_and_knobs_at_index(i))
        for i in range(g.get_execution_plan_count())
    ]


def test_planning_builds_no_deferred_block(standins):
    g, (a, b, c) = planned(standins, "deferred")
    assert [g.get_plan_name_at_index(i) for i in range(3)] == RANKED[:3]
    assert g.selected_plan.name == "alpha[TILE=128]"
    g.build_plans()
    g.execute({a: 0x1000, b: 0x2000, c: 0x3000})
    assert standins.CALLS[-1][0] == "alpha"
    assert "built" not in standins.HOOK  # nothing read past the prefix
    assert g.get_execution_plan_count() == len(RANKED)
    assert standins.HOOK["built"] == [ALPHA, BETA, GAMMA]  # each block once, in rank order
    g.get_execution_plan_count()
    assert standins.HOOK["built"] == [ALPHA, BETA, GAMMA]


@pytest.mark.parametrize("modes", [[A], [A, FALLBACK], [FALLBACK, A], [OSS, A, FALLBACK]])
def test_the_whole_list_is_the_one_named_outright(standins, fake_backend, modes):
    fake_backend(BACKEND)
    eager, _ = planned(standins, "place_first", modes)
    expected = (whole(eager), eager.plans, eager.backend_plan_entries())
    fake_backend(BACKEND)
    lazy, _ = planned(standins, "deferred", modes)
    assert (whole(lazy), lazy.plans, lazy.backend_plan_entries()) == expected


def test_an_index_past_the_prefix_builds_the_rest(standins):
    g, _ = planned(standins, "deferred")
    assert g.get_plan_name_at_index(4) == "beta[TILE=64]"
    assert standins.HOOK["built"] == [ALPHA, BETA, GAMMA]
    with pytest.raises(PlanIndexError, match=r"plan index 6 out of range for 6 plan\(s\) \(0\.\.5\)"):
        g.get_plan_name_at_index(6)


def test_build_plans_walks_into_the_rest_when_the_prefix_declines(standins):
    g, _ = planned(standins, "deferred")
    standins.BEHAVIOUR.update(alpha="decline_build", beta="decline_build", gamma="decline_build")
    with pytest.raises(Exception, match=r"#3 alpha\[TILE=64\]") as info:
        g.build_plans()
    assert type(info.value).__name__ == "GraphNotSupportedError"
    assert standins.HOOK["built"] == [ALPHA, BETA, GAMMA]


def test_deselecting_before_the_rest_is_built_drops_it_there_too(standins):
    eager, _ = planned(standins, "place_first")
    eager.select_plan(2)
    eager.deselect_engines(["beta"])
    lazy, _ = planned(standins, "deferred")
    lazy.select_plan(2)
    lazy.deselect_engines(["beta"])
    assert "built" not in standins.HOOK
    assert lazy.selected_plan.name == eager.selected_plan.name == "gamma[TILE=128]"
    assert whole(lazy) == whole(eager)
    assert [name for name, _ in whole(lazy)] == [n for n in RANKED if not n.startswith("beta")]


def test_replaying_a_config_of_the_rest_pins_its_index_in_the_whole_list(standins):
    eager, _ = planned(standins, "place_first")
    eager.create_execution_plan(BETA, {"TILE": 64})
    lazy, _ = planned(standins, "deferred")
    lazy.create_execution_plan(BETA, {"TILE": 64})
    assert lazy.selected_plan.index == eager.selected_plan.index == 4
    assert whole(lazy) == whole(eager)


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "plans.sqlite"
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(path))
    return path


def test_a_recorded_winner_inside_a_block_leads_without_a_second_entry(standins, cache_file):
    g, _ = planned(standins, "place_first")
    entry, why = plan_cache.record(
        g, g.planner.prepare().family, BETA, {"TILE": 64}, plan_name="beta[TILE=64]"
    )
    assert why is None and entry is not None
    eager, _ = planned(standins, "place_first")
    lazy, _ = planned(standins, "deferred")
    assert lazy.get_plan_name_at_index(0) == "beta[TILE=64]"
    assert whole(lazy) == whole(eager)
    assert [name for name, _ in whole(lazy)].count("beta[TILE=64]") == 1


def test_a_block_yielding_another_engines_config_is_refused_when_built(standins):
    g, _ = planned(standins, "deferred_foreign")
    assert g.get_plan_name_at_index(0) == "alpha[TILE=128]"
    with pytest.raises(
        ValueError, match=rf"Deferred\({ALPHA}\) produced PlanConfig\({BETA}.*engine {ALPHA} only"
    ):
        g.get_execution_plan_count()


def test_a_block_of_an_engine_not_offered_is_refused_at_planning(standins):
    standins.HOOK["style"] = "deferred_unoffered"
    g, *_ = matmul_graph()
    with pytest.raises(
        ValueError, match=r"returned python engine id \d+ at position 1, which the family did not offer"
    ):
        g.create_execution_plans()


def test_a_plan_sequence_reads_as_the_whole_list():
    built = []
    block = Deferred(ALPHA, lambda: built.append(1) or [PlanConfig(ALPHA, {"TILE": 64})])
    seq = PlanSequence([PlanConfig(ALPHA, {"TILE": 128}), block, PlanConfig(BETA, {"TILE": 64})])
    assert built == []
    assert [p.key for p in seq] == [
        (ALPHA, (("TILE", 128),)), (ALPHA, (("TILE", 64),)), (BETA, (("TILE", 64),)),
    ]  # fmt: skip
    assert len(seq) == 3 and seq[1].knobs["TILE"] == 64 and built == [1]


def test_a_plan_list_keeps_first_positions_across_blocks():
    head = [PlanConfig(ALPHA, {"TILE": 128}), PlanConfig(ALPHA, {"TILE": 128})]
    block = Deferred(ALPHA, lambda: [PlanConfig(ALPHA, {"TILE": 128}), PlanConfig(ALPHA, {"TILE": 64})])
    plans = PlanList([*head, block, PlanConfig(ALPHA, {"TILE": 64}), PlanConfig(GAMMA, {"TILE": 64})])
    assert plans.prefix == (head[0],) and not plans.complete
    assert plans[0] is head[0] and not plans.complete
    assert [p.key[0] for p in plans] == [ALPHA, ALPHA, GAMMA] and plans.complete
    assert plans[1].knobs["TILE"] == 64 and len(plans) == 3
