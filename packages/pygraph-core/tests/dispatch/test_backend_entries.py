"""The backend query's bookkeeping: one query per mode, spans, per-call success, the delegating entry."""

from __future__ import annotations

from dispatch_helpers import FakeBackend

from pygraph.engines.engine_ids import BACKEND_HEURISTIC_ENGINE_ID
from pygraph.ir.dtypes import heur_mode
from pygraph.planning.backend import BackendPlans, BackendSource

A, B, FALLBACK, OSS = heur_mode.A, heur_mode.B, heur_mode.FALLBACK, heur_mode.OPENSOURCE


def plans_for(fake):
    return BackendPlans(BackendSource(fake, to_mode=lambda m: m))


def test_spans_and_modes():
    fake = FakeBackend({"A": [(1, {}), (2, {})], "FALLBACK": [(3, {})]})
    bp = plans_for(fake)
    entries = bp.query([A, FALLBACK])
    assert bp.spans == [(A, 0, 2), (FALLBACK, 2, 3)]
    assert [(e.engine_id, e.mode, e.cpp_index) for e in entries] == [(1, A, 0), (2, A, 1), (3, FALLBACK, 2)]
    assert bp.query([A]) is entries and fake.queries == ["A", "FALLBACK"]  # asked once


def test_same_config_in_two_modes_keeps_first_span():
    bp = plans_for(FakeBackend({"A": [(1, {"K": 1})], "FALLBACK": [(1, {"K": 1}), (4, {})]}))
    assert [(e.engine_id, e.mode) for e in bp.query([A, FALLBACK])] == [(1, A), (4, FALLBACK)]


def test_a_failing_mode_is_not_a_decline_of_the_backend():
    bp = plans_for(FakeBackend({"FALLBACK": [(3, {})]}, decline={"A"}))
    assert [e.engine_id for e in bp.query([A, FALLBACK])] == [3]
    assert bp.succeeded == {A: False, FALLBACK: True} and bp.declined is None


def test_every_mode_failing_is_a_recorded_decline():
    bp = plans_for(FakeBackend({}, decline={"A", "FALLBACK"}))
    assert bp.query([A, FALLBACK]) == []
    assert "no engine for mode FALLBACK" in bp.declined


def test_opensource_success_earns_the_delegating_entry_without_a_span():
    bp = plans_for(FakeBackend({"A": [(1, {})]}))
    entries = bp.query([OSS, A])
    assert bp.succeeded[OSS] and bp.spans == [(A, 0, 1)]
    assert entries[0].engine_id == BACKEND_HEURISTIC_ENGINE_ID and entries[0].mode is None


def test_no_backend_is_empty():
    bp = BackendPlans(None, "not installed")
    assert bp.query([A]) == [] and bp.declined == "not installed"
