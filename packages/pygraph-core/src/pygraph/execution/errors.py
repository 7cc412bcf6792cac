"""Typed refusals of one execute() call. Each names the operand (or the plan) it is about; nothing
has launched."""

from __future__ import annotations

__all__ = [
    "DuplicateOperandError",
    "HandleError",
    "OperandAddressError",
    "OperandDeviceError",
    "OperandDtypeError",
    "OperandError",
    "OperandGeometryError",
    "OperandMissingError",
    "OperandTypeError",
    "ShapeOverrideError",
    "UnknownOperandError",
    "WorkspaceTooSmallError",
]


class OperandError(ValueError):
    """An execute() argument does not fit the graph. ``tensor`` names the operand."""

    def __init__(self, message: str, tensor: str | None = None) -> None:
        super().__init__(message)
        self.tensor = tensor


class OperandMissingError(OperandError, KeyError):
    """An operand of the graph has no buffer in the call."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnknownOperandError(OperandError, KeyError):
    """A key of the call names no operand of the graph."""

    def __str__(self) -> str:
        return str(self.args[0])


class OperandDtypeError(OperandError, TypeError):
    """A buffer's dtype differs from its tensor's declared data_type."""


class OperandTypeError(OperandError, TypeError):
    """The operands are not a mapping (of Tensor, name or uid to buffer)."""


class OperandAddressError(OperandError):
    """A bare int address that cannot be a buffer's: 0 (null), negative, or beyond 64 bits."""


class DuplicateOperandError(OperandError):
    """One operand given twice in one call (as its Tensor and by its name or uid)."""


class OperandGeometryError(OperandError):
    """A buffer's shape, strides or alignment is not what the plan runs: the plan would read or
    write it as the declared tensor, past its end or at the wrong elements."""


class OperandDeviceError(OperandError):
    """A buffer lives on another device than the call's other operands (or the handle's)."""


class WorkspaceTooSmallError(OperandError):
    """The workspace buffer is smaller than the plan needs."""


class HandleError(ValueError, TypeError):
    """A supplied handle whose stream cannot be read, or one of the wrong kind. Both builtins: the
    classic API raised TypeError for a handle of the wrong kind and ValueError for an unreadable one."""


class ShapeOverrideError(ValueError):
    """A plan that runs only the shapes the graph declared was given execute-time shape overrides.

    ``plan`` names the plan (as the plan list names it). Overrides are a backend-plan feature: a
    python plan is compiled for the declared shapes and refuses rather than run another problem.
    """

    def __init__(self, message: str, plan: str | None = None) -> None:
        super().__init__(message)
        self.plan = plan
