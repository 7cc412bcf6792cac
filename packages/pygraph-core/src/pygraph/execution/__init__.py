"""Execution: the variant pack, the explicit context, and the per-call path over them."""

from __future__ import annotations

from pygraph.execution.context import ExecutionContext
from pygraph.execution.errors import (
    HandleError,
    OperandDeviceError,
    OperandDtypeError,
    OperandError,
    OperandMissingError,
    ShapeOverrideError,
    UnknownOperandError,
    WorkspaceTooSmallError,
)
from pygraph.execution.variant_pack import OperandBuffer, VariantPack

__all__ = [
    "ExecutionContext",
    "HandleError",
    "OperandBuffer",
    "OperandDeviceError",
    "OperandDtypeError",
    "OperandError",
    "OperandMissingError",
    "ShapeOverrideError",
    "UnknownOperandError",
    "VariantPack",
    "WorkspaceTooSmallError",
]
