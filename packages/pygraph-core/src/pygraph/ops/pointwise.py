"""The pointwise table: 54 uniform builders. Each row is one `OpSpec` (node params["mode"] = name)."""

from __future__ import annotations

from pygraph.ir.dtypes import data_type
from pygraph.node_types import NodeType
from pygraph.ops._common import as_float, as_int, broadcast_ports, const_dtype, optional_float
from pygraph.ops.build import UnknownDims
from pygraph.ops.spec import NO_DEFAULT, Attr, Lowering, OpSpec, Output, Port

__all__ = ["POINTWISE_SPECS"]

_UNARY = (
    "abs ceil cos elu erf exp floor gelu gelu_approx_tanh identity log logical_not neg reciprocal "
    "rsqrt sigmoid sin softplus sqrt tan tanh"
).split()
_BINARY_AB = "add add_square div logical_and logical_or mul sub".split()
_BINARY_INPUT01 = "max min mod pow".split()
_CMP = "cmp_eq cmp_ge cmp_gt cmp_le cmp_lt cmp_neq".split()
_BACKWARD = (
    "elu_backward gelu_approx_tanh_backward gelu_backward sigmoid_backward softplus_backward tanh_backward"
).split()

_CLIPS = (
    Attr("negative_slope", None, optional_float),
    Attr("lower_clip", None, optional_float),
    Attr("upper_clip", None, optional_float),
)

# name -> (ports, attributes)
_ROWS: dict[str, tuple[tuple[str, ...], tuple[Attr, ...]]] = {
    **{op: (("input",), ()) for op in _UNARY},
    **{op: (("a", "b"), ()) for op in _BINARY_AB},
    **{op: (("input0", "input1"), ()) for op in _BINARY_INPUT01},
    **{op: (("input", "comparison"), ()) for op in _CMP},
    "bias": (("input", "bias"), ()),
    "scale": (("input", "scale"), ()),
    "binary_select": (("input0", "input1", "mask"), ()),
    **{op: (("loss", "input"), ()) for op in _BACKWARD},
    "relu": (("input",), _CLIPS),
    "relu_backward": (("loss", "input"), _CLIPS),
    "leaky_relu": (("input",), (Attr("negative_slope", NO_DEFAULT, as_float),)),
    "leaky_relu_backward": (("loss", "input"), (Attr("negative_slope", NO_DEFAULT, as_float),)),
    "swish": (("input",), (Attr("swish_beta", None, optional_float),)),
    "swish_backward": (("loss", "input"), (Attr("swish_beta", None, optional_float),)),
    "gen_index": (("input",), (Attr("axis", NO_DEFAULT, as_int),)),
}

_BOOLEAN_OUT = frozenset({*_CMP, "logical_and", "logical_or", "logical_not"})


def _dims(ports: tuple[str, ...]):
    return lambda node: broadcast_ports(node, ports)


def _check(ports: tuple[str, ...]):
    def check(node) -> None:
        try:
            broadcast_ports(node, ports)
        except UnknownDims:
            pass

    return check


def _spec(op: str, ports: tuple[str, ...], attrs: tuple[Attr, ...]) -> OpSpec:
    if op in _BOOLEAN_OUT:
        dtype = const_dtype(data_type.BOOLEAN)
    elif op == "gen_index":
        dtype = const_dtype(data_type.INT32)
    else:
        dtype = None
    return OpSpec(
        name=op,
        node_type=NodeType.POINTWISE,
        family="pointwise",
        inputs=tuple(Port(p, scalar_ok=True) for p in ports),
        attrs=attrs,
        outputs=(Output("OUT_0", dims=_dims(ports), dtype=dtype),),
        positional=ports + tuple(a.name for a in attrs),
        lowering=Lowering(op),
        check=_check(ports),
        mode=op,
        doc=f"Pointwise {op}; numpy broadcasting over {', '.join(ports)}.",
    )


POINTWISE_SPECS: tuple[OpSpec, ...] = tuple(_spec(op, ports, attrs) for op, (ports, attrs) in _ROWS.items())
if len(POINTWISE_SPECS) != 54:  # pragma: no cover - a table edit gone wrong
    raise RuntimeError(f"pointwise table has {len(POINTWISE_SPECS)} rows, expected 54")
