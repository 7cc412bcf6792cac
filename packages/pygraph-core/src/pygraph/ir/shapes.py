"""Shape helpers: dims normalisation, row-major strides, numpy broadcasting."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["broadcast", "row_major_stride", "to_dims"]


def to_dims(value: Any, what: str) -> tuple[int, ...]:
    """A dims tuple from a list, tuple or torch.Size (anything iterable of ints)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what}: expected a sequence of ints, got {value!r}")
    out = []
    for x in value:
        if isinstance(x, bool) or not hasattr(x, "__index__"):
            raise TypeError(f"{what}: expected a sequence of ints, got {value!r}")
        out.append(int(x))
    return tuple(out)


def row_major_stride(dim: Sequence[int]) -> tuple[int, ...]:
    stride = [1] * len(dim)
    for i in range(len(dim) - 2, -1, -1):
        stride[i] = stride[i + 1] * max(int(dim[i + 1]), 1)
    return tuple(stride)


def broadcast(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The numpy broadcast of ``shapes`` (right-aligned), or None when two extents disagree."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        pad = rank - len(s)
        for i, x in enumerate(s):
            cur = out[pad + i]
            if cur == 1:
                out[pad + i] = x
            elif x not in (1, cur):
                return None
    return tuple(out)
