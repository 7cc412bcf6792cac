"""execute(): one variant pack from any accepted buffer kind, typed refusals, overrides, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from dispatch_helpers import matmul_graph

from pygraph.execution import (
    OperandAddressError,
    OperandDeviceError,
    OperandDtypeError,
    OperandMissingError,
    ShapeOverrideError,
    UnknownOperandError,
    VariantPack,
    WorkspaceTooSmallError,
)
from pygraph.ir.dtypes import data_type


class CudaArray:
    """A minimal __cuda_array_interface__ producer (an address; nothing is dereferenced)."""

    def __init__(self, ptr, shape, typestr="<f2", strides=None):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides, "version": 3,
        }  # fmt: skip


def buffers():
    return (
        np.zeros((1, 16, 32), np.float16),
        np.zeros((1, 32, 8), np.float16),
        np.zeros((1, 16, 8), np.float16),
    )


@pytest.fixture
def planned(standins):
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    return g, a, b, c


def last_call(standins):
    return next(c for c in reversed(standins.CALLS) if c[0] != "build")


def test_each_kind_of_object_normalizes(standins, planned):
    g, a, _b, c = planned
    A, _B, C = buffers()
    t = torch.zeros(1, 32, 8, dtype=torch.float16)
    g.execute({a: A, "B": t, c.uid: int(C.ctypes.data)})
    name, knobs, ptrs, shapes, ctx = last_call(standins)
    assert (name, knobs) == ("alpha", {"TILE": 128})
    assert ptrs == (A.ctypes.data, t.data_ptr(), C.ctypes.data)
    assert shapes == [(1, 16, 32), (1, 32, 8), (1, 16, 8)]  # the bare address takes the declared shape
    assert ctx.handle is None and ctx.workspace == 0


def test_cuda_array_interface_producers(standins, planned):
    g, a, b, c = planned
    g.execute(
        {a: CudaArray(0x1000, (1, 16, 32)), b: CudaArray(0x2000, (1, 32, 8), strides=(512, 16, 2)), c: 0x3000}
    )
    _, _, ptrs, _shapes, _ = last_call(standins)
    assert ptrs == (0x1000, 0x2000, 0x3000)


def test_pack_vocabulary(standins, planned, monkeypatch):
    g, a, b, c = planned
    seen = {}
    # a plan that maps each call's geometry itself (as gemm_sm90's) sees every buffer as passed
    monkeypatch.setattr(standins._Plan, "checks_geometry", True)

    def on_execute(engine, pack, ctx):
        assert isinstance(pack, VariantPack)
        pos = [pack.index_of(a), pack.index_of(b.uid), pack.index_of("C")]
        seen["pos"], seen["ops"] = pos, pack.operands(pos)
        seen["uids"], seen["addr"] = pack.uids, pack.address

    standins.HOOK["on_execute"] = on_execute
    A, B, C = buffers()
    g.execute({a: A, b: B, c: C[:, :, :4]})  # a buffer keeps its OWN geometry
    assert seen["pos"] == [0, 1, 2] and list(seen["uids"]) == sorted(seen["uids"])
    op = seen["ops"][2]
    assert op.shape == (1, 16, 4) and op.stride == (128, 8, 1) and op.dtype is data_type.HALF


def test_missing_operand(planned):
    g, a, b, _c = planned
    A, B, _ = buffers()
    with pytest.raises(OperandMissingError, match="'C'"):
        g.execute({a: A, b: B})


def test_unknown_key(planned):
    g, a, b, c = planned
    A, B, C = buffers()
    with pytest.raises(UnknownOperandError, match="'nope'"):
        g.execute({a: A, b: B, c: C, "nope": C})


def test_wrong_dtype(planned):
    g, a, b, c = planned
    A, B, C = buffers()
    with pytest.raises(OperandDtypeError, match="'B' is declared HALF.*FLOAT"):
        g.execute({a: A, b: B.astype(np.float32), c: C})


def test_wrong_device(planned):
    g, a, b, c = planned
    A, _B, C = buffers()
    with pytest.raises(OperandDeviceError, match="'B'"):
        g.execute({a: A, b: CudaArray(0x10, (1, 32, 8)), c: C})


def test_workspace_too_small_launches_nothing(standins, planned):
    g, a, b, c = planned
    g.select_plan(2)  # gamma needs 256 bytes
    A, B, C = buffers()
    before = len(standins.CALLS)
    with pytest.raises(WorkspaceTooSmallError, match="256"):
        g.execute({a: A, b: B, c: C}, workspace=np.zeros(16, np.uint8))
    with pytest.raises(WorkspaceTooSmallError, match="none was passed"):
        g.execute({a: A, b: B, c: C})
    assert all(call[0] == "build" for call in standins.CALLS[before:])
    ws = np.zeros(256, np.uint8)
    g.execute({a: A, b: B, c: C}, workspace=ws)
    assert last_call(standins)[4].workspace == ws.ctypes.data


def test_torch_workspace_is_read_by_its_true_span(standins, planned):
    g, a, b, c = planned
    g.select_plan(2)  # gamma needs 256 bytes
    A, B, C = (torch.from_numpy(x) for x in buffers())
    ws = torch.zeros(64, dtype=torch.float32)  # 256 bytes, contiguous
    g.execute({a: A, b: B, c: C}, workspace=ws)
    assert last_call(standins)[4].workspace == ws.data_ptr()
    with pytest.raises(WorkspaceTooSmallError, match="256"):
        g.execute({a: A, b: B, c: C}, workspace=torch.zeros(63, dtype=torch.float32))
    # a stride-0 view claims 256 elements but spans 4 bytes: it must not pass for a 256-byte workspace
    with pytest.raises(WorkspaceTooSmallError, match="256"):
        g.execute({a: A, b: B, c: C}, workspace=torch.zeros(1, dtype=torch.float32).expand(256))
    with pytest.raises(OperandDeviceError, match="workspace"):
        g.execute({a: A, b: B, c: C}, workspace=CudaArray(0x10, (256,), "|u1"))


def test_bare_addresses_take_every_64_bit_value_and_nothing_beyond(standins, planned):
    g, a, b, c = planned
    top = 2**64 - 1
    g.execute({a: top, b: 0x2000, c: 0x3000}, top)
    _, _, ptrs, _shapes, ctx = last_call(standins)
    assert ptrs[0] == top and ctx.workspace == top
    with pytest.raises(OperandAddressError, match=r"tensor 'B': bare address 18446744073709551616 \(0x1"):
        g.execute({a: 0x1000, b: 2**64, c: 0x3000})
    with pytest.raises(OperandAddressError, match=r"workspace: bare address 18446744073709551616"):
        g.execute({a: 0x1000, b: 0x2000, c: 0x3000}, 2**64)


class Address(int):
    """An int subclass (an IntEnum, a numbered handle type): read as a bare address too."""


def test_an_int_subclass_workspace_is_checked_as_a_bare_address(standins, planned):
    g, a, b, c = planned
    g.execute({a: 0x1000, b: 0x2000, c: 0x3000}, Address(0x9000))
    assert last_call(standins)[4].workspace == 0x9000
    for bad in (Address(-8), Address(2**64)):  # the second call takes the cached reader: same refusal
        with pytest.raises(OperandAddressError, match=rf"workspace: bare address {int(bad)}"):
            g.execute({a: 0x1000, b: 0x2000, c: 0x3000}, bad)


def test_python_plan_refuses_overrides(standins, planned):
    g, a, b, c = planned
    A, B, C = buffers()
    before = len(standins.CALLS)
    with pytest.raises(ShapeOverrideError, match="compiled for the shapes the graph declared") as info:
        g.execute({a: A, b: B, c: C}, override_uids=[a.uid], override_shapes=[[1, 8, 32]])
    assert isinstance(info.value, ValueError) and info.value.plan == "alpha[TILE=128]"
    assert "alpha[TILE=128]" in str(info.value)
    assert all(call[0] == "build" for call in standins.CALLS[before:])  # nothing ran


def test_backend_plan_takes_overrides(standins, fake_backend):
    fake = fake_backend({"A": [(7, {})]})
    overridden = []
    fake._execute_plan_at_index = lambda *args: overridden.append(args)
    standins.HOOK["style"] = "backend_first"
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    A, B, C = buffers()
    g.execute(
        {a: A, b: B, c: C},
        override_uids=[a.uid],
        override_shapes=[[1, 8, 32]],
        override_strides=[[256, 32, 1]],
    )
    ((ptrs, _workspace, index, _handle, uids, shapes, strides),) = overridden
    assert ptrs == {a.uid: A.ctypes.data, b.uid: B.ctypes.data, c.uid: C.ctypes.data}
    assert (index, uids, shapes, strides) == (0, [a.uid], [[1, 8, 32]], [[256, 32, 1]])


def test_backend_plan_runs_the_same_pack(standins, fake_backend):
    fake = fake_backend({"A": [(7, {})]})
    standins.HOOK["style"] = "backend_first"
    g, a, b, c = matmul_graph()
    g.create_execution_plans()
    g.build_plans()
    assert g.selected_engine is None
    A, B, C = buffers()
    g.execute({a: A, b: B, c: C}, workspace=0)
    assert fake.executed == [([A.ctypes.data, B.ctypes.data, C.ctypes.data], 0, 0)]


def test_execute_plan_at_index(standins, planned):
    g, a, b, c = planned
    A, B, C = buffers()
    g.execute_plan_at_index({a: A, b: B, c: C}, index=4)
    assert last_call(standins)[:2] == ("beta", {"TILE": 64})


def test_two_threads_each_see_their_own_pointers(standins, planned):
    g, a, b, c = planned
    mismatches = []
    lock = threading.Lock()

    def on_execute(engine, pack, ctx):
        mine = threading.current_thread().expected
        if pack.pointers() != mine or list(
            (__import__("ctypes").c_uint64 * len(pack)).from_address(pack.address)
        ) != list(mine):
            with lock:
                mismatches.append((mine, pack.pointers()))

    standins.HOOK["on_execute"] = on_execute
    g.build_plans()

    def worker(base):
        threading.current_thread().expected = (base, base + 8, base + 16)
        tensors = {a: base, b: base + 8, c: base + 16}
        for _ in range(3000):
            g.execute(tensors)

    threads = [threading.Thread(target=worker, args=(base,)) for base in (0x10000, 0x20000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mismatches == []
    assert sum(1 for call in standins.CALLS if call[0] == "alpha") == 6000
