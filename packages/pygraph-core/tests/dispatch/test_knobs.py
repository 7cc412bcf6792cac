"""Knobs are checked against the engine's declared domain at create_execution_plan, before anything is
prepared or built; `validate_knobs` is the one check (a plan cache's replay runs it too)."""

from __future__ import annotations

import pytest
from dispatch_helpers import ALPHA, BETA, matmul_graph

from pygraph.engines.knobs import validate_knobs
from pygraph.errors import KnobError, KnobTypeError, UnknownEngineError, UnknownKnobError
from pygraph.lifecycle import GraphState

BACKEND = {"A": [(8, {"K": 1})], "FALLBACK": []}


@pytest.mark.parametrize(
    ("knobs", "error", "fragments"),
    [
        ({"TILEX": 64}, UnknownKnobError, ["create_execution_plan()", "beta", "'TILEX'", "64", "TILE"]),
        ({"TILE": 3}, KnobError, ["create_execution_plan()", "TILE=3", "beta", "128, 64"]),
        ({"TILE": 64.0}, KnobError, ["TILE=64.0", "128, 64"]),
        ({"TILE": True}, KnobError, ["TILE=True"]),
        ([("TILE", 64)], KnobTypeError, ["create_execution_plan()", "mapping", "list"]),
    ],
)
def test_a_bad_knob_is_refused_before_the_graph_is_touched(standins, knobs, error, fragments):
    g, *_ = matmul_graph()
    with pytest.raises(error) as info:
        g.create_execution_plan(BETA, knobs)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert g.state is GraphState.BUILDING and not g.plans  # nothing prepared, nothing built
    assert not standins.REQUESTS  # no engine was asked


def test_the_error_types_are_the_builtins_a_caller_catches(standins):
    g, *_ = matmul_graph()
    with pytest.raises(KeyError):
        g.create_execution_plan(BETA, {"NOPE": 1})
    with pytest.raises(ValueError):
        g.create_execution_plan(BETA, {"TILE": 1})
    with pytest.raises(TypeError):
        g.create_execution_plan(BETA, "TILE=64")


def test_a_partial_assignment_is_the_engine_default_for_the_rest(standins):
    g, *_ = matmul_graph()
    g.create_execution_plan(ALPHA, {})
    g.build_plans()
    assert g.selected_engine.name == "alpha"


def test_validate_knobs_takes_an_engine_or_an_id(standins):
    from pygraph_standins import Beta

    validate_knobs(BETA, {"TILE": 128})
    validate_knobs(Beta, {"TILE": 128})
    validate_knobs(Beta(engine_id=BETA), {"TILE": 64}, call="plan cache replay")
    with pytest.raises(KnobError, match=r"^plan cache replay: knob TILE=1 "):
        validate_knobs(Beta, {"TILE": 1}, call="plan cache replay")
    with pytest.raises(UnknownEngineError, match=r"engine id 20950 is in the block of family 'standin'"):
        validate_knobs(20950, {})
    with pytest.raises(UnknownEngineError, match=r"engine id -7 names no plan kind"):
        validate_knobs(-7, {})
    with pytest.raises(UnknownKnobError, match="delegating entry"):
        validate_knobs(-1, {"TILE": 1})
    validate_knobs(-1, None)


def test_backend_knobs_are_names_with_int_values(standins, fake_backend):
    fake_backend(BACKEND)
    validate_knobs(8, {"K": 2})
    with pytest.raises(KnobError, match=r"knob K='2' of backend engine 8 must be an int"):
        validate_knobs(8, {"K": "2"})
    with pytest.raises(UnknownKnobError, match="is not a knob name"):
        validate_knobs(8, {3: 2})


def test_an_unknown_backend_knob_names_the_knob(standins, monkeypatch):
    from dispatch_helpers import FakeBackend

    from pygraph.planning import backend as backend_mod

    fake = FakeBackend(BACKEND)

    def to_knob(knob):
        return {"SPLIT_K_SLC": "SPLIT_K_SLC"}[knob]

    monkeypatch.setattr(
        backend_mod,
        "open_backend",
        lambda graph, refused=None: (
            backend_mod.BackendSource(fake, to_mode=lambda m: m, to_knob=to_knob),
            None,
        ),
    )
    g, *_ = matmul_graph()
    with pytest.raises(UnknownKnobError, match=r"backend engine 8 has no knob 'TILEZ' \(given the value 2\)"):
        g.create_execution_plan(8, {"TILEZ": 2})
