"""The explicit execution context: handle, stream and workspace, never ambient device state."""

from __future__ import annotations

from typing import Any, NamedTuple

from pygraph.execution.errors import HandleError

__all__ = ["ExecutionContext", "bind_stream", "stream_of"]


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


def _cudnn() -> Any:
    global _backend
    backend = _backend
    if backend is None:
        import cudnn

        backend = _backend = cudnn
    return backend


def stream_of(handle: Any) -> Any:
    """The stream a backend handle is bound to; a handle whose stream cannot be read raises.

    None (no handle) means the default stream. Nothing here consults a framework's "current" stream.
    """
    if handle is None:
        return None
    try:
        return _cudnn().get_stream(handle)
    except Exception as exc:  # the binding's errors are untyped; the caller needs to know which handle
        raise HandleError(f"cannot read the stream of handle {handle!r}: {exc}") from exc


def bind_stream(handle: Any, stream: int) -> None:
    """Set the stream a backend handle runs on, as ``cudnn.set_stream`` (which skips the backend call
    when a `cudnn.Handle` is already on ``stream``: a steady loop pays it once). A raw
    ``cudnnHandle_t`` int carries no remembered stream, so it is set every call. A handle whose
    stream cannot be set raises `HandleError` naming it and the stream."""
    try:
        backend = _cudnn()
        if isinstance(handle, int) and not isinstance(handle, bool):
            backend._pybind_module._raw_set_stream(handle, stream)
        else:
            backend.set_stream(handle, stream)
    except Exception as exc:  # the binding's errors are untyped; the caller needs to know which handle
        raise HandleError(f"cannot set the stream of handle {handle!r} to {stream!r}: {exc}") from exc
