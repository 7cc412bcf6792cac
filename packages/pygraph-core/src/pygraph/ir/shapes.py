"""Shape helpers: dims normalisation, row-major strides, numpy broadcasting."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pygraph.errors import OpInputError

__all__ = ["INT64_MAX", "bad_dims", "bad_strides", "broadcast", "row_major_stride", "same_extents", "to_dims"]

# the backend and the kernels index in int64: an extent, a stride or an element count past it wraps
INT64_MAX = 2**63 - 1


def to_dims(value: Any, what: str) -> tuple[int, ...]:
    """A dims tuple from a list, tuple or torch.Size (anything iterable of ints)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise OpInputError(f"{what}: expected a sequence of ints, got {value!r}")
    out = []
    for x in value:
        if isinstance(x, bool) or not hasattr(x, "__index__"):
            raise OpInputError(f"{what}: expected a sequence of ints, got {value!r}")
        out.append(int(x))
    return tuple(out)


def bad_dims(dims: Sequence[int]) -> str | None:
    """Why ``dims`` cannot be a tensor's extents, or None: a rank of at least 1, every extent >= 1,
    and the element count within int64.

    There is no zero-extent tensor: a ragged batch whose sequence is empty says so in its offsets
    (the values of a ragged-offset or cu_seqlens tensor), never in a declared dim."""
    if not dims:
        return "a tensor has rank >= 1 (a scalar is dim [1])"
    for axis, extent in enumerate(dims):
        if extent < 1:
            return f"extent {extent} at axis {axis}; every extent is >= 1"
        if extent > INT64_MAX:
            return f"extent {extent} at axis {axis} is beyond int64 (at most 2**63 - 1)"
    count = 1
    for extent in dims:
        count *= extent
        if count > INT64_MAX:  # stopped here: a long list of large extents is no huge product
            return "more than 2**63 - 1 elements, beyond int64"
    return None


def bad_strides(strides: Sequence[int]) -> str | None:
    """Why ``strides`` cannot be a tensor's strides, or None: every stride >= 0 (0 broadcasts) and
    within int64."""
    if not strides:
        return "a tensor has rank >= 1, so at least one stride"
    for axis, stride in enumerate(strides):
        if stride < 0:
            return f"stride {stride} at axis {axis}; every stride is >= 0 (0 broadcasts the axis)"
        if stride > INT64_MAX:
            return f"stride {stride} at axis {axis} is beyond int64 (at most 2**63 - 1)"
    return None


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


def same_extents(a: Sequence[int], b: Sequence[int]) -> bool:
    """True when ``a`` and ``b`` are one shape up to leading unit axes ([1, 4, 16] and [4, 16])."""
    rank = max(len(a), len(b))
    pad_a = (1,) * (rank - len(a)) + tuple(a)
    pad_b = (1,) * (rank - len(b)) + tuple(b)
    return pad_a == pad_b
