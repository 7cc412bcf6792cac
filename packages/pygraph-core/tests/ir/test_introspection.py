"""Introspection: nodes, tensors, find_tensor, get_node, get_inputs/get_outputs, inspect(), repr."""

from __future__ import annotations

import json
import sys

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.lifecycle import GraphState


def _mm_bias_relu() -> tuple[pygraph.Graph, pygraph.Tensor, pygraph.Tensor, pygraph.Tensor]:
    g = pygraph.Graph("mbr", io_data_type=dt.HALF, compute_data_type=dt.FLOAT)
    a, b, bias = (
        g.tensor([1, 4, 8], name="A"),
        g.tensor([1, 8, 16], name="B"),
        g.tensor([1, 1, 16], name="bias"),
    )
    out = g.relu(g.bias(g.matmul(a, b, name="mm"), bias)).set_output(True)
    return g, a, b, out


def test_lookups() -> None:
    g, a, b, out = _mm_bias_relu()
    assert [n.op for n in g.nodes] == ["matmul", "bias", "relu"]
    assert g.get_node("mm").inputs["A"] is a and g.get_node("mm").inputs["B"] is b
    assert g.find_tensor("A") is a and g.find_tensor(out.uid) is out
    assert [t.name for t in g.get_inputs()] == ["A", "B", "bias"]
    assert g.get_outputs() == [out]
    with pytest.raises(KeyError):
        g.get_node("nope")
    g.tensor([1], name="A")
    with pytest.raises(ValueError, match="ambiguous"):
        g.find_tensor("A")


def test_inspect_is_plain_data_and_repr_is_json() -> None:
    g, _, _, _ = _mm_bias_relu()
    data = g.inspect()
    assert json.loads(json.dumps(data)) == data
    assert json.loads(repr(g)) == data
    assert [n["op"] for n in data["nodes"]] == ["matmul", "bias", "relu"]
    assert data["nodes"][2]["params"]["mode"] == "relu"


def test_node_surface_for_planning() -> None:
    g, _a, _, out = _mm_bias_relu()
    node = g.nodes[-1]
    assert node.type is pygraph.NodeType.POINTWISE and node.name and node.outputs["OUT_0"] is out
    assert isinstance(g.nodes, tuple) and isinstance(g.tensors, tuple)
    assert g.state is GraphState.BUILDING
    assert not g.is_python_only and g.lowered is None


def test_import_stays_light() -> None:
    import subprocess

    code = (
        "import sys, pygraph\n"
        "g = pygraph.Graph(); a = g.tensor([2, 2]); g.gdn\n"
        "g.validate.__name__\n"
        "bad = [m for m in ('torch', 'cudnn', 'cutlass', 'cuda.tile') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
