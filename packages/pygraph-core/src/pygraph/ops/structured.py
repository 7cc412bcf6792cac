"""The structured table: norms, reduction, block-scale, MoE, conv and structural ops (26 specs).

One `_op(...)` row per op: ports, attributes, outputs (conditional ones with their condition),
shape inference and lowering. Port and attribute names are the backend builder's keywords.
"""

from __future__ import annotations

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import (
    convert_enum,
    convolution_mode,
    data_type,
    moe_grouped_matmul_mode,
    norm_forward_phase,
    reduction_mode,
    reshape_mode,
)
from pygraph.node_types import NodeType
from pygraph.ops._common import (
    INTS,
    as_bool,
    as_float,
    as_int,
    as_ints,
    const_dtype,
    like,
    like_dtype,
    port_given,
)
from pygraph.ops.build import UnknownDims, dims_of
from pygraph.ops.spec import NO_DEFAULT, Attr, Lowering, OpSpec, Output, Port

__all__ = ["STRUCTURED_SPECS"]

_FLOAT = const_dtype(data_type.FLOAT)


def _enum(cls):
    return lambda v: convert_enum(v, cls)


def _op(
    name,
    node_type,
    inputs,
    outputs,
    attrs=(),
    *,
    positional=None,
    layout="user",
    cdt=True,
    check=None,
    doc="",
):
    return OpSpec(
        name=name,
        node_type=node_type,
        family="structured",
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        attrs=tuple(attrs),
        positional=tuple(
            positional if positional is not None else [p.name for p in inputs] + [a.name for a in attrs]
        ),
        lowering=Lowering(name, output_layout=layout, compute_data_type=cdt),
        check=check,
        doc=doc,
    )


# -- norms ------------------------------------------------------------------------------------
def _training(node) -> bool:
    return node.params.get("norm_forward_phase") is norm_forward_phase.TRAINING


def _stats_by_scale(first_axis: int):
    """Input dims with 1 on every normalized axis: where scale is not 1 (from first_axis on);
    without a scale, every axis after the batch axis."""

    def rule(node):
        d = dims_of(node, "input")
        scale = node.inputs.get("scale")
        if scale is None or not scale.dim:
            return tuple(x if i == 0 else 1 for i, x in enumerate(d))
        s = scale.dim
        return tuple(1 if i >= first_axis and i < len(s) and s[i] != 1 else x for i, x in enumerate(d))

    return rule


def _keep_axes(port: str, keep: tuple[int, ...]):
    return lambda node: tuple(x if i in keep else 1 for i, x in enumerate(dims_of(node, port)))


_PHASE = Attr("norm_forward_phase", NO_DEFAULT, _enum(norm_forward_phase))
_EPS = Port("epsilon", scalar_ok=True)


def _norm_forward(name, node_type, scale_required, bias_required, stats_rule, with_mean=True):
    outputs = [Output("Y", dims=like("input"))]
    if with_mean:
        outputs.append(
            Output("mean", dims=stats_rule, dtype=_FLOAT, when=_training, when_doc="TRAINING phase")
        )
    outputs.append(
        Output("inv_var", dims=stats_rule, dtype=_FLOAT, when=_training, when_doc="TRAINING phase")
    )
    inputs = [
        Port("input"),
        Port("scale", required=scale_required),
        Port("bias", required=bias_required),
        _EPS,
    ]
    return _op(
        name, node_type, inputs, outputs, (_PHASE,),
        positional=("norm_forward_phase", "input", "scale", "bias", "epsilon"),
        doc=f"{name} forward; statistics exist in the TRAINING phase only.",
    )  # fmt: skip


def _norm_backward(name, node_type, inputs, conditional_grads, attrs=()):
    when = port_given("scale") if conditional_grads else None
    doc = "DScale/DBias exist only with a scale" if conditional_grads else ""
    outputs = [
        Output("DX", dims=like("input"), dtype=like_dtype("input")),
        Output("DScale", dims=like("scale"), dtype=like_dtype("scale"), when=when, when_doc=doc),
        Output("DBias", dims=like("scale"), dtype=like_dtype("scale"), when=when, when_doc=doc),
    ]
    return _op(name, node_type, inputs, outputs, attrs, doc=f"{name}: gradients of input, scale and bias.")


def _rmsnorm_backward():
    def dbias(node):
        return node.inputs.get("scale") is not None and bool(node.params.get("has_dbias"))

    outputs = [
        Output("DX", dims=like("input"), dtype=like_dtype("input")),
        Output(
            "DScale",
            dims=like("scale"),
            dtype=like_dtype("scale"),
            when=port_given("scale"),
            when_doc="scale given",
        ),
        Output(
            "DBias",
            dims=like("scale"),
            dtype=like_dtype("scale"),
            when=dbias,
            when_doc="scale given and has_dbias",
        ),
    ]
    inputs = [Port("grad"), Port("input"), Port("scale", required=False), Port("inv_variance")]
    return _op(
        "rmsnorm_backward", NodeType.RMSNORM_BWD, inputs, outputs, (Attr("has_dbias", NO_DEFAULT, as_bool),),
        doc="rmsnorm_backward: DX, and DScale/DBias when there is a scale (DBias iff has_dbias).",
    )  # fmt: skip


_BN_STATS = _keep_axes("input", (1,))
_BWD_PORTS = [Port("grad"), Port("input"), Port("scale"), Port("mean"), Port("inv_variance")]

_NORMS = (
    _norm_forward("rmsnorm", NodeType.RMSNORM, False, False, _stats_by_scale(0), with_mean=False),
    _rmsnorm_backward(),
    _norm_forward("layernorm", NodeType.LAYERNORM, False, False, _stats_by_scale(0)),
    _norm_backward(
        "layernorm_backward", NodeType.LAYERNORM_BWD,
        [Port("grad"), Port("input"), Port("scale", required=False), Port("mean"), Port("inv_variance")], True,
    ),
    _norm_forward("adalayernorm", NodeType.ADALAYERNORM, True, False, _stats_by_scale(1)),
    _norm_backward("adalayernorm_backward", NodeType.ADALAYERNORM_BWD, list(_BWD_PORTS), False),
    _norm_forward("instancenorm", NodeType.INSTANCENORM, True, True, _keep_axes("input", (0, 1))),
    _norm_backward(
        "instancenorm_backward", NodeType.INSTANCENORM_BWD,
        [Port("grad"), Port("input"), Port("scale"), Port("mean", required=False), Port("inv_variance", required=False)],
        False,
    ),
    _op(
        "batchnorm", NodeType.BATCHNORM,
        [
            Port("input"), Port("scale"), Port("bias"), Port("in_running_mean", required=False),
            Port("in_running_var", required=False), _EPS, Port("momentum", required=False, scalar_ok=True),
            Port("peer_stats", required=False, is_list=True),
        ],
        [
            Output("Y", dims=like("input")),
            Output("mean", dims=_BN_STATS, dtype=_FLOAT),
            Output("inv_var", dims=_BN_STATS, dtype=_FLOAT),
            Output("next_running_mean", dims=_BN_STATS, dtype=_FLOAT, when=port_given("in_running_mean"), when_doc="in_running_mean given"),
            Output("next_running_var", dims=_BN_STATS, dtype=_FLOAT, when=port_given("in_running_var"), when_doc="in_running_var given"),
        ],
        doc="batchnorm training forward; running stats are updated when given.",
    ),
    _op(
        "batchnorm_inference", NodeType.BATCHNORM_INFERENCE,
        [Port("input"), Port("mean"), Port("inv_variance"), Port("scale"), Port("bias")],
        [Output("Y", dims=like("input"))],
    ),
    _norm_backward(
        "batchnorm_backward", NodeType.BATCHNORM_BWD, [*_BWD_PORTS, Port("peer_stats", required=False, is_list=True)], False
    ),
    _op(
        "genstats", NodeType.GENSTATS, [Port("input")],
        [Output("SUM", dims=_BN_STATS, dtype=_FLOAT), Output("SQ_SUM", dims=_BN_STATS, dtype=_FLOAT)],
        doc="Per-channel sum and sum of squares.",
    ),
)  # fmt: skip


# -- reduction, block scale, MoE ----------------------------------------------------------------
def _block_scale_dims(node):
    d = list(dims_of(node, "input"))
    size = node.params["block_size"]
    axis = node.params.get("axis")
    axis = len(d) - 1 if axis is None or axis == -1 else axis
    d[axis] = -(-d[axis] // size)
    return tuple(d)


def _check_block_quantize(node) -> None:
    size = node.params["block_size"]
    if size <= 0:
        raise OpInputError(f"block_scale_quantize(): attribute 'block_size' must be positive, got {size}")
    axis = node.params.get("axis")
    d = node.inputs["input"].dim
    if axis is not None and d and not -len(d) <= axis < len(d):
        raise OpInputError(
            f"block_scale_quantize(): attribute 'axis' {axis} is out of range for input dim {list(d)}"
        )


def _moe_dims(node):
    mode = node.params.get("mode")
    rows_port = {
        moe_grouped_matmul_mode.COMBINE: "top_k_scores",
        moe_grouped_matmul_mode.GATHER: "token_index",
    }.get(mode, "token")
    return (1, dims_of(node, rows_port)[-2], dims_of(node, "weight")[-1])


def _moe_bwd_dims(node):
    return (dims_of(node, "first_token_offset")[0], dims_of(node, "token")[-1], dims_of(node, "doutput")[-1])


_REDUCTION_ETC = (
    _op(
        "reduction", NodeType.REDUCTION, [Port("input"), Port("group_offset", required=False)],
        [Output("OUT_0")], (Attr("mode", NO_DEFAULT, _enum(reduction_mode)),),
        positional=("input", "mode"), layout="dims",
        doc="Reduce over the axes where the output's dims (set by the caller) are 1.",
    ),
    _op(
        "block_scale_dequantize", NodeType.BLOCK_SCALE_DEQUANTIZE, [Port("input"), Port("descale")],
        [Output("OUT_0", dims=like("input"), dtype=_FLOAT)],
        (Attr("block_size", NO_DEFAULT, as_ints), Attr("is_negative_scale", False, as_bool)),
    ),
    _op(
        "block_scale_quantize", NodeType.BLOCK_SCALE_QUANTIZE, [Port("input")],
        [Output("Y", dims=like("input")), Output("scale", dims=_block_scale_dims)],
        (Attr("block_size", NO_DEFAULT, as_int), Attr("axis", None, as_int), Attr("transpose", False, as_bool)),
        check=_check_block_quantize,
        doc="Quantize with one scale per block_size elements along axis (default: the last).",
    ),
    _op(
        "moe_grouped_matmul", NodeType.MOE_GROUPED_MATMUL,
        [
            Port("token"), Port("weight"), Port("first_token_offset", dtypes=INTS),
            Port("token_index", required=False), Port("token_ks", required=False), Port("top_k_scores", required=False),
        ],
        [Output("OUT_0", dims=_moe_dims)],
        (Attr("mode", moe_grouped_matmul_mode.NONE, _enum(moe_grouped_matmul_mode)), Attr("top_k", 0, as_int)),
    ),
    _op(
        "moe_grouped_matmul_bwd", NodeType.MOE_GROUPED_MATMUL_BWD,
        [Port("doutput"), Port("token"), Port("first_token_offset", dtypes=INTS)],
        [Output("dweight", dims=_moe_bwd_dims)], layout="dims",
    ),
)  # fmt: skip


# -- convolution ------------------------------------------------------------------------------
def _conv_geometry(node, spatial: int):
    p = node.params
    sym = p.get("padding")
    pre = p.get("pre_padding") or sym or (0,) * spatial
    post = p.get("post_padding") or sym or (0,) * spatial
    stride = p.get("stride") or (1,) * spatial
    dilation = p.get("dilation") or (1,) * spatial
    for name, value in (("padding", pre), ("post_padding", post), ("stride", stride), ("dilation", dilation)):
        if len(value) != spatial:
            raise OpInputError(
                f"{node.op}(): attribute {name!r} {list(value)} must have {spatial} entries (one per spatial dim)"
            )
    return pre, post, stride, dilation


def _conv_fprop_dims(node):
    x, w = dims_of(node, "image"), dims_of(node, "weight")
    pre, post, stride, dil = _conv_geometry(node, len(x) - 2)
    spatial = [
        (x[i + 2] + pre[i] + post[i] - ((w[i + 2] - 1) * dil[i] + 1)) // stride[i] + 1
        for i in range(len(x) - 2)
    ]
    return (x[0], w[0], *spatial)


def _conv_dgrad_dims(node):
    dy, w = dims_of(node, "loss"), dims_of(node, "filter")
    pre, post, stride, dil = _conv_geometry(node, len(dy) - 2)
    spatial = [
        (dy[i + 2] - 1) * stride[i] + (w[i + 2] - 1) * dil[i] + 1 - pre[i] - post[i]
        for i in range(len(dy) - 2)
    ]
    return (dy[0], w[1], *spatial)


def _conv_check(a: str, b: str):
    def check(node) -> None:
        x, y = node.inputs[a], node.inputs[b]
        if x.dim and y.dim and len(x.dim) != len(y.dim):
            raise OpInputError(
                f"{node.op}(): ports {a!r} (dim {list(x.dim)}) and {b!r} (dim {list(y.dim)}) must have the same rank"
            )
        if x.dim:
            _conv_geometry(node, len(x.dim) - 2)

    return check


_CONV_ATTRS = (
    Attr("padding", None, as_ints),
    Attr("pre_padding", None, as_ints),
    Attr("post_padding", None, as_ints),
    Attr("stride", None, as_ints),
    Attr("dilation", None, as_ints),
    Attr("convolution_mode", convolution_mode.CROSS_CORRELATION, _enum(convolution_mode)),
)
_CONV_RANK = (3, 4, 5)

_CONV = (
    _op(
        "conv_fprop", NodeType.CONV_FPROP, [Port("image", ranks=_CONV_RANK), Port("weight", ranks=_CONV_RANK)],
        [Output("Y", dims=_conv_fprop_dims)], _CONV_ATTRS, check=_conv_check("image", "weight"),
    ),
    _op(
        "conv_dgrad", NodeType.CONV_DGRAD, [Port("loss", ranks=_CONV_RANK), Port("filter", ranks=_CONV_RANK)],
        [Output("DX", dims=_conv_dgrad_dims)], _CONV_ATTRS, layout="dims", check=_conv_check("loss", "filter"),
        doc="Data gradient; strided output dims are ambiguous: set_dim() pins them.",
    ),
    _op(
        "conv_wgrad", NodeType.CONV_WGRAD, [Port("image", ranks=_CONV_RANK), Port("loss", ranks=_CONV_RANK)],
        [Output("DW")], _CONV_ATTRS, layout="dims", check=_conv_check("image", "loss"),
        doc="Weight gradient; the filter dims are the caller's (set_dim).",
    ),
)  # fmt: skip


# -- structural -------------------------------------------------------------------------------
def _as_slices(value):
    out = tuple(value)
    for s in out:
        if not isinstance(s, slice):
            raise TypeError("expected a list of python slice objects")
    return out


def _slice_dims(node):
    d = dims_of(node, "input")
    slices = node.params.get("slices") or ()
    out = [len(range(*s.indices(n))) for s, n in zip(slices, d)]
    return (*out, *d[len(out) :])


def _check_slice(node) -> None:
    d = node.inputs["input"].dim
    slices = node.params.get("slices") or ()
    if d and len(slices) > len(d):
        raise OpInputError(f"slice(): {len(slices)} slices for input of rank {len(d)} (dim {list(d)})")


def _check_transpose(node) -> None:
    perm = node.params["permutation"]
    d = node.inputs["input"].dim
    if sorted(perm) != list(range(len(perm))) or (d and len(perm) != len(d)):
        raise OpInputError(
            f"transpose(): attribute 'permutation' {list(perm)} is not a permutation of input dim {list(d)}"
        )


def _concat_axis(node) -> int:
    first = node.inputs["inputs"][0].dim
    axis = node.params["axis"]
    return axis + len(first) if axis < 0 else axis


def _concat_dims(node):
    tensors = node.inputs["inputs"]
    if any(not t.dim for t in tensors):
        raise UnknownDims("inputs")
    axis = _concat_axis(node)
    first = list(tensors[0].dim)
    first[axis] = sum(t.dim[axis] for t in tensors)
    return tuple(first)


def _check_concat(node) -> None:
    tensors = node.inputs["inputs"]
    if any(not t.dim for t in tensors):
        return
    first = tensors[0].dim
    axis = _concat_axis(node)
    if not 0 <= axis < len(first):
        raise OpInputError(
            f"concatenate(): attribute 'axis' {node.params['axis']} is out of range for dim {list(first)}"
        )
    for i, t in enumerate(tensors[1:], 1):
        if len(t.dim) != len(first) or any(a != b for k, (a, b) in enumerate(zip(t.dim, first)) if k != axis):
            raise OpInputError(
                f"concatenate(): port 'inputs'[{i}] (tensor {t.name!r}, dim {list(t.dim)}) does not match "
                f"inputs[0] dim {list(first)} outside axis {axis}"
            )


_STRUCTURAL = (
    _op(
        "reshape", NodeType.RESHAPE, [Port("input")], [Output("OUT_0", dtype=like_dtype("input"))],
        (Attr("reshape_mode", reshape_mode.VIEW_ONLY, _enum(reshape_mode)),), layout="dims", cdt=False,
        doc="Reshape; the target dims are the caller's (set_dim on the output).",
    ),
    _op(
        "slice", NodeType.SLICE, [Port("input")], [Output("OUT_0", dims=_slice_dims, dtype=like_dtype("input"))],
        (Attr("slices", (), _as_slices),), check=_check_slice,
    ),
    _op(
        "transpose", NodeType.TRANSPOSE, [Port("input")],
        [Output("OUT_0", dims=lambda n: tuple(dims_of(n, "input")[i] for i in n.params["permutation"]), dtype=like_dtype("input"))],
        (Attr("permutation", NO_DEFAULT, as_ints),), check=_check_transpose,
        doc="Output axis i reads input axis permutation[i].",
    ),
    _op(
        "concatenate", NodeType.CONCATENATE, [Port("inputs", is_list=True)], [Output("OUT_0", dims=_concat_dims)],
        (Attr("axis", NO_DEFAULT, as_int), Attr("in_place_index", None, as_int)), cdt=False, check=_check_concat,
    ),
    _op(
        "rope", NodeType.ROPE, [Port("input"), Port("freqs")], [Output("OUT_0", dims=like("input"))],
        (Attr("output_scale", 1.0, as_float), Attr("rope_dim", 0, as_int)),
    ),
    _op(
        "rope_backward", NodeType.ROPE_BWD, [Port("dY"), Port("freqs")], [Output("OUT_0", dims=like("dY"))],
        (Attr("output_scale", 1.0, as_float), Attr("rope_dim", 0, as_int)),
    ),
)  # fmt: skip

STRUCTURED_SPECS: tuple[OpSpec, ...] = (*_NORMS, *_REDUCTION_ETC, *_CONV, *_STRUCTURAL)
if len(STRUCTURED_SPECS) != 26:  # pragma: no cover - a table edit gone wrong
    raise RuntimeError(f"structured table has {len(STRUCTURED_SPECS)} rows, expected 26")
