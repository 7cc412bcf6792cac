"""Public exception and warning types: the one error vocabulary of pygraph.

Each is a subclass of the builtin a classic caller already catches (``ValueError``, ``TypeError``,
``RuntimeError``, ``KeyError``, ``ImportError``), and each message names the call, the thing (tensor,
node, knob, env var, file), the value seen and what would be accepted. ``docs/errors.md`` lists them
with an example each; the refusals of one ``execute()`` call are in `pygraph.execution.errors`.
"""

from __future__ import annotations

__all__ = [
    "BackendPayloadError",
    "CacheWarning",
    "ConfigurationWarning",
    "DeserializationError",
    "GraphNotSupportedError",
    "GraphStateError",
    "InvalidGraphError",
    "KnobError",
    "KnobTypeError",
    "ManifestError",
    "MissingExtraError",
    "NotFoundError",
    "OpInputError",
    "PlanCacheWarning",
    "PlanIndexError",
    "StreamCaptureError",
    "UnknownEngineError",
    "UnknownKnobError",
]


class GraphNotSupportedError(RuntimeError):
    """The graph (or a plan for it) cannot be served: by the backend, by an engine, or by any plan."""


class GraphStateError(RuntimeError):
    """A call needs the graph in another lifecycle state (e.g. a mutation after the freeze)."""


class ManifestError(RuntimeError):
    """The engine manifest is inconsistent: an id moved or reused, blocks overlap, anchors collide."""


class OpInputError(TypeError, ValueError):
    """A builder or setter got bad input: the message names the op (or the setter), the port,
    attribute or tensor, and the value."""


class InvalidGraphError(ValueError):
    """``validate()`` (or planning, which validates) found a graph that means nothing: no node, no
    output, a cycle, a virtual tensor read as a graph input, a tensor of another graph wired in, or a
    dim/stride no kernel can run. The message names the node or tensor and the value."""


class NotFoundError(KeyError):
    """A lookup by name or uid found nothing (``find_tensor``, ``get_node``, ``family_by_name``);
    the message names what was looked for and what there is."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnknownEngineError(NotFoundError):
    """An engine id that names no engine: outside the backend's range, or in no family's block, or a
    slot no family declares."""


class PlanIndexError(IndexError):
    """A plan-list index out of range (``select_plan``, ``*_at_index``); the message names the call,
    the index and the list's length."""


class StreamCaptureError(RuntimeError):
    """A call that would plan or build a graph ran while its stream was capturing a CUDA graph:
    planning compiles, allocates and synchronizes, none of which a capture allows. The message names
    the call and the graph it would have built; running the call once eagerly, with the same shapes,
    before the capture builds it."""


class KnobError(ValueError):
    """A knob handed to ``create_execution_plan`` (or replayed from a plan cache) is outside the
    engine's declared domain. ``engine`` and ``knob`` name them (``knob`` None when the whole
    assignment is refused)."""

    def __init__(self, message: str, engine: str | None = None, knob: str | None = None) -> None:
        super().__init__(message)
        self.engine = engine
        self.knob = knob


class UnknownKnobError(KnobError, KeyError):
    """A knob name the engine does not declare."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class KnobTypeError(KnobError, TypeError):
    """The knobs are not a mapping of knob name to value."""


class DeserializationError(TypeError, ValueError):
    """``deserialize()`` refused a payload; nothing was added to the graph. ``path`` names the first
    bad field (``$.tensors[2].dim[0]``; ``$`` for the payload as a whole)."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


class BackendPayloadError(DeserializationError, ImportError):
    """A payload that is not pygraph IR, on a machine without the cuDNN backend that reads every other
    payload: it cannot be told apart from garbage here. An ``ImportError`` as well, for the caller
    who handed a real backend payload and catches the missing backend."""


class MissingExtraError(ImportError):
    """A module that needs what an extra installs (a torch op without torch) was imported where it
    is absent: the message names the module, what it needs and the ``pip install`` that adds it."""


class ConfigurationWarning(UserWarning):
    """An environment variable pygraph reads holds a value it cannot use (an unknown engine name, an
    unparsable value); the message names the variable, the value and what is accepted. Warned once
    per process and value."""


class CacheWarning(UserWarning):
    """A disk cache cannot be used (its directory is a file, unwritable, another user's or writable by
    others), one of its entries failed its integrity or ownership check and is rebuilt, or an entry's
    lock cannot be taken and the object is built without the cache. Execution goes on without the
    cache; warned once per process and directory (or entry, or lock)."""


class PlanCacheWarning(CacheWarning):
    """The plan cache could not be used as asked (the message names the file and why: not a regular
    file, not a plan cache, unreadable), or skipped a row it cannot read or that no longer names a
    plan (the message names the row). Planning and autotuning go on without it."""
