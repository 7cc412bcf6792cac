"""The backend query's bookkeeping: one query per mode, spans, per-call success, the delegating entry."""

from __future__ import annotations

import os

from dispatch_helpers import FakeBackend

from pygraph.engines.engine_ids import BACKEND_HEURISTIC_ENGINE_ID
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import heur_mode
from pygraph.planning.backend import BackendPlans, BackendSource
from pygraph.tuning import device

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


class _DumpingCudnn(FakeBackend):
    """cuDNN where it cannot run: every query prints on stderr (from C, on file descriptor 2) and
    raises a dump of every engine's status."""

    DUMP = "\n".join(
        ["cudnnGraphNotSupportedError: no engine could be finalized:"]
        + [f"engine {i}: CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING" for i in range(43)]
    )

    def create_execution_plans(self, modes):
        os.write(2, b"Unable to load any of {libcudnn_engines_runtime_compiled.so.9}.\n")
        raise GraphNotSupportedError(self.DUMP)


def _cudnn_plans():
    return BackendPlans(BackendSource(_DumpingCudnn({}), to_mode=lambda m: m, is_cudnn=True))


def test_without_a_gpu_cudnns_refusal_is_one_line_and_its_dump_is_kept_for_verbose(monkeypatch, capfd):
    monkeypatch.setattr(device, "no_device_reason", lambda: "no CUDA driver (libcuda.so.1: not found)")
    bp = _cudnn_plans()
    assert bp.query([A, FALLBACK]) == []
    assert bp.declined == "cuDNN backend unavailable: no CUDA driver (libcuda.so.1: not found)"
    assert bp.detail.count("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING") == 43
    printed = bp.detail.split("\ncuDNN printed:\n")[1]
    assert printed == "\n".join(["Unable to load any of {libcudnn_engines_runtime_compiled.so.9}."] * 2)
    out, err = capfd.readouterr()
    assert out == err == ""  # nothing reached the terminal


def test_with_a_gpu_a_long_refusal_is_its_first_line_and_a_count(monkeypatch, capfd):
    monkeypatch.setattr(device, "no_device_reason", lambda: None)
    bp = _cudnn_plans()
    assert bp.query([A]) == []
    assert bp.declined == (
        "GraphNotSupportedError: cudnnGraphNotSupportedError: no engine could be finalized: (and 43 more "
        "lines: backend_decline_reason(verbose=True) shows them)"
    )
    assert bp.detail == f"GraphNotSupportedError: {_DumpingCudnn.DUMP}"
    assert "Unable to load" in capfd.readouterr().err  # on a GPU, cuDNN's own output is not ours to hide


def test_graph_backend_decline_reason_is_one_line_and_verbose_gives_the_whole_text(monkeypatch, standins):
    from dispatch_helpers import matmul_graph

    from pygraph.planning import backend as backend_mod

    monkeypatch.setattr(device, "no_device_reason", lambda: "the CUDA driver sees no device")
    monkeypatch.setattr(
        backend_mod,
        "open_backend",
        lambda graph, refused=None: (
            BackendSource(_DumpingCudnn({}), to_mode=lambda m: m, is_cudnn=True),
            None,
        ),
    )
    g, *_ = matmul_graph()
    g.create_execution_plans()  # the stand-in engines serve it; the backend declined
    assert g.backend_decline_reason() == "cuDNN backend unavailable: the CUDA driver sees no device"
    assert _DumpingCudnn.DUMP in g.backend_decline_reason(verbose=True)
