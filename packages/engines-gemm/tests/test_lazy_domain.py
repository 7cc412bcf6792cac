"""The gemm hook names the rest of its knob domain as a deferred block: the first plan list of the
gemm example builds none of it; the count, an index past the ranked prefix or the whole list build
it once, and the whole list holds every config of the domain behind the named one, once each."""

from __future__ import annotations

import pytest

from pygraph.examples import EXAMPLES
from pygraph_gemm import heuristics
from pygraph_gemm.heuristics import tile_rule

SM90 = 20400


@pytest.fixture
def domain_builds(monkeypatch):
    """The hook's requests for the domain's plan-list entries (engine ids), and the real builder."""
    calls = []
    inner = heuristics._domain_configs

    def counted(engine_id):
        calls.append(engine_id)
        return inner(engine_id)

    monkeypatch.setattr(heuristics, "_domain_configs", counted)
    return calls, inner


def test_the_first_plan_list_builds_none_of_the_domain(domain_builds):
    calls, _ = domain_builds
    g = EXAMPLES["gemm"].graph()
    g.create_execution_plans()
    engine_id, knobs = g.get_engine_and_knobs_at_index(0)
    assert engine_id == SM90 and knobs == tile_rule(g.engine_request().facts)
    assert g.selected_plan.name == g.get_plan_name_at_index(0)
    assert calls == []


def test_the_count_builds_the_domain_once_and_the_list_holds_all_of_it(domain_builds):
    calls, inner = domain_builds
    g = EXAMPLES["gemm"].graph()
    g.create_execution_plans()
    count = g.get_execution_plan_count()
    plans = g.plans
    assert calls == [SM90] and len(plans) == count
    keys = [p.key for p in plans]
    assert len(set(keys)) == count  # each (engine_id, knobs) once
    first, domain = keys[0], [p.key for p in inner(SM90)]
    assert first in domain
    # the named config first, then the rest of the domain in its order
    ours = [k for k in keys if k[0] == SM90]
    assert ours[: len(domain)] == [first, *(k for k in domain if k != first)]


def test_an_index_past_the_prefix_reads_the_domain_in_its_order(domain_builds):
    calls, inner = domain_builds
    g = EXAMPLES["gemm"].graph()
    g.create_execution_plans()
    prefix = len(g.planner.plans.prefix)
    assert calls == []
    engine_id, knobs = g.get_engine_and_knobs_at_index(prefix)
    first = g.plans[0].key
    after_first = next(p for p in inner(SM90) if p.key != first)
    assert calls == [SM90] and (engine_id, knobs) == (SM90, dict(after_first.knobs))
