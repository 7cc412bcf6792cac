"""Public exception types."""

from __future__ import annotations

__all__ = ["GraphNotSupportedError", "GraphStateError", "ManifestError", "OpInputError"]


class GraphNotSupportedError(Exception):
    """The graph (or a plan for it) cannot be served: by the backend, by an engine, or by any plan."""


class GraphStateError(RuntimeError):
    """A call needs the graph in another lifecycle state (e.g. a mutation after the freeze)."""


class ManifestError(RuntimeError):
    """The engine manifest is inconsistent: an id moved or reused, blocks overlap, anchors collide."""


class OpInputError(TypeError, ValueError):
    """A builder got bad input: the message names the op, the port (or attribute) and the value."""
