"""Every builder by name: the full op list of ANCHOR.md, one table-driven call each."""

from __future__ import annotations

import pytest

import pygraph
from pygraph.node_types import NodeType
from pygraph.ops import OPS

from .conftest import RECIPES, build_op, real_signatures

POINTWISE = (
    "abs ceil cos elu erf exp floor gelu gelu_approx_tanh identity log logical_not neg reciprocal rsqrt "
    "sigmoid sin softplus sqrt tan tanh add add_square div logical_and logical_or mul sub max min mod pow "
    "cmp_eq cmp_ge cmp_gt cmp_le cmp_lt cmp_neq bias scale binary_select elu_backward "
    "gelu_approx_tanh_backward gelu_backward sigmoid_backward softplus_backward tanh_backward relu "
    "relu_backward leaky_relu leaky_relu_backward swish swish_backward gen_index"
).split()
STRUCTURED = (
    "rmsnorm rmsnorm_backward layernorm layernorm_backward adalayernorm adalayernorm_backward instancenorm "
    "instancenorm_backward batchnorm batchnorm_inference batchnorm_backward genstats reduction "
    "block_scale_dequantize block_scale_quantize moe_grouped_matmul moe_grouped_matmul_bwd conv_fprop "
    "conv_dgrad conv_wgrad reshape slice transpose concatenate rope rope_backward"
).split()
SDPA = "sdpa sdpa_backward sdpa_fp8 sdpa_fp8_backward sdpa_mxfp8 sdpa_mxfp8_backward".split()
LINEAR_ATTENTION = "gdn gdn_bwd kda kda_bwd gdn2 gdn2_bwd".split()
ALL = ["matmul", *POINTWISE, *STRUCTURED, *SDPA, *LINEAR_ATTENTION]
UNINFERABLE = {("reduction", "OUT_0"), ("reshape", "OUT_0"), ("conv_wgrad", "DW")}


def test_op_surface_counts() -> None:
    assert (len(POINTWISE), len(STRUCTURED), len(SDPA), len(LINEAR_ATTENTION)) == (54, 26, 6, 6)
    assert sorted(OPS) == sorted(ALL)
    assert set(RECIPES) == set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_builder(name: str) -> None:
    spec = OPS[name]
    g, result = build_op(name)
    assert callable(getattr(pygraph.Graph, name))
    (node,) = g.nodes
    assert node.op == name and node.type is spec.node_type
    assert set(node.inputs) == {p.name for p in spec.inputs}
    assert set(node.outputs) == {o.name for o in spec.outputs}
    assert {a.name for a in spec.attrs} <= set(node.params)
    if spec.node_type is NodeType.POINTWISE:
        assert node.params["mode"] == name
    returned = [result] if spec.returns_single else list(result)
    assert len(returned) == len(spec.returned_outputs)
    for out, t in zip(spec.returned_outputs, returned):
        assert node.outputs[out.name] is t
        if t is None:
            continue
        assert t.producer is node and t.graph is g and t.uid > 0
        if (name, out.name) not in UNINFERABLE:
            assert t.dim and len(t.stride) == len(t.dim), (name, out.name)
            assert t.get_dim() == list(t.dim) and t.get_stride() == list(t.stride)
            assert t.get_data_type() is t.data_type and t.data_type.is_set
    assert g.is_python_only is (spec.lowering is None)


@pytest.mark.parametrize("name", [n for n in ALL if OPS[n].lowering is not None])
def test_ports_and_attributes_are_backend_keywords(name: str) -> None:
    sigs = real_signatures()
    spec = OPS[name]
    overloads = sigs[spec.lowering.method]
    known = set().union(*overloads)
    names = (
        {p.name for p in spec.inputs}
        | {a.name for a in spec.attrs}
        | {o.name for o in spec.outputs if o.from_kwarg}
    )
    assert names <= known, sorted(names - known)


def test_linear_attention_has_no_lowering() -> None:
    assert all(OPS[n].lowering is None for n in LINEAR_ATTENTION)
    assert all(OPS[n].lowering is not None for n in ALL if n not in LINEAR_ATTENTION)
