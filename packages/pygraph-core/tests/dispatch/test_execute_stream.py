"""execute(stream=): a call's launch stream. A python plan reads it as ``ctx.stream`` whatever the
handle; a backend plan runs on its handle's stream, so the handle is set to it first, and a backend
plan given a stream but no handle is refused before anything runs. Without ``stream`` the graph
API's rule is unchanged: the handle's stream, the default stream (None) without one."""

from __future__ import annotations

import numpy as np
import pytest
from dispatch_helpers import matmul_graph

from pygraph.execution import HandleError
from pygraph.planning import runner as runner_mod


def buffers():
    return (
        np.zeros((1, 16, 32), np.float16),
        np.zeros((1, 32, 8), np.float16),
        np.zeros((1, 16, 8), np.float16),
    )


def last_ctx(standins):
    return next(c for c in reversed(standins.CALLS) if c[0] != "build")[4]


@pytest.fixture
def bound(monkeypatch):
    """Every stream set on a handle, as (handle, stream); no cuDNN needed."""
    calls = []
    monkeypatch.setattr(runner_mod, "bind_stream", lambda handle, stream: calls.append((handle, stream)))
    return calls


def test_a_python_plan_reads_the_calls_stream(standins, bound):
    g, a, b, c = matmul_graph()
    A, B, C = buffers()
    g.execute({a: A, b: B, c: C}, stream=0x5EED)
    ctx = last_ctx(standins)
    assert (ctx.handle, ctx.stream, ctx.workspace) == (None, 0x5EED, 0)
    g.execute({a: A, b: B, c: C})  # no stream, no handle: the default stream, as before
    assert last_ctx(standins).stream is None
    assert bound == []  # a python plan's handle is not touched


def test_the_calls_stream_wins_over_the_graphs_handle_for_a_python_plan(
    standins, bound, no_backend, monkeypatch
):
    from pygraph.execution import context as context_mod

    monkeypatch.setattr(context_mod, "_backend", type("cudnn", (), {"get_stream": staticmethod(lambda h: 7)}))
    g, a, b, c = matmul_graph()
    g.handle = 0xABC
    A, B, C = buffers()
    g.execute({a: A, b: B, c: C}, stream=0x5EED)
    ctx = last_ctx(standins)
    assert (ctx.handle, ctx.stream) == (0xABC, 0x5EED)
    g.execute({a: A, b: B, c: C})
    assert last_ctx(standins).stream == 7  # the handle's stream without stream=


def test_execute_plan_at_index_takes_the_stream(standins, bound):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    A, B, C = buffers()
    g.execute_plan_at_index({a: A, b: B, c: C}, index=4, stream=0x5EED)
    assert last_ctx(standins).stream == 0x5EED


def test_a_backend_plan_runs_on_its_handle_set_to_the_stream(standins, fake_backend, bound):
    fake = fake_backend({"A": [(7, {})]})
    handles = []
    fake._execute_with_raw_ptrs = lambda address, n, ws, handle, index: handles.append(handle)
    standins.HOOK["style"] = "backend_first"
    g, a, b, c = matmul_graph()
    g.build()
    assert g.selected_engine is None
    A, B, C = buffers()
    g.execute({a: A, b: B, c: C}, handle=0xABC, stream=0x5EED)
    assert bound == [(0xABC, 0x5EED)] and handles == [0xABC]


def test_a_backend_plan_given_a_stream_and_no_handle_is_refused(standins, fake_backend, bound):
    fake = fake_backend({"A": [(7, {})]})
    standins.HOOK["style"] = "backend_first"
    g, a, b, c = matmul_graph()
    g.build()
    A, B, C = buffers()
    with pytest.raises(HandleError, match=r"is a backend plan.*stream=24301 needs handle="):
        g.execute({a: A, b: B, c: C}, stream=0x5EED)
    assert fake.executed == [] and bound == []


def test_bind_stream_sets_a_cudnn_handle_and_names_one_it_cannot(monkeypatch):
    from pygraph.execution import context as context_mod

    seen = []

    class Cudnn:
        @staticmethod
        def set_stream(handle, stream):
            if handle == "bad":
                raise TypeError("not a cudnn.Handle")
            seen.append((handle, stream))

    monkeypatch.setattr(context_mod, "_backend", Cudnn)
    context_mod.bind_stream("h", 5)
    assert seen == [("h", 5)]
    with pytest.raises(HandleError, match=r"cannot set the stream of handle 'bad' to 5: not a cudnn.Handle"):
        context_mod.bind_stream("bad", 5)
