"""The built-in example graphs: each builds for its family at its default and at an overridden
shape and dtype, a graph file loads, and the device operands they are timed on fit their geometry."""

from __future__ import annotations

import pytest

from pygraph import engines
from pygraph.errors import OpInputError
from pygraph.examples import EXAMPLES, UnknownTargetError, load_graph, parse_shape
from pygraph.ir.dtypes import data_type


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_example_belongs_to_its_family(name):
    example = EXAMPLES[name]
    graph = example.graph()
    assert engines.family_for(graph).name == example.family
    assert graph.name == name.replace("-", "_")


def test_shapes_and_dtypes_override_the_defaults():
    g = EXAMPLES["gemm-bias-gelu"].graph((256, 512, 128), "fp16")
    a, b, bias = (g.find_tensor(n) for n in ("A", "B", "bias"))
    assert (a.dim, b.dim, b.stride, bias.dim) == ((1, 256, 128), (1, 128, 512), (65536, 1, 128), (1, 1, 512))
    assert a.data_type is data_type.HALF
    assert EXAMPLES["gemm"].graph((3, 64, 32, 16)).find_tensor("A").dim == (3, 64, 16)  # B leads
    g = EXAMPLES["gdn"].graph((96, 4, 64))
    assert g.find_tensor("cu_seqlens").dim == (3,)  # N keeps its default, 2 sequences
    assert EXAMPLES["kda"].graph((96, 4, 64, 5)).find_tensor("g").dim == (96, 4, 64)  # a gate per key channel
    assert EXAMPLES["gdn2"].graph((96, 4, 64, 5)).find_tensor("cu_seqlens").dim == (6,)


def test_flop_counts():
    assert EXAMPLES["gemm"].flop_count((2, 64, 32, 16)) == 2 * 2 * 64 * 32 * 16
    assert EXAMPLES["sdpa"].flop_count((1, 2, 128, 64)) == 2 * 2 * 128 * 128 * 64  # causal: half of 4BHSSD
    assert EXAMPLES["sdpa-bwd"].flop_count((1, 2, 128, 64)) == 2.5 * 2 * 2 * 128 * 128 * 64
    assert EXAMPLES["gdn"].flop_count() is None


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: EXAMPLES["sdpa"].graph((1, 2, 3)), "example 'sdpa': --shape takes B,H,S,D, got 1,2,3"),
        (lambda: EXAMPLES["gemm"].graph((0, 2, 3)), "sizes must be positive"),
        (lambda: EXAMPLES["gemm"].graph(None, "int4"), "--dtype: 'int4' is not one of"),
        (lambda: parse_shape("4096,x,1"), None),
        (lambda: parse_shape("a,b"), "is not a comma-separated list of sizes"),
    ],
)
def test_bad_overrides_name_the_example_and_the_value(call, says):
    if says is None:
        assert call() == (4096, 1)  # "x" separates too: 4096x1
        return
    with pytest.raises(OpInputError, match=says):
        call()


def test_a_graph_file_loads(tmp_path):
    g = EXAMPLES["gdn"].graph((64, 2, 16))
    path = tmp_path / "gdn.json"
    path.write_text(repr(g))
    loaded, example = load_graph(str(path))
    assert example is None and [n.op for n in loaded.nodes] == ["gdn"]
    assert loaded.find_tensor("q").dim == (64, 2, 16)
    path.write_bytes(g.serialize())  # a python-only graph serializes to its IR
    assert [n.op for n in load_graph(str(path))[0].nodes] == ["gdn"]
    with pytest.raises(UnknownTargetError, match="neither a built-in example"):
        load_graph(str(tmp_path / "missing.json"))


def test_operands_fit_the_declared_geometry_and_offsets_split_the_tokens():
    torch = pytest.importorskip("torch")
    from pygraph.tuning.operands import random_operands

    g = EXAMPLES["gdn"].graph((100, 2, 16, 3))
    operands = random_operands(g, device="cpu")
    for tensor, buf in operands.items():
        assert (tuple(buf.shape), buf.stride()) == (tuple(tensor.dim), tuple(tensor.stride))
    cu = next(buf for t, buf in operands.items() if t.name == "cu_seqlens")
    assert cu.tolist() == [0, 33, 66, 100] and cu.dtype == torch.int32
    gemm = random_operands(EXAMPLES["gemm"].graph((8, 16, 4)), device="cpu")
    assert [buf.dtype for buf in gemm.values()] == [torch.bfloat16] * 3
