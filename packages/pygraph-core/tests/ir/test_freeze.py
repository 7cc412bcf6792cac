"""Whole-surface freeze: every public mutation path raises GraphStateError; reading still works."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.errors import GraphStateError
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
}


@pytest.mark.parametrize("path", list(MUTATIONS))
def test_mutation_after_freeze_raises(path: str) -> None:
    g, o = _frozen_graph()
    before = g.inspect()
    with pytest.raises(RuntimeError, match="frozen") as info:
        MUTATIONS[path](g, o)
    assert isinstance(info.value, GraphStateError)
    assert g.inspect() == before


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
