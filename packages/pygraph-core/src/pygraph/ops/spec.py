"""`OpSpec`: the one typed description of an op.

A spec is the single source for the op's builder (`pygraph.ops.build`), its validation and
shape/dtype inference, its documentation (`tools/gen_ops_doc.py`) and its lowering
(`pygraph.lowering.backend`). The pointwise table, the structured table and the SDPA capture schema
are three ways of writing specs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pygraph.ir.dtypes import data_type
from pygraph.node_types import NodeType

if TYPE_CHECKING:
    from pygraph.ir.node import Node

__all__ = ["NO_DEFAULT", "Attr", "Lowering", "OpSpec", "Output", "Port"]

DimsRule = Callable[["Node"], "tuple[int, ...] | list[int] | None"]
DtypeRule = Callable[["Node"], data_type]


class _NoDefault(enum.Enum):
    NO_DEFAULT = "NO_DEFAULT"


NO_DEFAULT = _NoDefault.NO_DEFAULT


@dataclass(frozen=True)
class Port:
    """A tensor input. ``ranks``/``dtypes`` (when given) are checked at build time."""

    name: str
    required: bool = True
    is_list: bool = False
    ranks: tuple[int, ...] | None = None
    min_rank: int | None = None
    dtypes: frozenset[data_type] | None = None
    scalar_ok: bool = False  # a python number becomes a pass-by-value scalar tensor


@dataclass(frozen=True)
class Attr:
    """A non-tensor parameter. ``convert`` normalises (and rejects) a user value; ``tensor_ok``
    lets a Tensor take the attribute's place (it is then recorded as an input port)."""

    name: str
    default: Any = None
    convert: Callable[[Any], Any] | None = None
    tensor_ok: bool = False

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT


@dataclass(frozen=True)
class Output:
    """An output port. ``when`` (over the node) decides whether a conditional output exists;
    ``from_kwarg`` outputs are tensors the caller passes as keyword (SDPA's rng_dump, dBias...)."""

    name: str
    dims: DimsRule | None = None
    dtype: DtypeRule | None = None
    when: Callable[[Node], bool] | None = None
    when_doc: str = ""
    from_kwarg: bool = False
    virtual: bool = True


@dataclass(frozen=True)
class Lowering:
    """How the op lowers to ``cudnn._pybind_module.backend_graph``.

    ``output_layout``: "user" pushes only user-assigned output dims/strides; "dims" also pushes
    IR dims (ops whose output dims the backend cannot infer: reshape, reduction, dgrad...);
    "always" pushes dims and strides (SDPA's O/Stats layout is the caller's choice).
    """

    method: str
    output_layout: str = "user"
    compute_data_type: bool = True
    # (node, kwargs, lowerer) -> None: reshapes the call's keywords where a port or attribute is
    # not one backend keyword (SDPA's dropout tuple). None for the uniform case.
    adjust: Callable[[Node, dict[str, Any], Any], None] | None = None


@dataclass(frozen=True)
class OpSpec:
    name: str
    node_type: NodeType
    family: str  # "matmul" | "pointwise" | "structured" | "sdpa" | "linear_attention"
    inputs: tuple[Port, ...]
    outputs: tuple[Output, ...]
    attrs: tuple[Attr, ...] = ()
    positional: tuple[str, ...] = ()  # names (ports or attrs) accepted positionally, in order
    lowering: Lowering | None = None  # None: python-only (no backend lowering)
    check: Callable[[Node], None] | None = None  # cross-port validation, raises OpInputError
    single_return: bool | None = None  # None: a single returned output comes back bare
    mode: str | None = None  # pointwise: params["mode"]
    doc: str = ""
    _index: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.inputs] + [a.name for a in self.attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"op spec {self.name!r}: a name is both a port and an attribute, or repeats")
        for n in self.positional:
            if n not in names:
                raise ValueError(f"op spec {self.name!r}: positional name {n!r} is not a port or attribute")
        self._index.update({p.name: p for p in self.inputs})
        self._index.update({a.name: a for a in self.attrs})
        self._index.update({o.name: o for o in self.outputs if o.from_kwarg})

    @property
    def is_lowerable(self) -> bool:
        return self.lowering is not None

    @property
    def returned_outputs(self) -> tuple[Output, ...]:
        return tuple(o for o in self.outputs if not o.from_kwarg)

    @property
    def returns_single(self) -> bool:
        if self.single_return is not None:
            return self.single_return
        return len(self.returned_outputs) == 1

    def lookup(self, name: str) -> Port | Attr | Output | None:
        return self._index.get(name)
