"""The per-call path of one built plan: normalize once, check the workspace, call the plan.

Built once per (graph, plan) when the plan is selected; everything it can settle at build
(the layout, the plan's bound execute, its workspace need, whether it reads the stream) is
captured, so a call does no lookup the build already answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pygraph.engines.base import CompiledPlan
from pygraph.execution.context import ExecutionContext, bind_stream, stream_of
from pygraph.execution.errors import HandleError, OperandGeometryError, WorkspaceTooSmallError
from pygraph.execution.normalize import normalize
from pygraph.execution.variant_pack import DEVICE_UNKNOWN, OperandLayout, VariantPack

__all__ = [
    "backend_stream_handle", "geometry_rows", "holds", "make_runner", "overridden_rows", "refuse_geometry",
    "refuse_workspace", "token_geometry",
]  # fmt: skip

Runner = Callable[..., None]  # (values, workspace, handle, stream=None)


def refuse_workspace(plan_name: str, needed: int, pack: VariantPack) -> None:
    """Raise when ``pack``'s workspace cannot hold ``needed`` bytes (a bare address is trusted)."""
    if not needed:
        return
    if not pack.workspace:
        raise WorkspaceTooSmallError(
            f"plan {plan_name} needs a workspace of {needed} bytes; none was passed", tensor="workspace"
        )
    if pack.workspace_bytes is not None and pack.workspace_bytes < needed:
        raise WorkspaceTooSmallError(
            f"plan {plan_name} needs a workspace of {needed} bytes; the one passed has {pack.workspace_bytes}",
            tensor="workspace",
        )


def geometry_rows(layout: OperandLayout) -> tuple[tuple[int, tuple, tuple], ...]:
    """(position, shape, stride) a buffer is held to, of every device operand of ``layout``: its
    declared geometry, or a ragged tensor's `token_geometry`."""
    return _rows(layout, {})


def overridden_rows(layout: OperandLayout, overrides: Any) -> tuple[tuple[int, tuple, tuple], ...]:
    """`geometry_rows` with execute-time shape overrides (uids, shapes, strides) applied: the
    geometry a backend plan runs with its dynamic shapes."""
    new = {}
    for uid, shape, stride in zip(overrides.uids or (), overrides.shapes or (), overrides.strides or ()):
        new[uid] = (tuple(shape), tuple(stride))
    return _rows(layout, new)


def _rows(layout: OperandLayout, new: dict) -> tuple[tuple[int, tuple, tuple], ...]:
    rows = []
    for i, d in enumerate(layout.declared):
        if layout.host[i] or not d.shape:
            continue
        shape, stride = new.get(layout.uids[i], (tuple(d.shape), tuple(d.stride)))
        if getattr(layout.tensors[i], "ragged_offset", None) is not None:
            shape, stride = token_geometry(shape, stride)
        rows.append((i, shape, stride))
    return tuple(rows)


def token_geometry(shape: tuple, stride: tuple) -> tuple[tuple, tuple]:
    """The part of a ragged tensor's declared geometry a host check can hold a buffer to.

    A ragged tensor (cuDNN's ragged offsets: a packed [tokens, heads, dim] buffer declared as
    [batch, heads, max_seq, dim]) starts batch element b at the b-th offset and holds as many rows
    as that sequence is long; both live in device memory, which a call does not read (reading them
    would synchronize the stream and break capture). So the batch axis (axis 0) and the sequence
    axis (the longest stride of the rest) are dropped; what is left, one token's axes in stride
    order, is held like any tensor: [191, 4, 64] holds a declared [3, 4, 128, 64] of stride
    [32768, 64, 256, 1] (one token: [4, 64] of stride [64, 1]); [191, 2, 64] does not. That the
    offsets stay inside the buffer is the caller's promise, as cu_seqlens are flash-attention's."""
    rest = sorted(zip(stride[1:], shape[1:]), reverse=True)[1:]
    return tuple(n for _, n in rest), tuple(s for s, _ in rest)


def refuse_geometry(plan_name: str, rows: tuple, pack: VariantPack) -> None:
    """Raise `OperandGeometryError` when a buffer of ``pack`` does not hold the tensor the plan runs.

    The plan reads and writes each operand with the geometry in ``rows`` (the declared one for a
    backend plan, or its execute-time overrides), so a smaller buffer would be read or written past
    its end, and one of other strides at the wrong elements. The common case is one tuple
    comparison per operand; the rest (`holds`) runs only when a buffer is not exactly that tensor.
    A bare address (its extent unknown) is read as the declared tensor."""
    bufs = pack.buffers
    for i, shape, stride in rows:
        buf = bufs[i]
        if buf[1] != shape or buf[2] != stride:
            if buf[4] != DEVICE_UNKNOWN and not holds(buf[1], buf[2], shape, stride):
                name = pack.layout.names[i]
                ragged = getattr(pack.layout.tensors[i], "ragged_offset", None) is not None
                raise OperandGeometryError(
                    f"execute(): tensor {name!r} is shape {list(buf[1])} stride {list(buf[2])}; plan "
                    f"{plan_name} runs {'a ragged tensor whose token is ' if ragged else ''}shape "
                    f"{list(shape)} stride {list(stride)}, which that buffer does not hold",
                    tensor=name,
                )


def holds(shape: tuple, stride: tuple, want_shape: tuple, want_stride: tuple) -> bool:
    """Whether a buffer of ``shape``/``stride`` holds a tensor of ``want_shape``/``want_stride``
    starting at its first element: on every axis (right-aligned, missing leading axes of extent 1)
    the buffer is at least as long, with the same stride wherever the tensor is longer than 1. So a
    [16, 8] buffer holds a declared [1, 16, 8], a [1, 32, 8] one holds its first 16 rows, and a
    smaller or transposed one holds nothing the plan would run."""
    if len(shape) != len(stride) or len(want_shape) != len(want_stride):
        return False
    rank = max(len(shape), len(want_shape))
    pad, want_pad = rank - len(shape), rank - len(want_shape)
    for axis in range(rank):
        w = want_shape[axis - want_pad] if axis >= want_pad else 1
        d = shape[axis - pad] if axis >= pad else 1
        if w > d:
            return False
        if w > 1 and stride[axis - pad] != want_stride[axis - want_pad]:
            return False
    return True


def backend_stream_handle(plan_name: str, handle: Any, stream: int) -> Any:
    """``handle`` set to run on ``stream``: a backend plan launches on its handle's stream only. No
    handle (neither the call's nor the graph's) raises `HandleError` naming the plan and the stream."""
    if handle is None:
        raise HandleError(
            f"execute(): plan {plan_name} is a backend plan, which runs on a cuDNN handle's stream; "
            f"stream={stream!r} needs handle= (a cudnn.Handle) too, which is set to that stream"
        )
    bind_stream(handle, stream)
    return handle


def make_runner(
    graph: Any, layout: OperandLayout, plan: CompiledPlan, plan_name: str, default_handle: Any
) -> Runner:
    """The selected plan's per-call path: one closure with the build's answers captured.

    Which closure (does the plan read the stream, does it take the pack) is settled here; a call
    normalizes, checks the workspace only when the plan needs one, and calls the plan.

    ``stream`` (an int ``cudaStream_t``; None: the handle's, or the default stream without one) is
    the call's launch stream: a python plan reads it as ``ctx.stream``; a backend plan runs on its
    handle's stream, so the handle (the call's, else the graph's) is set to it first, and a backend
    plan given a stream but no handle raises `HandleError` before anything runs.
    """
    execute = plan.execute
    needed = plan.get_workspace_size()
    new = tuple.__new__
    context = ExecutionContext
    reads_stream = getattr(plan, "reads_stream", True)

    if not plan.takes_variant_pack:
        by_pack = execute

        def execute(graph: Any, pack: VariantPack, ctx: ExecutionContext) -> None:
            by_pack(graph, pack.by_uid(), ctx)

    # A plan that does not check each call's geometry itself runs the declared one: every buffer is
    # held to it first. `passed` keeps the buffers of the last call that passed: `normalize` hands
    # back the very OperandBuffer a position accepted before when a call passes an equal buffer, so
    # a call repeating its buffers compares two lists by identity and checks nothing again (inline,
    # not a wrapper: host_cost_cpu measured a wrapper's frame and a per-row check every call at
    # 0.25-0.45 us of the 0.3 us the per-call path may grow by).
    rows = None if getattr(plan, "checks_geometry", False) else geometry_rows(layout)
    passed: list[Any] = [None]

    def check(pack: VariantPack) -> None:
        refuse_geometry(plan_name, rows, pack)
        passed[0] = pack.buffers

    # A call with no handle and no workspace runs with the same (immutable) context every time.
    if reads_stream:
        bare = ExecutionContext(None, None, 0) if default_handle is None else None

        def run(values: Any, workspace: Any, handle: Any, stream: Any = None) -> None:
            pack = normalize(layout, values, workspace)
            if rows is not None and pack.buffers != passed[0]:
                check(pack)
            if needed:
                refuse_workspace(plan_name, needed, pack)
            if stream is not None:  # the call's stream, whatever the handle's
                execute(
                    graph,
                    pack,
                    new(context, (default_handle if handle is None else handle, stream, pack.workspace)),
                )
                return
            if handle is None:
                handle = default_handle
                if handle is None and not pack.workspace:
                    execute(graph, pack, bare)
                    return
            stream = None if handle is None else stream_of(handle)
            execute(graph, pack, new(context, (handle, stream, pack.workspace)))

    else:
        bare = ExecutionContext(default_handle, None, 0)

        def run(values: Any, workspace: Any, handle: Any, stream: Any = None) -> None:
            pack = normalize(layout, values, workspace)
            if rows is not None and pack.buffers != passed[0]:
                check(pack)
            if needed:
                refuse_workspace(plan_name, needed, pack)
            if stream is not None:
                handle = backend_stream_handle(
                    plan_name, default_handle if handle is None else handle, stream
                )
                execute(graph, pack, new(context, (handle, stream, pack.workspace)))
                return
            if handle is None and not pack.workspace:
                execute(graph, pack, bare)
                return
            execute(
                graph,
                pack,
                new(context, (default_handle if handle is None else handle, None, pack.workspace)),
            )

    return run
