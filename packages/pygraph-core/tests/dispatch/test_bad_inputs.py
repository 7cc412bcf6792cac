"""Every bad input through the public API, one row each: the typed error it raises (a subclass of the
builtin a classic caller catches), raised at the call that introduced it, with a message that names
the thing (call, tensor, node, knob, index, env var, file) and the value seen.

A row is (the call, the exception type, fragments its message must hold). The call receives a
`World`: graphs of the stand-in family with a fake backend, fresh per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from dispatch_helpers import BETA, matmul_graph

import pygraph
from pygraph import data_type as dt
from pygraph.errors import (
    CacheWarning,
    ConfigurationWarning,
    DeserializationError,
    GraphNotSupportedError,
    GraphStateError,
    InvalidGraphError,
    KnobError,
    KnobTypeError,
    NotFoundError,
    OpInputError,
    PlanIndexError,
    UnknownEngineError,
    UnknownKnobError,
)
from pygraph.execution.errors import (
    DuplicateOperandError,
    HandleError,
    OperandAddressError,
    OperandDtypeError,
    OperandMissingError,
    OperandTypeError,
    ShapeOverrideError,
    UnknownOperandError,
)

BACKEND = {"A": [(8, {"K": 1})], "FALLBACK": []}


@dataclasses.dataclass
class World:
    tmp_path: Any
    monkeypatch: Any
    fake_backend: Any

    def graph(self, name: str = "mm"):
        """An unplanned stand-in matmul graph: (g, a, b, c)."""
        return matmul_graph(name)

    def planned(self, name: str = "mm"):
        g, a, b, c = matmul_graph(name)
        g.create_execution_plans()
        return g, a, b, c

    def built(self, name: str = "mm"):
        g, a, b, c = self.planned(name)
        g.build_plans()
        return g, a, b, c

    def operands(self, a, b, c) -> dict:
        return {a: 0x1000, b: 0x2000, c: 0x3000}


def _two_relus(g):
    x = g.tensor([4, 4], name="x")
    r = g.relu(x, name="r")
    e = g.exp(r, name="e").set_output(True)
    return x, r, e


def _half() -> pygraph.Graph:
    return pygraph.Graph("h", io_data_type=dt.HALF)


def _execute(w: World, change: Callable[[Any, Any, Any, dict], Any], workspace: Any = None, **kw: Any):
    g, a, b, c = w.built()
    values = w.operands(a, b, c)
    values = change(a, b, c, values) or values
    g.execute(values, workspace, **kw)


def _validate(build: Callable[[pygraph.Graph], Any]) -> None:
    g = _half()
    build(g)
    g.validate()


Row = tuple[Callable[[World], Any], type[BaseException], list[str]]

ROWS: dict[str, Row] = {
    # --- Graph() -------------------------------------------------------------------------------------
    "graph-name": (lambda w: pygraph.Graph(name=3), OpInputError, ["Graph()", "name", "int 3"]),
    "graph-sm-version": (lambda w: pygraph.Graph("g", sm_version="90"), OpInputError, ["Graph('g')", "sm_version", "'90'"]),
    "graph-sm-count": (lambda w: pygraph.Graph("g", sm_count=-1), OpInputError, ["sm_count", "-1"]),
    "graph-dtype": (lambda w: pygraph.Graph("g", io_data_type="FLOAT128"), OpInputError, ["Graph('g')", "io_data_type", "FLOAT128"]),
    "context-dtype": (lambda w: setattr(_half().context, "io_data_type", 3), OpInputError, ["GraphContext.io_data_type", "3"]),
    # --- tensor(), tensor_like(), tensor_scalar() ------------------------------------------------------
    "tensor-zero-dim": (lambda w: _half().tensor([0, 4], name="x"), OpInputError, ["tensor('x')", "[0, 4]", "extent 0 at axis 0"]),
    "tensor-negative-dim": (lambda w: _half().tensor([4, -64], name="x"), OpInputError, ["tensor('x')", "[4, -64]", "axis 1"]),
    "tensor-empty-dim": (lambda w: _half().tensor([], name="x"), OpInputError, ["tensor('x')", "dim []", "rank >= 1"]),
    "tensor-dim-kind": (lambda w: _half().tensor("44", name="x"), OpInputError, ["tensor('x')", "dim", "'44'"]),
    "tensor-negative-stride": (lambda w: _half().tensor([2, 4], [-4, 1], name="x"), OpInputError, ["tensor('x')", "[-4, 1]", "axis 0"]),
    "tensor-stride-rank": (lambda w: _half().tensor([2, 4], [1], name="x"), OpInputError, ["tensor('x')", "stride [1]", "dim [2, 4]"]),
    "tensor-dtype": (lambda w: _half().tensor([2], data_type="float4", name="x"), OpInputError, ["tensor('x')", "data_type", "'float4'"]),
    "tensor-uid": (lambda w: _half().tensor([2], uid=0, name="x"), OpInputError, ["uid", "'x'", "0"]),
    "tensor-uid-collision": (
        lambda w: (lambda g: (g.tensor([2], uid=5, name="x"), g.tensor([2], uid=5, name="y")))(_half()),
        OpInputError,
        ["uid 5", "'y'", "'x'"],
    ),
    "tensor-name": (lambda w: _half().tensor([2], name=7), OpInputError, ["tensor()", "name", "7"]),
    "tensor-ragged-offset": (lambda w: _half().tensor([2], ragged_offset=3), OpInputError, ["ragged_offset", "3"]),
    "tensor-ragged-multiplier": (
        lambda w: _half().tensor([2], ragged_offset_multiplier=0, name="x"),
        OpInputError,
        ["tensor('x')", "ragged_offset_multiplier", "0"],
    ),
    "tensor-reordering": (lambda w: _half().tensor([2], reordering_type="F32", name="x"), OpInputError, ["reordering_type", "'F32'", "F16x16"]),
    "tensor-like-kind": (lambda w: _half().tensor_like("x"), OpInputError, ["tensor_like()", "'x'"]),
    "tensor-like-0d": (
        lambda w: _half().tensor_like(type("T", (), {"shape": (), "dtype": "float16"})()),
        OpInputError,
        ["tensor_like()", "shape []", "rank >= 1"],
    ),
    "tensor-scalar-kind": (lambda w: _half().tensor_scalar(True), OpInputError, ["tensor_scalar()", "True"]),
    "tensor-scalar-type": (lambda w: _half().tensor_scalar(1.0, "CONST"), OpInputError, ["tensor_scalar()", "scalar_type", "'CONST'"]),
    # --- the Tensor's setters --------------------------------------------------------------------------
    "set-dim-zero": (lambda w: _half().tensor([2], name="x").set_dim([3, 0]), OpInputError, ["set_dim()", "'x'", "[3, 0]", "axis 1"]),
    "set-dim-empty": (lambda w: _half().tensor([2], name="x").set_dim([]), OpInputError, ["set_dim()", "'x'", "rank >= 1"]),
    "set-stride-negative": (lambda w: _half().tensor([2], name="x").set_stride([-1]), OpInputError, ["set_stride()", "'x'", "[-1]"]),
    "set-dtype": (lambda w: _half().tensor([2], name="x").set_data_type(object), OpInputError, ["set_data_type()", "'x'"]),
    "set-name": (lambda w: _half().tensor([2], name="x").set_name(5), OpInputError, ["set_name()", "'x'", "5"]),
    "set-uid": (lambda w: _half().tensor([2], name="x").set_uid(-5), OpInputError, ["uid", "'x'", "-5"]),
    "set-ragged-offset": (lambda w: _half().tensor([2], name="x").set_ragged_offset("o"), OpInputError, ["ragged_offset", "'x'", "'o'"]),
    "set-ragged-multiplier": (
        lambda w: _half().tensor([2], name="x").set_ragged_offset_multiplier(1.5),
        OpInputError,
        ["set_ragged_offset_multiplier()", "'x'", "1.5"],
    ),
    "set-reordering": (lambda w: _half().tensor([2], name="x").set_reordering_type(9), OpInputError, ["set_reordering_type()", "'x'", "9"]),
    "tensor-unknown-attribute": (lambda w: setattr(_half().tensor([2]), "shape", (2,)), AttributeError, ["'shape'"]),
    "mutation-after-freeze": (
        lambda w: (lambda g: (g[0].create_execution_plans(), g[1].set_dim([1, 16, 64])))(w.graph()),
        GraphStateError,
        ["Tensor.dim on 'A'", "not yet frozen", "PLANNED"],
    ),
    # --- builders --------------------------------------------------------------------------------------
    "builder-rank-mismatch": (
        lambda w: (lambda g: g.matmul(g.tensor([4, 8], name="a").set_dim([1, 4, 8]).set_stride([8, 1]), g.tensor([8, 4])))(_half()),
        OpInputError,
        ["matmul()", "port 'A'", "'a'", "[1, 4, 8]", "[8, 1]", "differ in rank"],
    ),
    "builder-kwarg": (lambda w: (lambda g: g.relu(g.tensor([2]), slope=1))(_half()), OpInputError, ["relu()", "'slope'"]),
    "builder-compute-dtype": (
        lambda w: (lambda g: g.relu(g.tensor([2]), compute_data_type="f32"))(_half()),
        OpInputError,
        ["relu()", "compute_data_type", "'f32'"],
    ),
    "builder-foreign-tensor": (
        lambda w: _half().relu(_half().tensor([2], name="foreign")),
        OpInputError,
        ["relu()", "'input'", "'foreign'", "another graph"],
    ),
    # --- validate() --------------------------------------------------------------------------------------
    "validate-empty": (lambda w: _half().validate(), InvalidGraphError, ["validate()", "graph 'h'", "no node"]),
    "validate-no-output": (lambda w: _validate(lambda g: g.relu(g.tensor([4]))), InvalidGraphError, ["validate()", "'h'", "no output"]),
    "validate-virtual-input": (
        lambda w: _validate(lambda g: g.relu(g.tensor([4], is_virtual=True, name="v"), name="r").set_output(True)),
        InvalidGraphError,
        ["validate()", "tensor 'v'", "node 'r'", "virtual"],
    ),
    "validate-cycle": (
        lambda w: _validate(lambda g: (lambda x, r, e: g.nodes[0].inputs.__setitem__("input", e))(*_two_relus(g))),
        InvalidGraphError,
        ["validate()", "cycle", "'e' -> 'r' -> 'e'"],
    ),
    "validate-foreign-port": (
        lambda w: _validate(lambda g: (_two_relus(g), g.nodes[0].inputs.__setitem__("input", _half().tensor([4], name="z")))),
        InvalidGraphError,
        ["validate()", "port 'input'", "node 'r'", "'z'", "graph 'h'"],
    ),
    "validate-non-tensor-port": (
        lambda w: _validate(lambda g: (_two_relus(g), g.nodes[0].inputs.__setitem__("input", 4))),
        InvalidGraphError,
        ["validate()", "port 'input'", "node 'r'", "holds 4"],
    ),
    "validate-rank-mismatch": (
        lambda w: _validate(lambda g: _two_relus(g)[0].set_stride([4, 1]).set_dim([1, 4, 4])),
        InvalidGraphError,
        ["validate()", "tensor 'x'", "node 'r'", "[1, 4, 4]", "[4, 1]"],
    ),
    "validate-two-producers": (
        lambda w: _validate(lambda g: (lambda x, r, e: g.nodes[1].outputs.__setitem__("OUT_0", r))(*_two_relus(g))),
        InvalidGraphError,
        ["validate()", "tensor 'r::OUT_0'", "node 'r'", "node 'e'", "one producer"],
    ),
    # --- lookups -----------------------------------------------------------------------------------------
    "find-tensor-name": (lambda w: w.graph()[0].find_tensor("Z"), NotFoundError, ["find_tensor()", "'mm'", "'Z'"]),
    "find-tensor-uid": (lambda w: w.graph()[0].find_tensor(99), NotFoundError, ["find_tensor()", "uid 99", "uids: [1, 2, 3]"]),
    "find-tensor-kind": (lambda w: w.graph()[0].find_tensor(1.5), OpInputError, ["find_tensor()", "1.5"]),
    "find-tensor-ambiguous": (
        lambda w: (lambda g: (g.tensor([2], name="d"), g.tensor([2], name="d"), g.find_tensor("d")))(_half()),
        OpInputError,
        ["find_tensor()", "'d'", "ambiguous", "uids 1, 2"],
    ),
    "get-node": (lambda w: w.graph()[0].get_node("nope"), NotFoundError, ["get_node()", "'nope'", "nodes: mm"]),
    "backend-attribute": (lambda w: w.graph()[0].no_such_method, AttributeError, ["'mm'", "'no_such_method'"]),
    # --- planning ----------------------------------------------------------------------------------------
    "plan-mode": (lambda w: w.graph()[0].create_execution_plans(["A", "Z"]), OpInputError, ["create_execution_plans()", "mode 'Z'", "FALLBACK"]),
    "plan-modes-kind": (lambda w: w.graph()[0].create_execution_plans(5), OpInputError, ["create_execution_plans()", "modes", "5"]),
    "plan-twice": (
        lambda w: w.planned()[0].create_execution_plans(),
        GraphStateError,
        ["create_execution_plans()", "'mm'", "PLANNED", "once per graph"],
    ),
    "plan-nothing-serves": (
        lambda w: (
            w.fake_backend({}, decline=("A", "FALLBACK"), engine_count=0),
            (lambda g: (g.deselect_engines(["alpha", "beta", "gamma"]), g.create_execution_plans()))(w.graph()[0]),
        ),
        GraphNotSupportedError,
        ["no plan serves graph 'mm'", "alpha", "deselected"],
    ),
    "replay-unknown-knob": (lambda w: w.graph()[0].create_execution_plan(BETA, {"TILES": 64}), UnknownKnobError, ["create_execution_plan()", "beta", "'TILES'", "64"]),
    "replay-knob-value": (lambda w: w.graph()[0].create_execution_plan(BETA, {"TILE": 96}), KnobError, ["create_execution_plan()", "TILE=96", "128, 64"]),
    "replay-knobs-kind": (lambda w: w.graph()[0].create_execution_plan(BETA, ["TILE"]), KnobTypeError, ["create_execution_plan()", "beta", "['TILE']"]),
    "replay-engine-id": (lambda w: w.graph()[0].create_execution_plan(20950, {}), UnknownEngineError, ["create_execution_plan()", "20950", "'standin'"]),
    "replay-engine-id-kind": (lambda w: w.graph()[0].create_execution_plan("beta", {}), OpInputError, ["create_execution_plan()", "'beta'"]),
    "replay-negative-id": (lambda w: w.graph()[0].create_execution_plan(-9, {}), UnknownEngineError, ["create_execution_plan()", "-9"]),
    "select-before-planning": (lambda w: w.graph()[0].select_plan(0), GraphStateError, ["select_plan()", "'mm'", "BUILDING"]),
    "select-out-of-range": (lambda w: w.planned()[0].select_plan(99), PlanIndexError, ["select_plan()", "99", "plan(s)"]),
    "select-kind": (lambda w: w.planned()[0].select_plan("0"), OpInputError, ["select_plan()", "'0'"]),
    "name-at-index": (lambda w: w.planned()[0].get_plan_name_at_index(-1), PlanIndexError, ["get_plan_name_at_index()", "-1"]),
    "knobs-at-index": (lambda w: w.planned()[0].get_engine_and_knobs_at_index(2.0), OpInputError, ["get_engine_and_knobs_at_index()", "2.0"]),
    "build-at-index": (lambda w: w.planned()[0].build_plan_at_index(99), PlanIndexError, ["build_plan_at_index()", "99"]),
    "workspace-at-index": (lambda w: w.planned()[0].get_workspace_size_plan_at_index(99), PlanIndexError, ["get_workspace_size_plan_at_index()", "99"]),
    "execute-at-index": (
        lambda w: (lambda g, a, b, c: g.execute_plan_at_index(w.operands(a, b, c), index=99))(*w.planned()),
        PlanIndexError,
        ["execute_plan_at_index()", "99"],
    ),
    "build-plans-policy": (lambda w: w.planned()[0].build_plans("FASTEST"), OpInputError, ["build_plans()", "'FASTEST'", "HEURISTICS_CHOICE"]),
    "build-policy": (lambda w: w.graph()[0].build(policy=3), OpInputError, ["build()", "policy 3"]),
    "build-plans-before-planning": (lambda w: w.graph()[0].build_plans(), GraphStateError, ["build_plans()", "'mm'", "create_execution_plans()"]),
    "deselect-engines": (lambda w: w.graph()[0].deselect_engines([3]), OpInputError, ["deselect_engines()", "3"]),
    "deselect-workspace": (lambda w: w.graph()[0].deselect_workspace_greater_than(-1), OpInputError, ["deselect_workspace_greater_than()", "-1"]),
    "deselect-workspace-kind": (lambda w: w.graph()[0].deselect_workspace_greater_than("1MB"), OpInputError, ["deselect_workspace_greater_than()", "'1MB'"]),
    "selected-before-planning": (lambda w: w.graph()[0].selected_plan, GraphStateError, ["selected_plan", "'mm'", "planned"]),
    "entries-before-planning": (lambda w: w.graph()[0].backend_plan_entries(), GraphStateError, ["backend_plan_entries()", "'mm'"]),
    "check-support-before-planning": (lambda w: w.graph()[0].check_support(), GraphStateError, ["check_support()", "'mm'"]),
    "workspace-before-planning": (lambda w: w.graph()[0].get_workspace_size(), GraphStateError, ["get_workspace_size()", "'mm'"]),
    "build-op-graph-before-validate": (lambda w: w.graph()[0].build_operation_graph(), GraphStateError, ["build_operation_graph()", "validate()"]),
    # --- execute() ------------------------------------------------------------------------------------------
    "execute-none": (lambda w: w.built()[0].execute(None), OperandTypeError, ["execute()", "mapping", "NoneType None"]),
    "execute-list": (lambda w: w.built()[0].execute([0x1000, 0x2000]), OperandTypeError, ["execute()", "mapping", "list"]),
    "execute-null-address": (lambda w: _execute(w, lambda a, b, c, v: v.update({a: 0})), OperandAddressError, ["tensor 'A'", "address 0"]),
    "execute-negative-address": (lambda w: _execute(w, lambda a, b, c, v: v.update({b: -1})), OperandAddressError, ["tensor 'B'", "address -1"]),
    "execute-duplicate": (
        lambda w: _execute(w, lambda a, b, c, v: v.update({"A": 0x1000})),
        DuplicateOperandError,
        ["execute()", "'A'", "twice", "the Tensor 'A'", "name 'A'"],
    ),
    "execute-duplicate-uid": (
        lambda w: _execute(w, lambda a, b, c, v: v.update({c.uid: 0x3000})),
        DuplicateOperandError,
        ["'C'", "twice", "uid 3"],
    ),
    "execute-foreign-tensor": (
        lambda w: _execute(w, lambda a, b, c, v: {**{k: x for k, x in v.items() if k is not a}, w.graph("other")[1]: 0x1000}),
        UnknownOperandError,
        ["tensor 'A'", "uid 1", "graph 'other'"],
    ),
    "execute-unknown-key": (lambda w: _execute(w, lambda a, b, c, v: v.update({"Z": 0x9000})), UnknownOperandError, ["'Z'", "operands: A, B, C"]),
    "execute-missing": (lambda w: _execute(w, lambda a, b, c, v: v.pop(c) and None), OperandMissingError, ["execute()", "'C'"]),
    "execute-not-a-buffer": (lambda w: _execute(w, lambda a, b, c, v: v.update({b: object()})), OperandDtypeError, ["tensor 'B'", "not a buffer"]),
    "execute-workspace-address": (lambda w: _execute(w, lambda a, b, c, v: None, workspace=-8), OperandAddressError, ["workspace", "-8"]),
    "execute-handle": (lambda w: _execute(w, lambda a, b, c, v: None, handle="h"), HandleError, ["handle 'h'"]),
    "execute-overrides": (
        lambda w: _execute(w, lambda a, b, c, v: None, override_uids=[1], override_shapes=[[1, 8, 32]], override_strides=[[256, 32, 1]]),
        ShapeOverrideError,
        ["plan alpha[TILE=128]", "override"],
    ),
    # --- serialization ----------------------------------------------------------------------------------------
    "deserialize-empty": (lambda w: _half().deserialize(b""), DeserializationError, ["deserialize()", "empty"]),
    "deserialize-kind": (lambda w: _half().deserialize(3.5), DeserializationError, ["deserialize()", "float 3.5"]),
    "deserialize-truncated": (
        lambda w: (lambda p: _half().deserialize(p[: len(p) // 2]))(
            _two_relus_serialized()
        ),
        DeserializationError,
        ["deserialize()", "not whole JSON", "truncated"],
    ),
    "deserialize-into-non-empty": (
        lambda w: (lambda g: (g.tensor([2]), g.deserialize(_two_relus_serialized())))(_half()),
        GraphStateError,
        ["deserialize()", "'h'", "not empty"],
    ),
    # --- the engine API ----------------------------------------------------------------------------------------
    "engine-for-id": (lambda w: pygraph.engines.engine_for_id(20950), UnknownEngineError, ["20950", "'standin'"]),
    "engine-for-backend-id": (lambda w: pygraph.engines.engine_for_id(8), OpInputError, ["engine id 8", "backend id"]),
    "engine-for-id-kind": (lambda w: pygraph.engines.engine_for_id("gemm"), OpInputError, ["engine id", "'gemm'"]),
    "family-by-name": (lambda w: pygraph.engines.family_by_name("gemmm"), NotFoundError, ["'gemmm'", "standin"]),
    "family-engine-name": (lambda w: pygraph.engines.family_by_name("standin").id_of("delta"), NotFoundError, ["'standin'", "'delta'", "alpha"]),
    "plan-config-id": (lambda w: pygraph.PlanConfig("20900"), OpInputError, ["PlanConfig", "engine_id", "'20900'"]),
    "plan-config-knobs": (lambda w: pygraph.PlanConfig(20900, [("TILE", 64)]), KnobTypeError, ["PlanConfig(20900)", "knobs", "[('TILE', 64)]"]),
    "validate-knobs-engine": (
        lambda w: __import__("pygraph.engines.knobs", fromlist=["x"]).validate_knobs(object(), {}),
        OpInputError,
        ["create_execution_plan()", "engine id (int) or a python engine"],
    ),
    # --- issue 52, items 5 and 6: frozen means frozen (the graph's settings, 64-bit extents and addresses) ---
    "sm-version-after-freeze": (
        lambda w: setattr(w.planned()[0], "sm_version", 80),
        GraphStateError,
        ["setting Graph.sm_version", "graph 'mm'", "not yet frozen", "it is PLANNED"],
    ),
    "sm-count-after-freeze": (
        lambda w: setattr(w.planned()[0], "sm_count", 132),
        GraphStateError,
        ["setting Graph.sm_count", "graph 'mm'", "not yet frozen", "it is PLANNED"],
    ),
    "override-flag-after-freeze": (
        lambda w: setattr(w.planned()[0], "is_override_shape_enabled", True),
        GraphStateError,
        ["setting Graph.is_override_shape_enabled", "graph 'mm'", "it is PLANNED"],
    ),
    "dynamic-flag-after-freeze": (
        lambda w: setattr(w.planned()[0], "is_dynamic_shape_enabled", True),
        GraphStateError,
        ["setting Graph.is_dynamic_shape_enabled", "graph 'mm'", "it is PLANNED"],
    ),
    "sm-version-setter": (lambda w: setattr(w.graph()[0], "sm_version", 9.0), OpInputError, ["Graph.sm_version", "graph 'mm'", "9.0"]),
    "tensor-dim-beyond-int64": (lambda w: _half().tensor([2**63, 4], name="x"), OpInputError, ["tensor('x')", "9223372036854775808", "axis 0", "int64"]),
    "tensor-elements-beyond-int64": (
        lambda w: _half().tensor([2**32, 2**32], name="x"),
        OpInputError,
        ["tensor('x')", "[4294967296, 4294967296]", "18446744073709551616 elements", "int64"],
    ),
    "tensor-stride-beyond-int64": (lambda w: _half().tensor([2, 4], [2**63, 1], name="x"), OpInputError, ["tensor('x')", "stride 9223372036854775808", "int64"]),
    "tensor-span-beyond-int64": (
        lambda w: _half().tensor([3, 2], [2**62, 1], name="x"),
        OpInputError,
        ["tensor('x')", "[3, 2]", "[4611686018427387904, 1]", "offset 9223372036854775809", "int64"],
    ),
    "set-dim-beyond-int64": (lambda w: _half().tensor([2], name="x").set_dim([2**64]), OpInputError, ["set_dim()", "'x'", "18446744073709551616", "int64"]),
    "set-stride-beyond-int64": (lambda w: _half().tensor([2], name="x").set_stride([2**63]), OpInputError, ["set_stride()", "'x'", "9223372036854775808", "int64"]),
    "builder-span-beyond-int64": (
        lambda w: (lambda g: g.relu(g.tensor([4, 4], name="x").set_stride([2**62, 1])))(_half()),
        OpInputError,
        ["relu()", "port 'input'", "'x'", "[4611686018427387904, 1]", "int64"],
    ),
    "validate-span-beyond-int64": (
        lambda w: _validate(lambda g: _two_relus(g)[0].set_stride([2**62, 1])),
        InvalidGraphError,
        ["validate()", "tensor 'x'", "node 'r'", "[4611686018427387904, 1]", "int64"],
    ),
    "execute-address-beyond-64-bits": (
        lambda w: _execute(w, lambda a, b, c, v: v.update({a: 2**64})),
        OperandAddressError,
        ["tensor 'A'", "bare address 18446744073709551616", "64 bits"],
    ),
    "execute-workspace-beyond-64-bits": (
        lambda w: _execute(w, lambda a, b, c, v: None, workspace=2**64),
        OperandAddressError,
        ["workspace", "bare address 18446744073709551616", "64 bits"],
    ),
}  # fmt: skip


def _two_relus_serialized() -> bytes:
    """An IR payload (`dumps` writes one for any graph; `serialize()` only for a python-only one)."""
    from pygraph.ir import serialize

    g = _half()
    _two_relus(g)
    return serialize.dumps(g)


@pytest.mark.parametrize("case", list(ROWS))
def test_bad_input(standins, fake_backend, tmp_path, monkeypatch, case):
    fake_backend(BACKEND)
    call, error, fragments = ROWS[case]
    with pytest.raises(error) as info:
        call(World(tmp_path, monkeypatch, fake_backend))
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
    assert type(info.value).__module__.startswith("pygraph") or error is AttributeError, (
        f"{case}: raised the builtin {type(info.value).__name__}, not one of pygraph's types"
    )


BUILTINS = (ValueError, TypeError, RuntimeError, KeyError, IndexError, ImportError, AttributeError)


def test_every_row_raises_a_subclass_of_a_builtin_a_caller_catches():
    for case, (_call, error, _fragments) in ROWS.items():
        assert issubclass(error, BUILTINS), case


# --- the environment and the disk cache: warnings, once, and the call goes on ---------------------------


def _opted_in(w: World, value: str) -> dict:
    from pygraph.engines.manifest import EngineFamily, EngineSlot

    w.monkeypatch.setenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", value)
    family = EngineFamily(
        "young",
        29000,
        "pygraph_standins",
        {"young_sm90": EngineSlot(0, impl=("m", "C"), opt_in=True)},
        ("X",),
    )
    return pygraph.engines.offered_ids(family)


WARNING_ROWS = {
    "opt-in-unknown-name": (
        lambda w: _opted_in(w, "alpah"),
        ConfigurationWarning,
        ["PYGRAPH_ENABLE_OPT_IN_ENGINES='alpah'", "'alpah' names no engine or family", "ignored"],
    ),
    "opt-in-garbage": (
        lambda w: _opted_in(w, "all engines!"),
        ConfigurationWarning,
        ["PYGRAPH_ENABLE_OPT_IN_ENGINES='all engines!'", "cannot be an engine or family name"],
    ),
    "cache-dir-is-a-file": (
        lambda w: (
            (w.tmp_path / "f").write_text("x"),
            w.monkeypatch.setenv("PYGRAPH_TEST_CACHE_DIR", str(w.tmp_path / "f")),
            __import__("pygraph.disk_cache", fromlist=["x"]).cache_dir("t", "PYGRAPH_TEST_CACHE_DIR"),
        ),
        CacheWarning,
        ["disk cache directory", "/f", "PYGRAPH_TEST_CACHE_DIR", "a file is in the way", "going on without"],
    ),
    # --- issue 52, item 6: every PYGRAPH_* variable validated where read (garbage: warned once, unset) ---
    "cutile-tma-garbage": (
        # what kernels/gdn_cutile_fwd.py runs at import (cuTile itself is not needed to read it)
        lambda w: (
            w.monkeypatch.setenv("PYGRAPH_CUTILE_TMA", "banana"),
            __import__("pygraph.environment", fromlist=["x"]).switch("PYGRAPH_CUTILE_TMA", default=True),
        ),
        ConfigurationWarning,
        ["PYGRAPH_CUTILE_TMA='banana'", "not a switch", "1 (on) or 0 (off)", "ignored"],
    ),
    "plan-cache-switch-value": (
        lambda w: (
            w.monkeypatch.setenv("PYGRAPH_PLAN_CACHE", "yes"),
            __import__("pygraph.tuning.plan_cache", fromlist=["x"]).cache_path(),
        ),
        ConfigurationWarning,
        ["PYGRAPH_PLAN_CACHE='yes'", "not a path", "'off'", "ignored"],
    ),
    "cache-dir-switch-value": (
        lambda w: (
            w.monkeypatch.setenv("PYGRAPH_TEST_CACHE_DIR", "1"),
            w.monkeypatch.setenv("PYGRAPH_CACHE_DIR", str(w.tmp_path)),  # where the cache goes instead
            __import__("pygraph.disk_cache", fromlist=["x"]).cache_dir("t", "PYGRAPH_TEST_CACHE_DIR"),
        ),
        ConfigurationWarning,
        ["PYGRAPH_TEST_CACHE_DIR='1'", "not a path", "ignored"],
    ),
    "require-arch-garbage": (
        # what the repository's conftest.py reads when a GPU-marked test lacks its device
        lambda w: (
            w.monkeypatch.setenv("PYGRAPH_REQUIRE_ARCH", "hopper"),
            __import__("pygraph.environment", fromlist=["x"]).names(
                "PYGRAPH_REQUIRE_ARCH", ("sm90", "sm100", "sm120")
            ),
        ),
        ConfigurationWarning,
        ["PYGRAPH_REQUIRE_ARCH='hopper'", "'hopper' is not one of sm100, sm120, sm90", "ignored"],
    ),
}


@pytest.mark.parametrize("case", list(WARNING_ROWS))
def test_bad_environment(standins, fake_backend, tmp_path, monkeypatch, case):
    from pygraph import environment

    monkeypatch.setattr(environment, "_warned", set())
    environment._parse_opt_in.cache_clear()
    fake_backend(BACKEND)
    call, category, fragments = WARNING_ROWS[case]
    with pytest.warns(category) as caught:
        call(World(tmp_path, monkeypatch, fake_backend))  # goes on: planning succeeds, the cache is off
    (message,) = [str(w.message) for w in caught if issubclass(w.category, category)]
    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in {message!r}"
