"""One lifecycle: the graph's GraphState is the only state, and every state error is one type that
names the call, the state it needs and the state the graph is in."""

from __future__ import annotations

import pytest
from dispatch_helpers import matmul_graph

from pygraph.errors import GraphStateError
from pygraph.lifecycle import GraphState

# call name as the error spells it -> the call, on a graph with no plan list
NEEDS_A_PLAN_LIST = {
    "select_plan()": lambda g: g.select_plan(0),
    "get_plan_name_at_index()": lambda g: g.get_plan_name_at_index(0),
    "get_engine_and_knobs_at_index()": lambda g: g.get_engine_and_knobs_at_index(0),
    "build_plan_at_index()": lambda g: g.build_plan_at_index(0),
    "get_workspace_size_plan_at_index()": lambda g: g.get_workspace_size_plan_at_index(0),
    "get_workspace_size()": lambda g: g.get_workspace_size(),
    "check_support()": lambda g: g.check_support(),
    "build_plans()": lambda g: g.build_plans(),
    "backend_plan_entries()": lambda g: g.backend_plan_entries(),
    "execute_plan_at_index()": lambda g: g.execute_plan_at_index({}, index=0),
    "selected_plan": lambda g: g.selected_plan,
}


@pytest.mark.parametrize("call", list(NEEDS_A_PLAN_LIST))
def test_a_call_that_needs_the_plan_list_names_itself_the_state_it_needs_and_the_state_it_found(
    standins, call
):
    g, *_ = matmul_graph()
    with pytest.raises(GraphStateError) as info:
        NEEDS_A_PLAN_LIST[call](g)
    assert isinstance(info.value, RuntimeError)  # classic parity
    assert str(info.value) == (
        f"{call}: needs graph 'mm' planned (PLANNED or BUILT); it is BUILDING; "
        "call create_execution_plans() first"
    )


def test_the_graph_state_walks_forward_through_planning_and_building(standins):
    g, *_ = matmul_graph()
    assert g.state is GraphState.BUILDING
    g.engine_request()  # preparing freezes, as planning does
    assert g.state is GraphState.FROZEN
    g.create_execution_plans()
    assert g.state is GraphState.PLANNED and g.state.planned
    g.build_plans()
    assert g.state is GraphState.BUILT


def test_a_replay_plans_the_graph_and_planning_then_refuses(standins):
    from dispatch_helpers import BETA

    g, *_ = matmul_graph()
    g.create_execution_plan(BETA, {"TILE": 64})
    assert g.state is GraphState.PLANNED
    with pytest.raises(GraphStateError, match=r"^create_execution_plans\(\): .* it is PLANNED"):
        g.create_execution_plans()


def test_a_mutation_after_planning_names_the_call_and_the_state(standins):
    g, a, *_ = matmul_graph()
    g.create_execution_plans()
    with pytest.raises(GraphStateError) as info:
        g.relu(input=a)
    text = str(info.value)
    assert "not yet frozen (BUILDING or VALIDATED)" in text and "it is PLANNED" in text
