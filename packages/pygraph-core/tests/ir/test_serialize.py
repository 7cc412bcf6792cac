"""JSON round trip of python-only graphs."""

from __future__ import annotations

import pygraph
from pygraph import data_type as dt

from .conftest import build_op


def test_python_only_round_trip() -> None:
    g, (o, _final) = build_op("gdn")
    g.nodes[0].params["scale"] = 0.25
    o.set_output(True).set_stride([64, 16, 1])
    payload = g.serialize()
    assert isinstance(payload, bytes)
    h = pygraph.Graph("restored")
    h.deserialize(payload)
    assert h.inspect()["tensors"] == g.inspect()["tensors"]
    assert h.inspect()["nodes"] == g.inspect()["nodes"]
    restored = h.find_tensor(o.uid)
    assert restored.stride_assigned and restored.producer is h.nodes[0]
    assert h.nodes[0].params["scale"] == 0.25 and h.nodes[0].type is pygraph.NodeType.GDN
    assert h.context.io_data_type is dt.HALF
    h.add(restored, restored)  # the restored graph is a normal, mutable graph


def test_enums_round_trip() -> None:
    g = pygraph.Graph("e")
    x = g.tensor([2, 8], data_type=dt.FLOAT)
    g.reduction(x, pygraph.reduction_mode.AMAX).set_dim([2, 1])
    g.slice(x, [slice(0, 1), slice(None, None, 2)])
    _, _ = build_op("gdn", g)
    h = pygraph.Graph("e2")
    h.deserialize(g.serialize())
    assert h.nodes[0].params["mode"] is pygraph.reduction_mode.AMAX
    assert h.nodes[1].params["slices"] == (slice(0, 1), slice(None, None, 2))
