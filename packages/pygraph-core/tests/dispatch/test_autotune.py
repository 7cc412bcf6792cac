"""graph.autotune with stand-in engines and an injected timer: the fastest is selected, declines at
build are skipped, the bound is honoured, the winner is recorded."""

from __future__ import annotations

import pytest
from dispatch_helpers import ALPHA, BETA, GAMMA, RANKED, matmul_graph

from pygraph.errors import GraphNotSupportedError, OpInputError
from pygraph.tuning import TimerUnavailableError, head_bound, per_engine_bound, time_plans
from pygraph.tuning.timing import CudaEventTimer


class FakeTimer:
    """Runs the plan once (so the stand-in records the call) and reports the time the test gave it."""

    def __init__(self, times: dict[str, float], default: float = 10.0) -> None:
        self.times, self.default = times, default
        self.seen: list[tuple[str, int, int]] = []

    def __call__(self, run, *, warmup, reps, plan):
        run()
        self.seen.append((plan.name, warmup, reps))
        base = self.times.get(plan.name, self.default)
        return [base + 0.1 * i for i in range(reps)]  # the median is base + 0.1 * (reps - 1) / 2


@pytest.fixture
def graph(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    assert [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())] == RANKED
    return g, {a: 0x1000, b: 0x2000, c: 0x3000}


def test_the_fastest_is_selected_and_executes(graph, standins, monkeypatch, tmp_path):
    monkeypatch.setenv("PYGRAPH_PLAN_CACHE", str(tmp_path / "plans.sqlite"))
    g, operands = graph
    timer = FakeTimer({"beta[TILE=64]": 1.0, "alpha[TILE=128]": 3.0})
    result = g.autotune(operands, reps=5, warmup=2, timer=timer)
    assert result.best.name == "beta[TILE=64]" and result.best.time_ms == pytest.approx(1.2)
    assert result.first.name == "alpha[TILE=128]" and result.speedup == pytest.approx(3.2 / 1.2)
    assert all(w == 2 and r == 5 for _, w, r in timer.seen)
    assert g.selected_plan.name == "beta[TILE=64]" and g.selected_plan.index == 4
    standins.CALLS.clear()
    g.execute(operands)
    assert [c[:2] for c in standins.CALLS] == [("beta", {"TILE": 64})]
    assert result.recorded is not None and result.recorded.plan_name == "beta[TILE=64]"


def test_declines_at_build_are_skipped_with_their_reason(graph, standins):
    g, operands = graph
    standins.BEHAVIOUR["alpha"] = "decline_build"
    standins.BEHAVIOUR["gamma"] = "import_build"
    result = g.autotune(operands, timer=FakeTimer({"beta[TILE=128]": 2.0}), record=False)
    skipped = {t.name: t.skipped for t in result.trials if t.skipped}
    assert set(skipped) == {"alpha[TILE=128]", "gamma[TILE=128]", "alpha[TILE=64]", "gamma[TILE=64]"}
    assert "GraphNotSupportedError: alpha: cannot build" in skipped["alpha[TILE=128]"]
    assert "ImportError: gamma: its DSL is missing" in skipped["gamma[TILE=64]"]
    # the first plan that builds is the default the winner is measured against
    assert result.first.name == "beta[TILE=128]" and result.best.name == "beta[TILE=128]"
    assert result.not_recorded == "record=False"


def test_the_bound_counts_plans_that_build_per_engine(graph, standins):
    g, operands = graph
    standins.BEHAVIOUR["alpha"] = "decline_build"
    timer = FakeTimer({})
    result = g.autotune(operands, 0x9000, top=1, timer=timer, record=False)
    timed = [t.name for t in result.timed]
    assert timed == ["beta[TILE=128]", "gamma[TILE=128]"]  # one each; alpha declined both of its plans
    assert [t.name for t in result.trials if t.skipped] == ["alpha[TILE=128]", "alpha[TILE=64]"]
    assert [name for name, _, _ in timer.seen] == timed


def test_the_backend_entries_are_bounded_apart(standins, fake_backend):
    fake = fake_backend({"A": [(7, {}), (8, {}), (9, {})], "FALLBACK": [(10, {})]})
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    kinds = [g.selected_plan.kind]
    operands = {a: 0x1000, b: 0x2000, c: 0x3000}
    result = g.autotune(operands, 0x9000, top=1, backend_top=2, timer=FakeTimer({}), record=False)
    by_group = {}
    for t in result.timed:
        by_group.setdefault(t.group, []).append(t.engine_id)
    assert by_group == {"alpha": [ALPHA], "beta": [BETA], "gamma": [GAMMA], "backend": [7, 8]}
    assert kinds == ["python"] and fake.built == [0, 1]  # built through the backend's own list
    assert [ptrs for ptrs, _, _ in fake.executed][:1] == [[0x1000, 0x2000, 0x3000]]


def test_head_bound_adds_the_backends_first_entry_as_the_anchor(standins, fake_backend):
    fake_backend({"A": [(7, {})]})
    g, a, b, c = matmul_graph()
    trials = time_plans(g, {a: 0x1000, b: 0x2000, c: 0x3000}, bound=head_bound(2), timer=FakeTimer({}))
    assert [(t.name, t.kind) for t in trials] == [
        ("alpha[TILE=128]", "python"),
        ("beta[TILE=128]", "python"),
        ("eng7", "backend"),
    ]


def test_a_workspace_callable_is_sized_for_the_largest_need(graph):
    g, operands = graph
    asked = []
    g.autotune(operands, lambda n: asked.append(n) or 0x9000, timer=FakeTimer({}), record=False)
    assert asked == [256]  # gamma's workspace


def test_a_plan_that_refuses_to_run_is_skipped(graph):
    g, operands = graph  # gamma needs 256 bytes of workspace; none is passed
    result = g.autotune(operands, timer=FakeTimer({"gamma[TILE=128]": 0.5}), record=False)
    gamma = [t for t in result.trials if t.group == "gamma"]
    assert all("WorkspaceTooSmallError" in t.skipped for t in gamma)
    assert result.best.group != "gamma"


def test_nothing_timed_names_every_reason(graph, standins):
    g, operands = graph
    for name in ("alpha", "beta", "gamma"):
        standins.BEHAVIOUR[name] = "decline_build"
    with pytest.raises(
        GraphNotSupportedError, match=r"autotune\(\): no plan of graph 'mm' could be timed"
    ) as info:
        g.autotune(operands, timer=FakeTimer({}))
    assert "#5 gamma[TILE=64]: declined at build" in str(info.value)


@pytest.mark.parametrize("kw", [{"top": 0}, {"top": True}, {"backend_top": -1}, {"reps": 0}, {"warmup": -1}])
def test_bad_bounds_are_refused(graph, kw):
    g, operands = graph
    with pytest.raises(OpInputError, match="must be an int"):
        g.autotune(operands, timer=FakeTimer({}), **kw)


def test_the_default_timer_says_it_needs_a_cuda_device():
    with pytest.raises(TimerUnavailableError, match=r"graph.autotune\(\): the default timer needs") as info:
        CudaEventTimer("graph.autotune()")
    assert "pass timer=" in str(info.value)


def test_bounds_describe_themselves():
    assert (
        per_engine_bound(8, 2).what
        == "the first 8 buildable plans per engine and the first 2 of the backend's"
    )
    assert per_engine_bound(None, None).what == "all buildable plans per engine and all of the backend's"


def test_a_timer_that_returns_nothing_is_refused(graph):
    g, operands = graph
    with pytest.raises(
        OpInputError, match=r"autotune\(\): the timer returned no times for alpha\[TILE=128\]"
    ):
        g.autotune(operands, timer=lambda run, **kw: [], record=False)
