"""The first call from many threads at once: one thread plans and builds, the others wait and run its
plan. Each trial is a fresh, unplanned graph; a barrier makes the threads start together."""

from __future__ import annotations

import sys
import threading

import pytest
from dispatch_helpers import matmul_graph

THREADS, TRIALS = 12, 60


@pytest.fixture
def fast_switching():
    # switch threads every 5 us instead of 5 ms, so racing threads interleave inside the first call
    previous = sys.getswitchinterval()
    sys.setswitchinterval(5e-6)
    yield
    sys.setswitchinterval(previous)


def _race(g, call) -> list[BaseException]:
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        barrier.wait()
        try:
            call(k)
        except BaseException as exc:  # collected: any error at all fails the trial
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("entry", ["execute", "build", "create_execution_plans_then_execute"])
def test_concurrent_first_calls_plan_and_build_once(standins, fast_switching, entry):
    for trial in range(TRIALS):
        standins.reset()
        g, a, b, c = matmul_graph(f"race{trial}")

        def call(k: int, g=g, a=a, b=b, c=c) -> None:
            base = 0x100000 * (k + 1)
            if entry == "build":
                g.build()
            elif entry == "create_execution_plans_then_execute":
                try:
                    g.create_execution_plans()
                except Exception as exc:  # one thread plans; the others are told it is planned
                    if type(exc).__name__ != "GraphStateError" or "once per graph" not in str(exc):
                        raise
            g.execute({a: base, b: base + 0x10, c: base + 0x20})

        errors = _race(g, call)
        assert not errors, f"trial {trial}: {errors[:3]}"
        builds = [call for call in standins.CALLS if call[0] == "build"]
        runs = [call for call in standins.CALLS if call[0] != "build"]
        assert len(standins.ANALYZED) == 1, f"trial {trial}: analyzed {len(standins.ANALYZED)} times"
        assert len(builds) == 1, f"trial {trial}: built {len(builds)} times"
        if entry != "build":
            # every thread ran the one plan, each with its own pointers
            assert sorted(r[2] for r in runs) == sorted(
                (0x100000 * (k + 1), 0x100000 * (k + 1) + 0x10, 0x100000 * (k + 1) + 0x20)
                for k in range(THREADS)
            )
        assert len(g._planner.compiled) == 1
