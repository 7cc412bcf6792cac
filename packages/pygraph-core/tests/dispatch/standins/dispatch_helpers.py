"""Helpers of the dispatch suite: the stand-in family record, a fake backend, small graphs."""

from __future__ import annotations

import ctypes
from typing import Any

from pygraph.engines.manifest import EngineFamily, EngineSlot
from pygraph.errors import GraphNotSupportedError

BLOCK = 20900


def standin_family(*, heuristics: bool = True, analyzer: bool = True, anchors=("MATMUL",), **slots: Any):
    return EngineFamily(
        name="standin",
        engine_id=BLOCK,
        package="pygraph_standins",
        slots=slots
        or {
            "alpha": EngineSlot(0, impl=("pygraph_standins", "Alpha")),
            "beta": EngineSlot(1, impl=("pygraph_standins", "Beta")),
            "gamma": EngineSlot(2, impl=("pygraph_standins", "Gamma")),
        },
        anchors=anchors,
        analyzer=("pygraph_standins", "analyze") if analyzer else None,
        heuristics=("pygraph_standins", "recommend") if heuristics else None,
    )


ALPHA, BETA, GAMMA = BLOCK, BLOCK + 1, BLOCK + 2

# The stand-in hook's plan list for `matmul_graph` in mode A: alpha/beta/gamma at TILE=128, then the
# same at TILE=64, then (FALLBACK) each at TILE=64 again, deduplicated away.
RANKED = [
    "alpha[TILE=128]",
    "beta[TILE=128]",
    "gamma[TILE=128]",
    "alpha[TILE=64]",
    "beta[TILE=64]",
    "gamma[TILE=64]",
]


class FakeBackend:
    """A stand-in for the backend builder: per-mode configs, appends like the real one."""

    def __init__(
        self, per_mode: dict[str, list[tuple[int, dict]]], *, engine_count: int = 2, decline=(), refuse=()
    ):
        self.per_mode = per_mode
        self.engine_count = engine_count
        self.decline = set(decline)
        self.refuse = set(refuse)
        self.list: list[tuple[int, dict]] = []
        self.queries: list[str] = []
        self.built: list[int] = []
        self.executed: list[tuple[list[int], int, int]] = []
        self.deselected: list[str] = []

    def create_execution_plans(self, modes):
        (mode,) = modes
        self.queries.append(mode.name)
        if mode.name in self.decline:
            raise GraphNotSupportedError(f"no engine for mode {mode.name}")
        self.list += self.per_mode.get(mode.name, [])

    def get_execution_plan_count(self):
        return len(self.list)

    def get_engine_and_knobs_at_index(self, i):
        eid, knobs = self.list[i]
        return eid, dict(knobs)

    def get_engine_count(self):
        return self.engine_count

    def get_plan_name_at_index(self, i):
        eid, knobs = self.list[i]
        return f"eng{eid}" + "".join(f"_k{k}={v}" for k, v in sorted(knobs.items()))

    def check_support(self):
        pass

    def build_plan_at_index(self, i):
        if self.list[i][0] in self.refuse:
            raise GraphNotSupportedError(f"eng{self.list[i][0]} does not build")
        self.built.append(i)

    def build_plans(self, policy):
        self.built.append(-1)

    def get_workspace_size_plan_at_index(self, i):
        return 0

    def get_workspace_size(self):
        return 0

    def create_execution_plan(self, eid, knobs):
        self.list.append((eid, dict(knobs)))

    def deselect_engines(self, names):
        self.deselected += list(names)

    def deselect_workspace_greater_than(self, limit):
        pass

    def _execute_with_raw_ptrs(self, address, n, workspace, handle, index):
        ptrs = list((ctypes.c_uint64 * n).from_address(address))
        self.executed.append((ptrs, workspace, index))


def matmul_graph(name: str = "mm"):
    from pygraph.graph import Graph
    from pygraph.ir.dtypes import data_type

    g = Graph(name=name, io_data_type=data_type.HALF, compute_data_type=data_type.FLOAT)
    a = g.tensor(name="A", dim=[1, 16, 32], stride=[512, 32, 1], data_type=data_type.HALF)
    b = g.tensor(name="B", dim=[1, 32, 8], stride=[256, 8, 1], data_type=data_type.HALF)
    c = g.matmul(a, b, name="mm")
    c.set_output(True).set_name("C").set_data_type(data_type.HALF)
    return g, a, b, c
