"""The per-call path of one built plan: normalize once, check the workspace, call the plan.

Built once per (graph, plan) when the plan is selected; everything it can settle at build
(the layout, the plan's bound execute, its workspace need, whether it reads the stream) is
captured, so a call does no lookup the build already answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pygraph.engines.base import CompiledPlan
from pygraph.execution.context import ExecutionContext, stream_of
from pygraph.execution.errors import WorkspaceTooSmallError
from pygraph.execution.normalize import normalize
from pygraph.execution.variant_pack import OperandLayout, VariantPack

__all__ = ["make_runner", "refuse_workspace"]

Runner = Callable[[Any, Any, Any], None]


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


def make_runner(
    graph: Any, layout: OperandLayout, plan: CompiledPlan, plan_name: str, default_handle: Any
) -> Runner:
    """The selected plan's per-call path: one closure with the build's answers captured.

    Which closure (does the plan read the stream, does it take the pack) is settled here; a call
    normalizes, checks the workspace only when the plan needs one, and calls the plan.
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

    # A call with no handle and no workspace runs with the same (immutable) context every time.
    if reads_stream:
        bare = ExecutionContext(None, None, 0) if default_handle is None else None

        def run(values: Any, workspace: Any, handle: Any) -> None:
            pack = normalize(layout, values, workspace)
            if needed:
                refuse_workspace(plan_name, needed, pack)
            if handle is None:
                handle = default_handle
                if handle is None and not pack.workspace:
                    execute(graph, pack, bare)
                    return
            stream = None if handle is None else stream_of(handle)
            execute(graph, pack, new(context, (handle, stream, pack.workspace)))

    else:
        bare = ExecutionContext(default_handle, None, 0)

        def run(values: Any, workspace: Any, handle: Any) -> None:
            pack = normalize(layout, values, workspace)
            if needed:
                refuse_workspace(plan_name, needed, pack)
            if handle is None and not pack.workspace:
                execute(graph, pack, bare)
                return
            execute(
                graph,
                pack,
                new(context, (default_handle if handle is None else handle, None, pack.workspace)),
            )

    return run
