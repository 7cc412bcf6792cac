"""Nothing a caller declares can make a plan write outside a buffer: declared outputs agree with
what their inputs imply (validate), an engine asked directly declines a contradicting graph, and
every call's buffers are held to the geometry the plan runs (issue 52, item 1). The refusals with
their messages are rows of test_bad_inputs; here, what still passes and where each check sits."""

from __future__ import annotations

import numpy as np
import pytest
from dispatch_helpers import matmul_graph

import pygraph
from pygraph import data_type as dt
from pygraph.engines.base import CompiledPlan, DeviceInfo, EngineRequest
from pygraph.errors import GraphNotSupportedError
from pygraph.execution import OperandGeometryError
from pygraph.ir.validate import validate_ir
from pygraph.planning.runner import holds, make_runner


def _built(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    g.build_plans()
    return g, a, b, c


def _calls(standins):
    return [c for c in standins.CALLS if c[0] != "build"]


def test_a_declared_output_with_leading_unit_axes_agrees_with_its_inputs():
    g = pygraph.Graph("mm", io_data_type=dt.HALF)
    c = g.matmul(g.tensor([4, 8], name="a"), g.tensor([8, 16], name="b"))
    c.set_dim([1, 4, 16]).set_stride([64, 16, 1]).set_output(True)
    validate_ir(g._ir)  # the IR's half of validate() (the backend's lowering needs a cuDNN runtime)
    assert c.dim == (1, 4, 16)


def test_a_too_small_output_is_refused_before_the_plan_runs(standins):
    g, a, b, c = _built(standins)
    A, B = np.zeros((1, 16, 32), np.float16), np.zeros((1, 32, 8), np.float16)
    with pytest.raises(OperandGeometryError) as info:
        g.execute({a: A, b: B, c: np.zeros((1, 15, 8), np.float16)}, 0x9000)
    assert info.value.tensor == "C"
    assert _calls(standins) == []  # nothing ran
    g.execute({a: A, b: B, c: np.zeros((16, 8), np.float16)}, 0x9000)  # [16, 8] is the declared [1, 16, 8]
    g.execute({a: A, b: B, c: 0x3000}, 0x9000)  # a bare address is read as the declared tensor
    assert len(_calls(standins)) == 2


def test_execute_plan_at_index_holds_buffers_to_the_declared_geometry_too(standins):
    g, a, b, c = _built(standins)
    A = np.zeros((1, 16, 32), np.float16)
    with pytest.raises(OperandGeometryError, match="tensor 'B' is shape \\[1, 32, 4\\]"):
        g.execute_plan_at_index({a: A, b: np.zeros((1, 32, 4), np.float16), c: 0x3000}, 0x9000, index=0)
    assert _calls(standins) == []


class _SelfChecking(CompiledPlan):
    """A plan that checks (or maps) each call's geometry itself, as gemm_sm90's does."""

    checks_geometry = True

    def __init__(self):
        self.ran = 0

    def execute(self, graph, pack, ctx):
        self.ran += 1

    def get_workspace_size(self):
        return 0


def test_a_plan_that_checks_geometry_itself_gets_the_call_as_passed(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    plan = _SelfChecking()
    run = make_runner(g, g._planner.layout, plan, "self_checking", None)
    run(
        {
            a: np.zeros((1, 16, 32), np.float16),
            b: np.zeros((1, 32, 8), np.float16),
            c: np.zeros((1, 8, 8), np.float16),
        },
        None,
        None,
    )
    assert plan.ran == 1


def _gdn_graph(o_dims=None):
    g = pygraph.Graph("la", io_data_type=dt.BFLOAT16)
    t = 64
    q, k, v = (g.tensor([t, 2, 64], name=n) for n in ("q", "k", "v"))
    gate = g.tensor([t, 2], name="g", data_type=dt.FLOAT)
    beta = g.tensor([t, 2], name="beta", data_type=dt.FLOAT)
    cu = g.tensor([2], name="cu_seqlens", data_type=dt.INT32)
    o, _ = g.gdn(q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu)
    if o_dims is not None:
        o.set_dim(o_dims)
    return g, o


def test_a_python_only_graph_whose_output_is_left_virtual_is_valid():
    # is_virtual on a python-only graph speaks of a lowering that never happens: O is still a slot
    g, o = _gdn_graph()
    assert o.is_virtual
    g.validate()
    from pygraph.planning.layout import layout_for

    assert o.uid in layout_for(g).uids


def test_a_graph_with_no_node_stays_refused():
    with pytest.raises(pygraph.InvalidGraphError, match="no node"):
        pygraph.Graph("empty").validate()


def test_an_engine_asked_directly_declines_a_contradicting_graph():
    g, _ = _gdn_graph(o_dims=[16, 2, 64])  # never validated: the engine is the last line
    request = EngineRequest(g, None, DeviceInfo(sm=90), lambda: None)
    with pytest.raises(GraphNotSupportedError, match="some_engine: output 'O'.*declared dim \\[16, 2, 64\\]"):
        request.refuse_contradicting_geometry("some_engine")
    ok, _ = _gdn_graph()
    EngineRequest(ok, None, DeviceInfo(sm=90), lambda: None).refuse_contradicting_geometry("some_engine")


@pytest.mark.parametrize(
    ("shape", "stride", "want_shape", "want_stride", "held"),
    [
        ((1, 16, 8), (128, 8, 1), (1, 16, 8), (128, 8, 1), True),  # the declared tensor
        ((16, 8), (8, 1), (1, 16, 8), (128, 8, 1), True),  # leading unit axes
        ((1, 16, 8), (128, 8, 1), (16, 8), (8, 1), True),
        ((1, 32, 8), (256, 8, 1), (1, 16, 8), (128, 8, 1), True),  # its first 16 rows
        ((2, 16, 8), (128, 8, 1), (16, 8), (8, 1), True),  # its first batch
        ((1, 15, 8), (120, 8, 1), (1, 16, 8), (128, 8, 1), False),  # one row short
        ((1, 16, 8), (128, 1, 16), (1, 16, 8), (128, 8, 1), False),  # transposed
        ((1, 16, 8), (0, 0, 1), (1, 16, 8), (128, 8, 1), False),  # an expanded (broadcast) buffer
        ((16, 8), (8, 1), (2, 16, 8), (128, 8, 1), False),  # a batch it does not have
        ((16, 8), (8,), (16, 8), (8, 1), False),  # a malformed read
    ],
)
def test_a_buffer_holds_the_tensor_a_plan_runs(shape, stride, want_shape, want_stride, held):
    assert holds(shape, stride, want_shape, want_stride) is held


def _ragged_layout():
    """q declared as cuDNN's ragged [batch 3, heads 4, max_seq 128, dim 64] over a packed
    [tokens, 4, 64] buffer, and its offsets."""
    from pygraph.execution.variant_pack import DEVICE_UNKNOWN, OperandBuffer, OperandLayout

    g = pygraph.Graph("ragged", io_data_type=dt.HALF)
    q = g.tensor([3, 4, 128, 64], name="q").set_stride([32768, 64, 256, 1])
    offsets = g.tensor([4, 1, 1, 1], name="q_offset", data_type=dt.INT32)
    q.set_ragged_offset(offsets)
    declared = [
        OperandBuffer(0, tuple(t.dim), tuple(t.stride), t.data_type, DEVICE_UNKNOWN) for t in (q, offsets)
    ]
    return OperandLayout([q, offsets], declared=declared, host=[False, False])


def test_a_ragged_tensor_is_held_to_one_tokens_geometry():
    # the batch and sequence extents live in the device offsets (a host read would sync the stream)
    from pygraph.execution.normalize import normalize
    from pygraph.planning.runner import geometry_rows, refuse_geometry

    layout = _ragged_layout()
    rows = geometry_rows(layout)
    assert rows[0] == (0, (4, 64), (64, 1))
    offsets = np.zeros((4, 1, 1, 1), np.int32)
    packed = np.zeros((191, 4, 64), np.float16)  # 191 tokens: fewer than batch x max_seq
    refuse_geometry("plan", rows, normalize(layout, {"q": packed, "q_offset": offsets}, None))
    for wrong in (np.zeros((191, 2, 64), np.float16), np.zeros((191, 64, 4), np.float16)):
        pack = normalize(layout, {"q": wrong, "q_offset": offsets}, None)
        with pytest.raises(
            OperandGeometryError,
            match="tensor 'q' is shape .*runs a ragged tensor whose token is shape \\[4, 64\\] stride \\[64, 1\\]",
        ):
            refuse_geometry("plan", rows, pack)
