"""Lowering structure, on CPU, against a recording stand-in checked with the real backend signatures."""

from __future__ import annotations

import sys

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph.errors import GraphNotSupportedError
from pygraph.lifecycle import GraphState
from pygraph.lowering.backend import UidOwnershipError, lower
from pygraph.ops import OPS

from .conftest import build_op


@pytest.mark.parametrize("name", [n for n, s in OPS.items() if s.lowering is not None])
def test_every_lowerable_op_lowers(fake_backend, name: str) -> None:
    g, _ = build_op(name)
    lowered = g._lower()
    bg = lowered.backend
    assert bg.validated and g.state is GraphState.FROZEN
    methods = [m for m, _ in bg.calls if m not in ("tensor", "tensor_scalar")]
    assert methods == [OPS[name].lowering.method]
    node = g.nodes[0]
    _, kwargs = next(c for c in bg.calls if c[0] == OPS[name].lowering.method)
    assert kwargs["name"] == node.name
    for port, value in node.inputs.items():
        if value is not None and not isinstance(value, tuple):
            assert kwargs[port].uid == value.uid
    for uid, bt in lowered.backend_tensors.items():
        assert bt.uid == uid and lowered.uid_to_tensor[uid].uid == uid


def test_tensor_attributes_and_output_layout(fake_backend) -> None:
    g = pygraph.Graph(
        "mbr",
        io_data_type=dt.HALF,
        intermediate_data_type=dt.FLOAT,
        compute_data_type=dt.FLOAT,
        sm_version=90,
    )
    a = g.tensor([1, 4, 8], name="A", uid=11)
    b = g.tensor([1, 8, 16], name="B", data_type=dt.HALF)
    c = g.matmul(a, b, compute_data_type=dt.FLOAT)
    r = g.relu(c, negative_slope=0.2)
    r.set_output(True).set_stride([64, 1, 4])
    lowered = g._lower()
    bg = lowered.backend
    assert bg.init_kwargs["sm_version"] == 90 and bg.init_kwargs["io_data_type"] is dt.HALF
    tensor_calls = [kw for m, kw in bg.calls if m == "tensor"]
    assert [kw["name"] for kw in tensor_calls] == ["A", "B"]
    assert tensor_calls[0]["dim"] == [1, 4, 8] and tensor_calls[0]["stride"] == [32, 8, 1]
    assert lowered.backend_tensors[11].uid == 11
    mm_out = lowered.backend_tensors[c.uid]
    pushed = dict(mm_out.calls)
    assert "set_dim" not in pushed and "set_stride" not in pushed  # inferred: not pushed
    relu_out = dict(lowered.backend_tensors[r.uid].calls)
    assert (
        relu_out["set_stride"] == [64, 1, 4] and "set_dim" not in relu_out and relu_out["set_output"] is True
    )
    relu_kwargs = next(kw for m, kw in bg.calls if m == "relu")
    assert relu_kwargs["negative_slope"] == 0.2 and "lower_clip" not in relu_kwargs


def test_dims_layout_ops_push_ir_dims(fake_backend) -> None:
    g = pygraph.Graph("r", io_data_type=dt.HALF)
    out = g.reshape(g.tensor([2, 3, 4]))
    out.set_dim([6, 4]).set_output(True)
    lowered = g._lower()
    calls = dict(lowered.backend_tensors[out.uid].calls)
    assert calls["set_dim"] == [6, 4] and "set_stride" not in calls


def test_sdpa_pushes_layout_and_dropout(fake_backend) -> None:
    g = pygraph.Graph("s", io_data_type=dt.HALF)
    q, k, v = g.tensor([1, 2, 8, 16]), g.tensor([1, 2, 8, 16]), g.tensor([1, 2, 8, 16])
    seed, offset = g.tensor([1, 1, 1, 1], data_type=dt.INT64), g.tensor([1, 1, 1, 1], data_type=dt.INT64)
    o, _stats = g.sdpa(q, k, v, generate_stats=True, dropout=(0.1, seed, offset), use_causal_mask=True)
    o.set_output(True)
    lowered = g._lower()
    kwargs = next(kw for m, kw in lowered.backend.calls if m == "sdpa")
    assert kwargs["dropout"][0] == 0.1 and kwargs["dropout"][1].uid == seed.uid
    assert kwargs["use_causal_mask"] is True and kwargs["q"].uid == q.uid
    assert dict(lowered.backend_tensors[o.uid].calls)["set_stride"] == list(o.stride)


def test_backend_refusal_is_graph_not_supported_at_validate(fake_backend) -> None:
    fake_backend.refuse_validate = "no engine for this"
    g, _ = build_op("matmul")
    with pytest.raises(GraphNotSupportedError, match="no engine for this"):
        g.validate()
    assert g.lowered is None and g.state is GraphState.BUILDING
    assert "no engine" in str(g.backend_decline)


def test_uid_check_fails_loudly(fake_backend) -> None:
    fake_backend.uid_offset = 1000
    g, _ = build_op("matmul")
    with pytest.raises(UidOwnershipError, match="uid ownership"):
        g.validate()


def test_python_only_graph_never_touches_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom():
        raise AssertionError("the backend was imported")

    monkeypatch.setattr("pygraph.lowering.backend.import_backend", boom)
    g, (_o, _) = build_op("gdn")
    g.validate()
    assert g.state is GraphState.VALIDATED and g.lowered is None
    with pytest.raises(GraphNotSupportedError, match="gdn"):
        lower(g)


def test_without_backend_validate_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cudnn", None)
    g, _ = build_op("matmul")
    with pytest.raises(ImportError, match=r"pygraph-core\[backend\]"):
        g.validate()


def test_build_operation_graph_copies_back_unset_dims(fake_backend) -> None:
    g, c = build_op("matmul")
    g.validate()
    bt = g.lowered.backend_tensors[c.uid]
    bt.attrs["dim"], bt.attrs["stride"] = [2, 4, 16], [64, 1, 4]
    g.build_operation_graph()
    assert c.stride == (64, 1, 4) and not c.stride_assigned
    assert ("build_operation_graph", {}) in g.lowered.backend.calls
    g.build_operation_graph()  # once
    assert sum(m == "build_operation_graph" for m, _ in g.lowered.backend.calls) == 1


def test_serialize_passes_through_for_lowered_graphs(fake_backend) -> None:
    g, _ = build_op("matmul")
    g.validate()
    assert g.serialize() == b"backend-bytes"
