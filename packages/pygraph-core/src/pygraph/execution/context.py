"""The explicit execution context: handle, stream and workspace, never ambient device state."""

from __future__ import annotations

from typing import Any, NamedTuple

from pygraph.execution.errors import HandleError

__all__ = ["ExecutionContext", "stream_of"]


class ExecutionContext(NamedTuple):
    """What one call runs with.

    ``handle`` is the backend handle (or None), ``stream`` the stream to enqueue on (an int
    ``cudaStream_t``; None or 0 is the default stream), ``workspace`` the workspace device address
    (0 when the plan needs none).
    """

    handle: Any
    stream: Any
    workspace: int


_backend: Any = None  # the cudnn module, imported on the first handle (never per call)


def stream_of(handle: Any) -> Any:
    """The stream a backend handle is bound to; a handle whose stream cannot be read raises.

    None (no handle) means the default stream. Nothing here consults a framework's "current" stream.
    """
    if handle is None:
        return None
    global _backend
    try:
        backend = _backend
        if backend is None:
            import cudnn

            backend = _backend = cudnn
        return backend.get_stream(handle)
    except Exception as exc:  # the binding's errors are untyped; the caller needs to know which handle
        raise HandleError(f"cannot read the stream of handle {handle!r}: {exc}") from exc
