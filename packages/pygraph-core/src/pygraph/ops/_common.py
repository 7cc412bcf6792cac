"""Small shared pieces of the op tables: converters and inference helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type
from pygraph.ir.shapes import INT64_MAX, broadcast
from pygraph.ops.build import dims_of, dtype_of

__all__ = [
    "FLOAT_ONLY",
    "INTS",
    "as_bool",
    "as_callable",
    "as_float",
    "as_int",
    "as_ints",
    "as_str",
    "const_dtype",
    "like",
    "like_dtype",
    "optional_float",
    "port_given",
]

INTS = frozenset({data_type.INT32, data_type.INT64})
FLOAT_ONLY = frozenset({data_type.FLOAT})


def as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    return float(value)


def optional_float(value: Any) -> float | None:
    return None if value is None else as_float(value)


def as_int(value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("expected an int")
    if not -INT64_MAX - 1 <= int(value) <= INT64_MAX:
        raise ValueError("beyond int64 (the backend's integer attributes are int64)")
    return int(value)


def as_bool(value: Any) -> bool:
    if not isinstance(value, (bool, int)):
        raise TypeError("expected a bool")
    return bool(value)


def as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a str")
    return value


def as_callable(value: Any) -> Any:
    if not callable(value):
        raise TypeError("expected a callable")
    return value


def as_ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError("expected a sequence of ints")
    return tuple(as_int(v) for v in value)


def like(port: str) -> Callable[[Any], tuple[int, ...]]:
    """Output dims equal to an input port's dims."""
    return lambda node: dims_of(node, port)


def like_dtype(port: str) -> Callable[[Any], data_type]:
    return lambda node: dtype_of(node, port)


def const_dtype(dt: data_type) -> Callable[[Any], data_type]:
    return lambda node: dt


def broadcast_ports(node: Any, ports: tuple[str, ...]) -> tuple[int, ...]:
    """The numpy broadcast of the given ports' dims; OpInputError naming them when they disagree."""
    shapes = [dims_of(node, p) for p in ports]
    out = broadcast(shapes)
    if out is None:
        shown = ", ".join(f"{p}={list(s)}" for p, s in zip(ports, shapes))
        raise OpInputError(f"{node.op}(): ports do not broadcast: {shown}")
    return out


def port_given(port: str):
    """A conditional output's condition: the optional input ``port`` was wired."""
    return lambda node: node.inputs.get(port) is not None
