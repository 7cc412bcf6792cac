"""The variant pack: one call's operands, in ascending uid order, each with its own geometry.

Vocabulary: a POSITION is where an operand sits in the pack (`VariantPack.index_of`), an
`OperandBuffer` is the caller's buffer at that position (`VariantPack.operands`). Resolve positions
once (at build), ask for buffers per call. The pointer array (`VariantPack.address`) belongs to
one call: two threads executing one graph each get their own.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from pygraph.execution.errors import UnknownOperandError
from pygraph.ir.tensor import Tensor

__all__ = [
    "DEVICE_CUDA_ANY",
    "DEVICE_HOST",
    "DEVICE_UNKNOWN",
    "OperandBuffer",
    "OperandLayout",
    "VariantPack",
]

DEVICE_HOST = -1
DEVICE_CUDA_ANY = -2
DEVICE_UNKNOWN = -3


class OperandBuffer(NamedTuple):
    """One caller buffer described, not owned: address, shape and stride (elements), dtype, device."""

    pointer: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: Any
    device: int = DEVICE_UNKNOWN


class OperandLayout:
    """A graph's operand order and what each call is checked against; built once per graph.

    ``tensors`` are the operand Tensors by ascending uid. ``positions`` maps every accepted key
    (the Tensor, its uid, its name when unambiguous) to a position. ``declared`` holds each
    operand's declared geometry (what a bare address is read as); ``expected`` the dtype a buffer
    must have (None: unchecked); ``host`` marks pass-by-value operands, exempt from the device rule.
    ``accepted`` holds, per position, the last torch-read buffer whose dtype passed its check: a call
    reading an equal buffer reuses it (an `OperandBuffer` is immutable, so sharing it is invisible).
    """

    __slots__ = (
        "accepted",
        "declared",
        "defaults",
        "expected",
        "host",
        "names",
        "positions",
        "size",
        "tensors",
        "uids",
        "unknown",
    )

    def __init__(
        self,
        tensors: Sequence[Any],
        *,
        declared: Sequence[OperandBuffer],
        host: Sequence[bool],
        other_keys: Mapping[Any, str] | None = None,
    ) -> None:
        self.tensors = tuple(tensors)
        self.size = len(self.tensors)
        self.uids = tuple(t.uid for t in self.tensors)
        if list(self.uids) != sorted(self.uids):
            raise ValueError(f"operand uids must ascend, got {self.uids}")
        self.names = tuple(getattr(t, "name", None) or f"uid {t.uid}" for t in self.tensors)
        self.declared = tuple(declared)
        self.expected = tuple(d.dtype if getattr(d.dtype, "is_set", True) else None for d in self.declared)
        self.host = tuple(bool(h) for h in host)
        positions: dict[Any, int] = {}
        ambiguous: set[str] = set()
        for i, t in enumerate(self.tensors):
            positions[t.uid] = i
            if _hashable(t):
                positions[t] = i
            name = getattr(t, "name", None)
            if name:
                if name in positions:
                    ambiguous.add(name)
                positions[name] = i
        for name in ambiguous:
            del positions[name]
        self.positions = positions
        # keys naming a graph tensor that is not an operand (virtual, filled by the graph): why not
        self.unknown = dict(other_keys or {})
        self.defaults: list[OperandBuffer | None] = [None] * len(self.tensors)
        self.accepted: list[OperandBuffer | None] = [None] * len(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def position(self, key: Any) -> int:
        """The position of a Tensor, uid or name; UnknownOperandError naming the key otherwise."""
        try:
            return self.positions[key]
        except (KeyError, TypeError):
            pass
        uid = getattr(key, "uid", None)
        if uid is not None and uid in self.positions:
            i = self.positions[uid]
            owner = getattr(key, "graph", None)
            if owner is not None and isinstance(key, Tensor) and key is not self.tensors[i]:
                # a pygraph Tensor of another graph: its uid is a number of that graph, not of this one
                raise UnknownOperandError(
                    f"tensor {_key_name(key)} (uid {uid}) is a tensor of graph {getattr(owner, 'name', owner)!r}, "
                    f"not of this one; pass this graph's Tensor, its name or its uid (operands: "
                    f"{', '.join(self.names)})",
                    tensor=_key_name(key),
                )
            return i
        raise UnknownOperandError(self.why_unknown(key), tensor=_key_name(key))

    def why_unknown(self, key: Any) -> str:
        label = _key_name(key)
        for candidate in (key, getattr(key, "uid", None)):
            try:
                reason = self.unknown.get(candidate)
            except TypeError:
                reason = None
            if reason:
                return f"tensor {label}: {reason}; it is not an operand of execute()"
        if isinstance(key, str) and sum(1 for n in self.names if n == key) > 1:
            return f"tensor name {key!r} is ambiguous in this graph; pass the Tensor or its uid"
        return f"{label} names no operand of this graph (operands: {', '.join(self.names)})"


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _key_name(key: Any) -> str:
    name = getattr(key, "name", None)
    if name:
        return repr(name)
    uid = getattr(key, "uid", key)
    return f"uid {uid}" if isinstance(uid, int) else repr(key)


class VariantPack:
    """One call's operands. Built by the execute path; engines read it, never build it."""

    __slots__ = ("_address", "buffers", "device", "layout", "workspace", "workspace_bytes")

    def __init__(
        self,
        layout: OperandLayout,
        buffers: list[OperandBuffer],
        device: int,
        workspace: int = 0,
        workspace_bytes: int | None = 0,
    ) -> None:
        self.layout = layout
        self.buffers = buffers
        self.device = device
        self.workspace = workspace
        self.workspace_bytes = workspace_bytes
        self._address: array | None = None

    @property
    def uids(self) -> tuple[int, ...]:
        return self.layout.uids

    def __len__(self) -> int:
        return len(self.buffers)

    def index_of(self, tensor_or_uid: Any) -> int:
        """The position of an operand (a Tensor, uid or name)."""
        return self.layout.position(tensor_or_uid)

    def operands(self, positions: Iterable[int]) -> list[OperandBuffer]:
        """The buffers at ``positions`` (from `index_of`, resolved once)."""
        buffers = self.buffers
        return [buffers[i] for i in positions]

    def operand(self, position: int) -> OperandBuffer:
        return self.buffers[position]

    @property
    def address(self) -> int:
        """Address of this call's pointer array (uint64 per operand, ascending uid)."""
        arr = self._address
        if arr is None:
            arr = self._address = array("Q", [b[0] for b in self.buffers])
        return arr.buffer_info()[0]

    def pointers(self) -> tuple[int, ...]:
        return tuple(b[0] for b in self.buffers)

    def by_uid(self) -> dict[int, OperandBuffer]:
        return dict(zip(self.layout.uids, self.buffers))

    def __repr__(self) -> str:
        body = ", ".join(
            f"{n}@{b.pointer:#x}{list(b.shape)}" for n, b in zip(self.layout.names, self.buffers)
        )
        return f"VariantPack({body})"
