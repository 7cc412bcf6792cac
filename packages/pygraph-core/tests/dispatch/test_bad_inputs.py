"""Every bad input through the public API, one row each: the typed error it raises (a subclass of the
builtin a classic caller catches), raised at the call that introduced it, with a message that names
the thing (call, tensor, node, knob, index, env var, file) and the value seen.

A row is (the call, the exception type, fragments its message must hold). The call receives a
`World`: graphs of the stand-in family with a fake backend, fresh per row.
"""

from __future__ import annotations

import dataclasses
import json
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
    OperandGeometryError,
    OperandMissingError,
    OperandTypeError,
    ShapeOverrideError,
    UnknownOperandError,
)
from pygraph.tuning import PlanCacheWarning

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
    # --- geometry: nothing a caller declares can make a kernel write outside a buffer (issue 52, item 1)
    "validate-output-dims": (
        lambda w: (lambda g, a, b, c: (c.set_dim([1, 16, 4]), g.validate()))(*w.graph()),
        InvalidGraphError,
        ["validate()", "output 'C'", "node 'mm'", "declared dim [1, 16, 4]", "imply [1, 16, 8]"],
    ),
    "validate-la-output-dims": (
        lambda w: (lambda g, o: (o.set_dim([16, 2, 64]), g.validate()))(*_gdn(64, 2, 2)),
        InvalidGraphError,
        ["validate()", "output 'O'", "(gdn)", "declared dim [16, 2, 64]", "imply [64, 2, 64]"],
    ),
    "builder-la-k-heads": (lambda w: _gdn(64, 4, 4, k_heads=2), OpInputError, ["gdn()", "port 'k'", "[64, 2, 64]", "[64, 4, 64]"]),
    "builder-la-heads-divide": (lambda w: _gdn(64, 3, 2), OpInputError, ["gdn()", "heads 3", "v heads 2", "divide"]),
    "builder-la-state-dims": (
        lambda w: _gdn(64, 2, 2, state=[1, 2, 64, 32]),
        OpInputError,
        ["gdn()", "port 'initial_state'", "[1, 2, 64, 32]", "imply [1, 2, 64, 64]"],
    ),
    "builder-la-max-seqlen": (
        lambda w: _gdn(64, 2, 2, max_seqlen=0),
        OpInputError,
        ["gdn()", "attribute 'max_seqlen'", "got 0", "int >= 1"],
    ),
    "builder-sdpa-v-keys": (
        lambda w: _sdpa_qkv([1, 4, 64, 64], [1, 2, 64, 64], [1, 2, 48, 64]),
        OpInputError,
        ["sdpa()", "port 'k'", "port 'v'", "[1, 2, 48, 64]", "differ in batch, heads or keys"],
    ),
    "builder-sdpa-gqa-heads": (
        lambda w: _sdpa_qkv([1, 6, 64, 64], [1, 4, 64, 64], [1, 4, 64, 64]),
        OpInputError,
        ["sdpa()", "6 heads", "'k' 4", "multiple"],
    ),
    "builder-sdpa-batch": (
        lambda w: _sdpa_qkv([2, 4, 64, 64], [1, 4, 64, 64], [1, 4, 64, 64]),
        OpInputError,
        ["sdpa()", "batch 2", "'k'", "1"],
    ),
    "execute-small-output": (
        lambda w: _execute(w, lambda a, b, c, v: v.update({c: _host((1, 8, 8))})),
        OperandGeometryError,
        ["execute()", "tensor 'C'", "shape [1, 8, 8]", "runs shape [1, 16, 8]", "does not hold"],
    ),
    "execute-transposed-input": (
        lambda w: _execute(w, lambda a, b, c, v: v.update({a: _host((1, 32, 16)).transpose(0, 2, 1)})),
        OperandGeometryError,
        ["execute()", "tensor 'A'", "stride [512, 1, 16]", "runs shape [1, 16, 32] stride [512, 32, 1]"],
    ),
    # --- issue 52, items 4 and 7: deserialize binds each node through the builders' rules; extents,
    # attributes and uids past int64; nesting; validate() re-checks rewired ports; the CLI's graph file
    "deserialize-missing-port": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["nodes"][0]["inputs"].pop("B"))),
        DeserializationError,
        ["deserialize()", "$.nodes[0]", "node 'mm'", "matmul(): missing required port 'B'"],
    ),
    "deserialize-list-in-single-port": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["nodes"][0]["inputs"].update(A=[1]))),
        DeserializationError,
        ["deserialize()", "$.nodes[0]", "matmul()", "port 'A' expects a pygraph.Tensor", "(Tensor(name='A'"],
    ),
    "deserialize-attribute-kind": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["nodes"][0]["params"].update(padding="x"))),
        DeserializationError,
        ["deserialize()", "$.nodes[0]", "matmul()", "attribute 'padding'", "'x'", "expected a number"],
    ),
    "deserialize-extent-int64": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["tensors"][0]["dim"].__setitem__(1, 2**70))),
        DeserializationError,
        ["deserialize()", "$.tensors[0].dim[1]", "1180591620717411303424", "does not fit int64"],
    ),
    "deserialize-elements-int64": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["tensors"][0].update(dim=[2**40, 2**40, 32]))),
        DeserializationError,
        ["deserialize()", "$.tensors[0].dim", "[1099511627776, 1099511627776, 32]", "more than 2**63 - 1 elements"],
    ),
    "deserialize-uid-int64": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["tensors"][0].update(uid=2**63))),
        DeserializationError,
        ["deserialize()", "$.tensors[0].uid", "9223372036854775808", "positive int64"],
    ),
    "deserialize-nesting": (
        lambda w: _half().deserialize(_deep_payload()),
        DeserializationError,
        ["deserialize()", "pygraph IR payload", "nests its JSON too deeply"],
    ),
    "deserialize-param-nesting": (
        lambda w: _half().deserialize(_mm_payload(lambda d: d["nodes"][0]["params"].update(padding=_nested(20)))),
        DeserializationError,
        ["deserialize()", "$.nodes[0].params.padding[0]", "nested deeper than 16 levels"],
    ),
    "deserialize-output-missing": (
        lambda w: _half().deserialize(
            _mm_payload(lambda d: (d["nodes"][0]["outputs"].update(C=None), d["tensors"][2].update(producer=None)))
        ),
        DeserializationError,
        ["deserialize()", "$.nodes[0].outputs.C", "missing", "always writes output 'C'", "node 'mm'"],
    ),
    "tensor-extent-int64": (lambda w: _half().tensor([4, 2**70], name="x"), OpInputError, ["tensor('x')", "1180591620717411303424", "axis 1", "does not fit int64"]),
    "tensor-stride-int64": (lambda w: _half().tensor([4, 2], [2**63, 1], name="x"), OpInputError, ["tensor('x')", "9223372036854775808", "axis 0", "does not fit int64"]),
    "tensor-uid-int64": (lambda w: _half().tensor([2], uid=2**63, name="x"), OpInputError, ["uid", "'x'", "9223372036854775808", "int64"]),
    "builder-attribute-kind": (
        lambda w: _sdpa(sliding_window_length="64"),
        OpInputError,
        ["sdpa()", "attribute 'sliding_window_length'", "'64'", "expected an int"],
    ),
    "builder-int-attribute-int64": (
        lambda w: _sdpa(sliding_window_length=2**70),
        OpInputError,
        ["sdpa()", "attribute 'sliding_window_length'", "1180591620717411303424", "beyond int64"],
    ),
    "builder-flag-kind": (lambda w: _sdpa(use_causal_mask="yes"), OpInputError, ["sdpa()", "attribute 'use_causal_mask'", "'yes'", "expected a bool"]),
    "validate-unwired-port": (
        lambda w: (lambda g: (g.nodes[0].inputs.__setitem__("B", None), g.validate()))(w.graph()[0]),
        OpInputError,
        ["matmul()", "node 'mm'", "required port 'B'", "not wired"],
    ),
    "validate-tuple-in-port": (
        lambda w: (lambda g, a, b, c: (g.nodes[0].inputs.__setitem__("A", (a,)), g.validate()))(*w.graph()),
        OpInputError,
        ["matmul()", "node 'mm'", "port 'A'", "takes one tensor", "(Tensor(name='A'"],
    ),
    "validate-rewired-port-rank": (
        lambda w: (lambda g: (g.nodes[0].inputs.__setitem__("B", g.tensor([8], name="b1")), g.validate()))(w.graph()[0]),
        OpInputError,
        ["matmul()", "node 'mm'", "port 'B'", "rank >= 2", "'b1'", "[8]"],
    ),
    "cli-graph-file-missing-port": (
        lambda w: _load_file(w, "mm.json", _mm_payload(lambda d: d["nodes"][0]["inputs"].pop("B"))),
        DeserializationError,
        ["graph file", "mm.json", "deserialize()", "$.nodes[0]", "missing required port 'B'"],
    ),
    "cli-graph-file-nesting": (
        lambda w: _load_file(w, "deep.json", _deep_payload()),
        DeserializationError,
        ["graph file", "deep.json", "deserialize()", "nests its JSON too deeply"],
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


def _sdpa_qkv(q: list[int], k: list[int], v: list[int]) -> Any:
    g = _half()
    return g.sdpa(g.tensor(q, name="q"), g.tensor(k, name="k"), g.tensor(v, name="v"))


def _host(shape: tuple[int, ...]) -> Any:
    """A host buffer of ``shape`` (numpy, read through __dlpack__)."""
    import numpy as np

    return np.zeros(shape, np.float16)


def _gdn(
    t: int, h: int, hv: int, *, k_heads: int | None = None, state: list[int] | None = None, max_seqlen=None
):
    """A python-only gdn graph of one sequence (head dims 64): (graph, O)."""
    g = pygraph.Graph("la", io_data_type=dt.BFLOAT16)
    q = g.tensor([t, h, 64], name="q")
    k = g.tensor([t, k_heads or h, 64], name="k")
    v = g.tensor([t, hv, 64], name="v")
    gate = g.tensor([t, hv], name="g", data_type=dt.FLOAT)
    beta = g.tensor([t, hv], name="beta", data_type=dt.FLOAT)
    cu = g.tensor([2], name="cu_seqlens", data_type=dt.INT32)
    extra = {"initial_state": g.tensor(state, name="h0", data_type=dt.FLOAT)} if state else {}
    o, _ = g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu, max_seqlen=max_seqlen, **extra)
    return g, o


def _mm_payload(change: Callable[[dict], Any] | None = None) -> bytes:
    """The stand-in matmul graph's IR payload (nodes[0] is 'mm'; tensors A, B, C are uids 1-3),
    ``change``d."""
    from pygraph.ir import serialize

    data = json.loads(serialize.dumps(matmul_graph("mm")[0]))
    if change is not None:
        change(data)
    return json.dumps(data).encode()


def _deep_payload(depth: int = 100_000) -> bytes:
    """IR's opening, then a value nested ``depth`` lists down (json.dumps cannot write it)."""
    return b'{"format": "pygraph_ir", "version": 1, "nodes": ' + b"[" * depth + b"]" * depth + b"}"


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _sdpa(**attrs: Any) -> Any:
    g = _half()
    q, k, v = (g.tensor([1, 2, 64, 64], name=n) for n in "qkv")
    return g.sdpa(q, k, v, **attrs)


def _load_file(w: World, name: str, payload: bytes) -> Any:
    """What the CLI does with a TARGET that is a file."""
    from pygraph.examples import load_graph

    path = w.tmp_path / name
    path.write_bytes(payload)
    return load_graph(str(path))


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


# --- the caches survive their writers and trust only their user: helpers of the rows of that block at
# the end of WARNING_ROWS -------------------------------------------------------------------------------


def _autotuned(w: World):
    """`matmul_graph`'s graph autotuned (every plan 1 ms), its winner recorded in the plan cache."""
    g, a, b, c = w.graph()
    return g.autotune({a: 0x1000, b: 0x2000, c: 0x3000}, 0x9000, timer=lambda run, **kw: [1.0])


def _damaged_plan_row(w: World):
    import contextlib
    import sqlite3

    path = w.tmp_path / "plans.sqlite"
    w.monkeypatch.setenv("PYGRAPH_PLAN_CACHE", str(path))
    assert _autotuned(w).recorded.id == 1
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE pygraph_plans SET knobs = '[[\"TILE\", 64' WHERE id = 1")
    return w.planned()


def _plan_cache_not_a_file(w: World, where: str):
    if where == "device":
        w.monkeypatch.setenv("PYGRAPH_PLAN_CACHE", "/dev/null")
    else:  # the folder it names holds a directory where plans.sqlite would be
        (w.tmp_path / "folder" / "plans.sqlite").mkdir(parents=True)
        w.monkeypatch.setenv("PYGRAPH_PLAN_CACHE", str(w.tmp_path / "folder"))
    assert _autotuned(w).recorded is None


def _kernel_cache_dir(w: World, whose: str):
    import os

    folder = w.tmp_path / whose
    folder.mkdir()
    if whose == "shared":
        folder.chmod(0o777)
    else:  # another uid's: os.stat says so (a chown needs root)
        real = os.stat

        def stat(path, *args, **kwargs):
            st = real(path, *args, **kwargs)
            if isinstance(path, (str, os.PathLike)) and os.fspath(path) == str(folder):
                return os.stat_result([*st[:4], os.geteuid() + 4242, *st[5:]])
            return st

        w.monkeypatch.setattr(os, "stat", stat)
    w.monkeypatch.setenv("PYGRAPH_TEST_CACHE_DIR", str(folder))
    return __import__("pygraph.disk_cache", fromlist=["x"]).cache_dir("t", "PYGRAPH_TEST_CACHE_DIR")


def _kernel_cache_lock(w: World, how: str):
    import errno
    from pathlib import Path

    import filelock

    from pygraph.disk_cache import DiskCache

    cache = DiskCache(w.tmp_path / "entries", kind="row object", suffix=".o")
    cache.directory.mkdir()
    if how == "symlink":
        (cache.directory / "k.o.lock").symlink_to(w.tmp_path / "the-users-file")
    else:

        class Refusing:
            def __init__(self, path, **kwargs):
                self.path = path

            def acquire(self):
                raise PermissionError(errno.EACCES, "Permission denied", self.path)

        w.monkeypatch.setattr(filelock, "FileLock", Refusing)
    built = cache.fetch(
        "k", load=Path.read_bytes, build=lambda: b"obj", save=lambda obj, path: path.write_bytes(obj)
    )
    assert built == b"obj"  # built all the same


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
    # --- the caches survive their writers and trust only their user ------------------------------------
    "plan-cache-damaged-row": (
        _damaged_plan_row,
        PlanCacheWarning,
        ["plan cache", "plans.sqlite", "entry 1 (key '", "is damaged: knobs is not JSON", "is skipped"],
    ),
    "plan-cache-device": (
        lambda w: _plan_cache_not_a_file(w, "device"),
        PlanCacheWarning,
        ["plan cache /dev/null", "is not a regular file (it is a character device)", "PYGRAPH_PLAN_CACHE"],
    ),
    "plan-cache-directory": (
        lambda w: _plan_cache_not_a_file(w, "directory"),
        PlanCacheWarning,
        ["folder/plans.sqlite", "is not a regular file (it is a directory)", "PYGRAPH_PLAN_CACHE"],
    ),
    "kernel-cache-dir-shared": (
        lambda w: _kernel_cache_dir(w, "shared"),
        CacheWarning,
        [
            "disk cache directory",
            "/shared",
            "writable by group and others (mode 0o777)",
            "native code",
            "chmod 700",
        ],
    ),
    "kernel-cache-dir-another-users": (
        lambda w: _kernel_cache_dir(w, "theirs"),
        CacheWarning,
        [
            "disk cache directory",
            "/theirs",
            "is owned by uid",
            "not by this user",
            "PYGRAPH_TEST_CACHE_DIR at a directory of your own",
        ],
    ),
    "kernel-cache-lock-symlink": (
        lambda w: _kernel_cache_lock(w, "symlink"),
        CacheWarning,
        ["entries/k.o", "its lock", "k.o.lock is a symlink", "built without the cache"],
    ),
    "kernel-cache-lock-eacces": (
        lambda w: _kernel_cache_lock(w, "eacces"),
        CacheWarning,
        ["k.o.lock", "cannot be taken (PermissionError: Permission denied)", "built without the cache"],
    ),
    # --- issue 52, item 6: every PYGRAPH_* variable validated where read (garbage: warned once, unset) ---
    "cutile-tma-garbage": (
        # what common/cutile_blocks.py runs at import (cuTile itself is not needed to read it)
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
