"""`Tensor`: one tensor descriptor of a graph (no storage).

Every public write goes through the owning graph's mutation guard: after the freeze it raises
`GraphStateError`; before it, it invalidates an earlier validate(). dims and strides are tuples, so
they cannot be edited in place. Every extent is >= 1 and every stride >= 0, and both (and the
element count) fit int64, refused at the setter; whether dim and stride have one rank, and whether
the last element's offset fits int64, is checked where the tensor is read (the builder that wires
it, and validate()), since the classic ``set_dim(...).set_stride(...)`` passes through a mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import data_type, data_type_arg, enum_arg, tensor_reordering
from pygraph.ir.shapes import bad_dims, bad_strides, row_major_stride, to_dims

if TYPE_CHECKING:
    from pygraph.ir.container import GraphIR
    from pygraph.ir.node import Node

__all__ = ["Tensor"]


class Tensor:
    """A tensor of a graph. Create it with `Graph.tensor()` or get it back from an op builder."""

    __slots__ = (
        "_data_type",
        "_dim",
        "_dim_assigned",
        "_dtype_assigned",
        "_inferred_dtype",
        "_ir",
        "_is_pass_by_value",
        "_is_virtual",
        "_name",
        "_producer",
        "_ragged_offset",
        "_ragged_offset_multiplier",
        "_reordering_type",
        "_scalar_type",
        "_stride",
        "_stride_assigned",
        "_stride_default",
        "_uid",
        "_uid_assigned",
        "_value",
    )

    def __init__(self, ir: GraphIR, *, name: str, uid: int, user_uid: bool) -> None:
        s = object.__setattr__
        s(self, "_ir", ir)
        s(self, "_name", name)
        s(self, "_uid", uid)
        s(self, "_uid_assigned", user_uid)
        s(self, "_dim", ())
        s(self, "_stride", ())
        s(self, "_dim_assigned", False)
        s(self, "_stride_assigned", False)
        s(self, "_stride_default", False)  # the row-major default Graph.tensor() derived from dim
        s(self, "_data_type", data_type.NOT_SET)
        s(self, "_dtype_assigned", False)
        s(self, "_inferred_dtype", data_type.NOT_SET)
        s(self, "_is_virtual", False)
        s(self, "_is_pass_by_value", False)
        s(self, "_ragged_offset", None)
        s(self, "_ragged_offset_multiplier", 1)
        s(self, "_reordering_type", tensor_reordering.NONE)
        s(self, "_producer", None)
        s(self, "_value", None)
        s(self, "_scalar_type", None)

    # -- the guard ------------------------------------------------------------------------------
    def __setattr__(self, key: str, value: Any) -> None:
        self._ir.before_mutation(f"setting Tensor.{key} on {self._name!r}")
        if key.startswith("_") or not hasattr(type(self), key):
            raise AttributeError(f"pygraph.Tensor has no writable attribute {key!r}")
        object.__setattr__(self, key, value)

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"pygraph.Tensor attribute {key!r} cannot be deleted")

    def _guard(self, what: str) -> None:
        self._ir.before_mutation(f"Tensor.{what} on {self._name!r}")

    # -- readable attributes ----------------------------------------------------------------------
    @property
    def graph(self) -> Any:
        """The owning `pygraph.Graph`."""
        return self._ir.owner

    @property
    def producer(self) -> Node | None:
        """The node whose output this tensor is, or None for a graph input."""
        return self._producer

    @property
    def uid(self) -> int:
        return self._uid

    @uid.setter
    def uid(self, value: int) -> None:
        self._ir.assign_user_uid(self, value)

    @property
    def uid_assigned(self) -> bool:
        """True when the user chose this uid (a user uid is never renumbered)."""
        return self._uid_assigned

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str):
            raise OpInputError(f"Tensor.set_name() on {self._name!r}: expected a str, got {value!r}")
        object.__setattr__(self, "_name", value)

    @property
    def dim(self) -> tuple[int, ...]:
        return self._dim

    @dim.setter
    def dim(self, value: Any) -> None:
        dims = to_dims(value, f"Tensor.set_dim() on {self._name!r}")
        reason = bad_dims(dims)
        if reason is not None:
            raise OpInputError(f"Tensor.set_dim() on {self._name!r}: dim {list(dims)}: {reason}")
        object.__setattr__(self, "_dim", dims)
        object.__setattr__(self, "_dim_assigned", True)
        if self._stride_default:  # a default follows the dims it was derived from
            object.__setattr__(self, "_stride", row_major_stride(dims))

    @property
    def stride(self) -> tuple[int, ...]:
        return self._stride

    @stride.setter
    def stride(self, value: Any) -> None:
        strides = to_dims(value, f"Tensor.set_stride() on {self._name!r}")
        reason = bad_strides(strides)
        if reason is not None:
            raise OpInputError(f"Tensor.set_stride() on {self._name!r}: stride {list(strides)}: {reason}")
        object.__setattr__(self, "_stride", strides)
        object.__setattr__(self, "_stride_assigned", True)
        object.__setattr__(self, "_stride_default", False)

    @property
    def dim_assigned(self) -> bool:
        """True when dims came from the user (not inferred): only these are pushed for outputs."""
        return self._dim_assigned

    @property
    def stride_assigned(self) -> bool:
        return self._stride_assigned

    @property
    def data_type(self) -> data_type:
        """The user's dtype; else the graph's io/intermediate dtype; else the op's inferred one."""
        if self._dtype_assigned:
            return self._data_type
        ctx = self._ir.context
        default = ctx.intermediate_data_type if self._is_virtual else ctx.io_data_type
        if default.is_set:
            return default
        return self._inferred_dtype

    @data_type.setter
    def data_type(self, value: Any) -> None:
        dt = data_type_arg(value, f"Tensor.set_data_type() on {self._name!r}")
        object.__setattr__(self, "_data_type", dt)
        object.__setattr__(self, "_dtype_assigned", dt.is_set)

    @property
    def data_type_assigned(self) -> bool:
        return self._dtype_assigned

    @property
    def is_virtual(self) -> bool:
        return self._is_virtual

    @is_virtual.setter
    def is_virtual(self, value: bool) -> None:
        object.__setattr__(self, "_is_virtual", bool(value))

    @property
    def is_pass_by_value(self) -> bool:
        return self._is_pass_by_value

    @is_pass_by_value.setter
    def is_pass_by_value(self, value: bool) -> None:
        object.__setattr__(self, "_is_pass_by_value", bool(value))

    @property
    def ragged_offset(self) -> Tensor | None:
        return self._ragged_offset

    @ragged_offset.setter
    def ragged_offset(self, value: Tensor | None) -> None:
        if value is not None:
            self._ir.check_member(value, "ragged_offset", f"tensor {self._name!r}")
        object.__setattr__(self, "_ragged_offset", value)

    @property
    def ragged_offset_multiplier(self) -> int:
        return self._ragged_offset_multiplier

    @ragged_offset_multiplier.setter
    def ragged_offset_multiplier(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OpInputError(
                f"Tensor.set_ragged_offset_multiplier() on {self._name!r}: expected an int >= 1, got {value!r}"
            )
        object.__setattr__(self, "_ragged_offset_multiplier", value)

    @property
    def reordering_type(self) -> Any:
        return self._reordering_type

    @reordering_type.setter
    def reordering_type(self, value: Any) -> None:
        member = enum_arg(value, tensor_reordering, f"Tensor.set_reordering_type() on {self._name!r}")
        object.__setattr__(self, "_reordering_type", member)

    @property
    def value(self) -> Any:
        """The constant of a `tensor_scalar` (None otherwise)."""
        return self._value

    @property
    def scalar_type(self) -> Any:
        return self._scalar_type

    # -- classic setters (fluent) and getters ----------------------------------------------------
    def set_dim(self, dim: Any) -> Tensor:
        self.dim = dim
        return self

    def set_stride(self, stride: Any) -> Tensor:
        self.stride = stride
        return self

    def set_data_type(self, value: Any) -> Tensor:
        self.data_type = value
        return self

    def set_name(self, name: str) -> Tensor:
        self.name = name
        return self

    def set_uid(self, uid: int) -> Tensor:
        self.uid = uid
        return self

    def set_is_virtual(self, value: bool) -> Tensor:
        self.is_virtual = value
        return self

    def set_output(self, value: bool) -> Tensor:
        self.is_virtual = not value
        return self

    def set_is_pass_by_value(self, value: bool) -> Tensor:
        self.is_pass_by_value = value
        return self

    def set_ragged_offset(self, value: Tensor) -> Tensor:
        self.ragged_offset = value
        return self

    def set_ragged_offset_multiplier(self, value: int) -> Tensor:
        self.ragged_offset_multiplier = value
        return self

    def set_reordering_type(self, value: Any) -> Tensor:
        self.reordering_type = value
        return self

    def get_dim(self) -> list[int]:
        return list(self._dim)

    def get_stride(self) -> list[int]:
        return list(self._stride)

    def get_data_type(self) -> data_type:
        return self.data_type

    def get_name(self) -> str:
        return self._name

    def get_uid(self) -> int:
        return self._uid

    def get_is_virtual(self) -> bool:
        return self._is_virtual

    def get_is_pass_by_value(self) -> bool:
        return self._is_pass_by_value

    def get_ragged_offset_multiplier(self) -> int:
        return self._ragged_offset_multiplier

    def get_reordering_type(self) -> Any:
        return self._reordering_type

    # -- internal (IR-side) writes: inference, renumbering, backend copy-back --------------------
    def _set_inferred(
        self, dim: tuple[int, ...] | None, stride: tuple[int, ...] | None, dtype: data_type
    ) -> None:
        s = object.__setattr__
        if dim is not None and not self._dim_assigned:
            s(self, "_dim", tuple(dim))
        if stride is not None and not self._stride_assigned:
            s(self, "_stride", tuple(stride))
        s(self, "_inferred_dtype", dtype)

    def _raw_set(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what `inspect()` and the JSON repr show)."""
        return {
            "uid": self._uid,
            "name": self._name,
            "dim": list(self._dim),
            "stride": list(self._stride),
            "data_type": self.data_type.name,
            "is_virtual": self._is_virtual,
            "is_pass_by_value": self._is_pass_by_value,
            "producer": self._producer.name if self._producer is not None else None,
        }

    def __repr__(self) -> str:
        dt = self.data_type.name
        return f"Tensor(name={self._name!r}, uid={self._uid}, dim={list(self._dim)}, stride={list(self._stride)}, data_type={dt}, is_virtual={self._is_virtual})"
