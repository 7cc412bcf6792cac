"""Execution: the variant pack, the explicit context, and the per-call path over them."""

from __future__ import annotations

from pygraph.execution.context import ExecutionContext
from pygraph.execution.errors import (
    DuplicateOperandError,
    HandleError,
    OperandAddressError,
    OperandDeviceError,
    OperandDtypeError,
    OperandError,
    OperandGeometryError,
    OperandMissingError,
    OperandTypeError,
    ShapeOverrideError,
    UnknownOperandError,
    WorkspaceTooSmallError,
)
from pygraph.execution.variant_pack import OperandBuffer, VariantPack

__all__ = [
    "DuplicateOperandError",
    "ExecutionContext",
    "HandleError",
    "OperandAddressError",
    "OperandBuffer",
    "OperandDeviceError",
    "OperandDtypeError",
    "OperandError",
    "OperandGeometryError",
    "OperandMissingError",
    "OperandTypeError",
    "ShapeOverrideError",
    "UnknownOperandError",
    "VariantPack",
    "WorkspaceTooSmallError",
]
