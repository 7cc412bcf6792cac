"""pygraph: a Python graph API for deep-learning ops, dispatched over kernel engines and the cuDNN backend.

Importing this package imports no framework, no DSL and no family package: the heavier pieces
load on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pygraph._version import __version__
from pygraph.errors import (
    BackendPayloadError,
    CacheWarning,
    ConfigurationWarning,
    DeserializationError,
    GraphNotSupportedError,
    GraphStateError,
    InvalidGraphError,
    KnobError,
    KnobTypeError,
    ManifestError,
    NotFoundError,
    OpInputError,
    PlanIndexError,
    StreamCaptureError,
    UnknownEngineError,
    UnknownKnobError,
)
from pygraph.node_types import NodeType

# Public name -> module that defines it; resolved on first access (PEP 562).
_LAZY: dict[str, str] = {
    "engines": "pygraph.engines",
    "disk_cache": "pygraph.disk_cache",
    "testing": "pygraph.testing",
    "tuning": "pygraph.tuning",
    "Graph": "pygraph.graph",
    "pygraph": "pygraph.graph",  # classic spelling: cudnn.pygraph
    "Tensor": "pygraph.ir.tensor",
    "Node": "pygraph.ir.node",
    "data_type": "pygraph.ir.dtypes",
    "heur_mode": "pygraph.ir.dtypes",
    "knob_type": "pygraph.ir.dtypes",
    "build_plan_policy": "pygraph.ir.dtypes",
    "norm_forward_phase": "pygraph.ir.dtypes",
    "reduction_mode": "pygraph.ir.dtypes",
    "reshape_mode": "pygraph.ir.dtypes",
    "convolution_mode": "pygraph.ir.dtypes",
    "diagonal_alignment": "pygraph.ir.dtypes",
    "attention_implementation": "pygraph.ir.dtypes",
    "moe_grouped_matmul_mode": "pygraph.ir.dtypes",
    "tensor_reordering": "pygraph.ir.dtypes",
    "scalar_type": "pygraph.ir.dtypes",
    "behavior_note": "pygraph.ir.dtypes",
    "numerical_note": "pygraph.ir.dtypes",
    "cuda_graph_retention": "pygraph.ir.dtypes",
    "VariantPack": "pygraph.execution.variant_pack",
    "OperandBuffer": "pygraph.execution.variant_pack",
    "PlanConfig": "pygraph.engines.base",
    "ExecutionContext": "pygraph.execution.context",
}

_ALIASES = {"pygraph": "Graph"}

if TYPE_CHECKING:
    from pygraph import disk_cache, engines, testing, tuning
    from pygraph.engines.base import PlanConfig
    from pygraph.execution.context import ExecutionContext
    from pygraph.execution.variant_pack import OperandBuffer, VariantPack
    from pygraph.graph import Graph
    from pygraph.graph import Graph as pygraph
    from pygraph.ir.dtypes import (
        attention_implementation,
        behavior_note,
        build_plan_policy,
        convolution_mode,
        cuda_graph_retention,
        data_type,
        diagonal_alignment,
        heur_mode,
        knob_type,
        moe_grouped_matmul_mode,
        norm_forward_phase,
        numerical_note,
        reduction_mode,
        reshape_mode,
        scalar_type,
        tensor_reordering,
    )
    from pygraph.ir.node import Node
    from pygraph.ir.tensor import Tensor

__all__ = [
    "BackendPayloadError",
    "CacheWarning",
    "ConfigurationWarning",
    "DeserializationError",
    "ExecutionContext",
    "Graph",
    "GraphNotSupportedError",
    "GraphStateError",
    "InvalidGraphError",
    "KnobError",
    "KnobTypeError",
    "ManifestError",
    "Node",
    "NodeType",
    "NotFoundError",
    "OpInputError",
    "OperandBuffer",
    "PlanConfig",
    "PlanIndexError",
    "StreamCaptureError",
    "Tensor",
    "UnknownEngineError",
    "UnknownKnobError",
    "VariantPack",
    "__version__",
    "attention_implementation",
    "behavior_note",
    "build_plan_policy",
    "convolution_mode",
    "cuda_graph_retention",
    "data_type",
    "diagonal_alignment",
    "disk_cache",
    "engines",
    "heur_mode",
    "knob_type",
    "moe_grouped_matmul_mode",
    "norm_forward_phase",
    "numerical_note",
    "pygraph",
    "reduction_mode",
    "reshape_mode",
    "scalar_type",
    "tensor_reordering",
    "testing",
    "tuning",
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pygraph' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name == f"pygraph.{name}" else getattr(module, _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
