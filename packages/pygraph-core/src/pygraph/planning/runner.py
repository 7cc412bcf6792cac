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
    execute = plan.execute
    needed = plan.get_workspace_size()
    new = tuple.__new__
    reads_stream = getattr(plan, "reads_stream", True)

    if plan.takes_variant_pack:

        def argument(pack: VariantPack) -> Any:
            return pack

    else:

        def argument(pack: VariantPack) -> Any:
            return pack.by_uid()

    def run(values: Any, workspace: Any, handle: Any) -> None:
        pack = normalize(layout, values, workspace)
        if needed:
            refuse_workspace(plan_name, needed, pack)
        if handle is None:
            handle = default_handle
        stream = stream_of(handle) if reads_stream and handle is not None else None
        execute(graph, argument(pack), new(ExecutionContext, (handle, stream, pack.workspace)))

    if plan.takes_variant_pack and not needed and not reads_stream:

        def run(
            values: Any, workspace: Any, handle: Any
        ) -> None:  # the backend's shape: nothing to branch on
            pack = normalize(layout, values, workspace)
            execute(
                graph,
                pack,
                new(ExecutionContext, (default_handle if handle is None else handle, None, pack.workspace)),
            )

    return run
