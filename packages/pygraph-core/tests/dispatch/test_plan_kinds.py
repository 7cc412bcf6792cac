"""The backend is one plan kind: every entry resolves through one table, and the selected plan is
described the same way whichever kind serves it."""

from __future__ import annotations

import dataclasses

import pytest
from dispatch_helpers import ALPHA, matmul_graph

from pygraph.engines.engine_ids import BACKEND_HEURISTIC_ENGINE_ID, EntryKind, entry_kind
from pygraph.ir.dtypes import heur_mode


@pytest.mark.parametrize(
    ("engine_id", "kind"),
    [
        (0, EntryKind.BACKEND),
        (9999, EntryKind.BACKEND),
        (15000, EntryKind.BACKEND),  # a C++ OSS engine: served through the backend
        (20400, EntryKind.PYTHON),
        (BACKEND_HEURISTIC_ENGINE_ID, EntryKind.DELEGATING),
    ],
)
def test_every_id_an_entry_can_have_resolves_to_one_kind(engine_id, kind):
    assert entry_kind(engine_id) is kind


def test_an_id_no_entry_can_have_is_refused_naming_the_id_space():
    with pytest.raises(ValueError, match=r"engine id -5 names no plan kind: backend ids are \[0, 10000\)"):
        entry_kind(-5)


def test_the_selected_plan_of_a_python_entry(standins):
    g, *_ = matmul_graph()
    g.create_execution_plans()
    plan = g.selected_plan
    assert (plan.name, plan.engine_id, dict(plan.knobs), plan.kind) == (
        "alpha[TILE=128]",
        ALPHA,
        {"TILE": 128},
        "python",
    )
    assert plan.engine is g.selected_engine and plan.engine.name == "alpha" and plan.index == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.name = "other"
    g.select_plan(4)
    assert g.selected_plan.name == "beta[TILE=64]"


def test_the_selected_plan_of_a_backend_entry_and_of_the_delegating_entry(standins, fake_backend):
    fake_backend({"A": [(7, {"K": 1})]})
    g, *_ = matmul_graph()
    g.create_execution_plans([heur_mode.OPENSOURCE, heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    g.select_plan(names.index("backend_heuristics"))
    delegating = g.selected_plan
    assert (delegating.engine_id, delegating.kind, delegating.engine) == (
        BACKEND_HEURISTIC_ENGINE_ID,
        "backend",
        None,
    )
    g.select_plan(names.index("eng7_kK=1"))
    backend = g.selected_plan
    assert (backend.engine_id, dict(backend.knobs), backend.kind, backend.engine) == (
        7,
        {"K": 1},
        "backend",
        None,
    )
    assert g.selected_engine is None  # classic parity


def test_a_hook_returning_an_id_no_entry_can_have_is_refused_naming_the_hook(standins, monkeypatch):
    from pygraph.engines.base import PlanConfig

    monkeypatch.setattr(standins, "recommend", lambda *args, **kwargs: [PlanConfig(-5)])
    g, *_ = matmul_graph()
    with pytest.raises(
        ValueError, match="heuristics hook of family 'standin' returned PlanConfig\\(-5\\) at position 0"
    ):
        g.create_execution_plans()
