"""pygraph: a Python graph API for deep-learning ops, dispatched over kernel engines and the cuDNN backend.

Importing this package imports no framework, no DSL and no family package: the heavier pieces
load on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pygraph._version import __version__
from pygraph.errors import GraphNotSupportedError, GraphStateError, ManifestError
from pygraph.node_types import NodeType

# Public name -> module that defines it; resolved on first access (PEP 562).
_LAZY: dict[str, str] = {
    "engines": "pygraph.engines",
    "testing": "pygraph.testing",
}

if TYPE_CHECKING:
    from pygraph import engines, testing

__all__ = [
    "GraphNotSupportedError",
    "GraphStateError",
    "ManifestError",
    "NodeType",
    "__version__",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pygraph' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name == f"pygraph.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
