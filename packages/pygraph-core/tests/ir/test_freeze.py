"""Whole-surface freeze: every public mutation path raises GraphStateError; reading still works."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.errors import GraphStateError, OpInputError
from pygraph.lifecycle import GraphState

from .conftest import build_op


def _frozen_graph():
    g, (o, _final) = build_op("gdn")
    g._freeze()
    return g, o


MUTATIONS = {
    "builder": lambda g, t: g.add(t, t),
    "tensor": lambda g, t: g.tensor([1]),
    "tensor_scalar": lambda g, t: g.tensor_scalar(1.0),
    "set_dim": lambda g, t: t.set_dim([1, 2, 3]),
    "set_stride": lambda g, t: t.set_stride([6, 3, 1]),
    "set_data_type": lambda g, t: t.set_data_type(dt.FLOAT),
    "set_name": lambda g, t: t.set_name("x"),
    "set_uid": lambda g, t: t.set_uid(999),
    "set_output": lambda g, t: t.set_output(True),
    "set_is_virtual": lambda g, t: t.set_is_virtual(False),
    "set_is_pass_by_value": lambda g, t: t.set_is_pass_by_value(True),
    "set_ragged_offset": lambda g, t: t.set_ragged_offset(t),
    "set_ragged_offset_multiplier": lambda g, t: t.set_ragged_offset_multiplier(2),
    "set_reordering_type": lambda g, t: t.set_reordering_type("NONE"),
    "attr_dim": lambda g, t: setattr(t, "dim", (1,)),
    "attr_unknown": lambda g, t: setattr(t, "whatever", 1),
    "node_attr": lambda g, t: setattr(g.nodes[0], "name", "x"),
    "node_inputs": lambda g, t: g.nodes[0].inputs.__setitem__("q", t),
    "node_outputs": lambda g, t: g.nodes[0].outputs.__setitem__("O", t),
    "node_params": lambda g, t: g.nodes[0].params.__setitem__("scale", 0.5),
    "node_params_del": lambda g, t: g.nodes[0].params.__delitem__("scale"),
    "context": lambda g, t: setattr(g.context, "io_data_type", dt.FLOAT),
    # the graph's settings: planning read them, so a later write would silently not apply
    "graph_sm_version": lambda g, t: setattr(g, "sm_version", 80),
    "graph_sm_count": lambda g, t: setattr(g, "sm_count", 132),
    "graph_is_override_shape_enabled": lambda g, t: setattr(g, "is_override_shape_enabled", True),
    "graph_is_dynamic_shape_enabled": lambda g, t: setattr(g, "is_dynamic_shape_enabled", True),
    "graph_is_cuda_graph_replay_expected": lambda g, t: setattr(g, "is_cuda_graph_replay_expected", True),
    "graph_kernel_cache": lambda g, t: setattr(g, "kernel_cache", object()),
    "graph_device_property": lambda g, t: setattr(g, "device_property", object()),
    "graph_cuda_graph_retention": lambda g, t: setattr(g, "cuda_graph_retention", "NONE"),
}

SETTINGS = [path.removeprefix("graph_") for path in MUTATIONS if path.startswith("graph_")]


@pytest.mark.parametrize("path", list(MUTATIONS))
def test_mutation_after_freeze_raises(path: str) -> None:
    g, o = _frozen_graph()
    before = g.inspect()
    with pytest.raises(RuntimeError, match="frozen") as info:
        MUTATIONS[path](g, o)
    assert isinstance(info.value, GraphStateError)
    assert g.inspect() == before


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_graph_setting_written_after_the_freeze_names_itself_and_keeps_its_value(setting: str) -> None:
    g, _ = build_op("gdn")
    before = getattr(g, setting)
    g._freeze()
    with pytest.raises(GraphStateError) as info:
        MUTATIONS[f"graph_{setting}"](g, None)
    assert str(info.value).startswith(f"setting Graph.{setting}: needs graph {g.name!r} not yet frozen")
    assert "it is FROZEN" in str(info.value)
    assert getattr(g, setting) == before


def test_graph_settings_are_writable_before_the_freeze_and_checked() -> None:
    g, _ = build_op("gdn")
    g.validate()  # python-only: stays mutable
    g.sm_version, g.sm_count, g.is_override_shape_enabled = 90, 132, True
    assert (g.sm_version, g.sm_count, g.is_override_shape_enabled) == (90, 132, True)
    assert g.state is GraphState.BUILDING  # a write invalidates validate(), as every other mutation does
    with pytest.raises(
        OpInputError, match=r"setting Graph\.sm_count on graph .*: sm_count must be an int >= 0.* got -1"
    ):
        g.sm_count = -1
    assert g.sm_count == 132


def test_the_handle_stays_writable_after_the_freeze() -> None:
    # execute() runs on the graph's handle unless the call passes one: a frozen graph may move to another
    g, _ = build_op("gdn")
    g._freeze()
    handle = object()
    g.handle = handle
    assert g.handle is handle


def test_dims_are_tuples_and_everything_stays_readable() -> None:
    g, o = _frozen_graph()
    assert isinstance(o.dim, tuple) and isinstance(o.stride, tuple)
    assert g.nodes[0].params["output_final_state"] is False
    assert g.find_tensor(o.uid) is o and g.inspect()["state"] == "FROZEN"


def test_mutation_after_python_only_validate_invalidates() -> None:
    g, (o, _) = build_op("gdn")
    g.validate()
    assert g.state is GraphState.VALIDATED
    o.set_output(True)
    assert g.state is GraphState.BUILDING
    g.validate()
    g.nodes[0].params["scale"] = 0.5
    assert g.state is GraphState.BUILDING


def test_advance_is_forward_only() -> None:
    g, _ = build_op("gdn")
    with pytest.raises(GraphStateError):
        g._advance(GraphState.VALIDATED)
    g._freeze()
    g._freeze()
    g._advance(GraphState.PLANNED)
    g._advance(GraphState.BUILT)
    with pytest.raises(GraphStateError, match="cannot go back"):
        g._advance(GraphState.PLANNED)


def test_build_operation_graph_needs_validate() -> None:
    g, _ = build_op("gdn")
    with pytest.raises(GraphStateError, match="validate"):
        g.build_operation_graph()
    g.validate()
    g.build_operation_graph()  # python-only: nothing to build
    assert g.lowered is None


def test_lowering_freezes(fake_backend) -> None:
    g, c = build_op("matmul")
    g.validate()
    assert g.state is GraphState.FROZEN and g.lowered is not None
    with pytest.raises(GraphStateError, match="frozen"):
        c.set_dim([1, 1, 1])
    with pytest.raises(GraphStateError, match="frozen"):
        pygraph.Graph.relu(g, c)
