"""normalize's torch fast path reuses the buffer a position accepted last; every rule still runs.

A call reading exactly what a position accepted before gets that same `OperandBuffer` back; any
difference (pointer, shape, stride, dtype, device) is read afresh, and a call that breaks a rule
after matching calls raises the same typed error, naming the same tensor, as a first call would.
"""

from __future__ import annotations

import pytest
import torch
from dispatch_helpers import matmul_graph

from pygraph.execution import (
    DuplicateOperandError,
    OperandDeviceError,
    OperandDtypeError,
    OperandMissingError,
)
from pygraph.execution.normalize import normalize
from pygraph.ir.dtypes import data_type


def torch_buffers():
    return (
        torch.zeros(1, 16, 32, dtype=torch.float16),
        torch.zeros(1, 32, 8, dtype=torch.float16),
        torch.zeros(1, 16, 8, dtype=torch.float16),
    )


class CudaArray:
    """A __cuda_array_interface__ producer on 'a CUDA device' (an address; nothing is read)."""

    def __init__(self, ptr, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False), "version": 3}


@pytest.fixture
def layout(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    return g, g._planner.layout, a, b, c


def warm(layout, values):
    """Two calls: the first learns torch's tensor type and dtype, the second takes the fast path."""
    normalize(layout, values, None)
    return normalize(layout, values, None)


def test_an_equal_read_reuses_the_accepted_buffer(layout):
    _g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    first = warm(lay, {a: A, b: B, c: C})
    again = normalize(lay, {a: A, "B": B, c.uid: C}, None)
    assert first is not again and first.buffers is not again.buffers  # each call its own pack
    assert all(x is y for x, y in zip(first.buffers, again.buffers))
    assert again.buffers[0] == (A.data_ptr(), (1, 16, 32), (512, 32, 1), data_type.HALF, -1)


def test_a_changed_pointer_shape_or_stride_is_read_afresh(layout):
    _g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    warm(lay, {a: A, b: B, c: C})
    other = torch.zeros(1, 16, 32, dtype=torch.float16)
    assert normalize(lay, {a: other, b: B, c: C}, None).buffers[0].pointer == other.data_ptr()
    narrow = C[:, :, :4]
    buf = normalize(lay, {a: A, b: B, c: narrow}, None).buffers[2]
    assert (buf.pointer, buf.shape, buf.stride) == (narrow.data_ptr(), (1, 16, 4), (128, 8, 1))
    A.transpose_(1, 2)  # the same tensor object, its geometry changed in place
    buf = normalize(lay, {a: A, b: B, c: C}, None).buffers[0]
    assert (buf.shape, buf.stride) == ((1, 32, 16), (512, 1, 32))


def test_a_wrong_dtype_after_matching_calls_raises_naming_the_tensor(layout):
    g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    warm(lay, {a: A, b: B, c: C})
    g.execute({a: A, b: B, c: C})
    wrong = B.float()
    with pytest.raises(OperandDtypeError, match="'B' is declared HALF.*FLOAT"):
        normalize(lay, {a: A, b: wrong, c: C}, None)
    with pytest.raises(OperandDtypeError, match="'B' is declared HALF.*FLOAT"):
        g.execute({a: A, b: wrong, c: C})
    # the refused read was not remembered: the right buffer still passes, the wrong one still fails
    assert normalize(lay, {a: A, b: B, c: C}, None).buffers[1].dtype is data_type.HALF
    with pytest.raises(OperandDtypeError, match="'B'"):
        normalize(lay, {a: A, b: wrong, c: C}, None)


def test_a_tensor_whose_dtype_changed_in_place_is_refused(layout):
    _g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    warm(lay, {a: A, b: B, c: C})
    B.data = torch.zeros(1, 32, 8, dtype=torch.float32)  # same object, new dtype (and pointer)
    with pytest.raises(OperandDtypeError, match="'B' is declared HALF.*FLOAT"):
        normalize(lay, {a: A, b: B, c: C}, None)


def test_the_device_rule_runs_on_every_call(layout):
    g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    warm(lay, {a: A, b: B, c: C})
    with pytest.raises(OperandDeviceError, match="'C'"):
        normalize(lay, {a: A, b: B, c: CudaArray(0x1000, (1, 16, 8))}, None)
    with pytest.raises(OperandDeviceError, match="workspace"):
        g.execute({a: A, b: B, c: C}, workspace=CudaArray(0x2000, (256,)))
    assert normalize(lay, {a: A, b: B, c: C}, None).device == -1


def test_a_missing_operand_after_matching_calls_is_named(layout):
    _g, lay, a, b, c = layout
    A, B, C = torch_buffers()
    warm(lay, {a: A, b: B, c: C})
    with pytest.raises(OperandMissingError, match="'C'"):
        normalize(lay, {a: A, b: B}, None)
    # as many keys as operands, one of them twice: the duplicate is what the call got wrong
    with pytest.raises(DuplicateOperandError, match="'B' is given twice, as the Tensor 'B' and as name 'B'"):
        normalize(lay, {a: A, b: B, "B": B}, None)
