"""The pluggy hook a family package implements to declare its families.

Only the manifest's build hook calls it; at run time nothing registers.
A family package names its implementation module under the entry-point group
``pygraph.families`` in its pyproject::

    [project.entry-points."pygraph.families"]
    gemm = "pygraph_gemm.family"

and that module returns its `EngineFamily` records, each slot naming its engine class or saying
why it is planned::

    @hookimpl
    def pygraph_families() -> list[EngineFamily]:
        return [EngineFamily(name="gemm", engine_id=20400, package="pygraph_gemm", anchors=("MATMUL",),
                             slots={"gemm_sm90": EngineSlot(0, impl=("pygraph_gemm.engines.sm90", "GemmSm90Engine"))},
                             analyzer=("pygraph_gemm.analyzer", "analyze"),
                             heuristics=("pygraph_gemm.heuristics", "recommend"))]
"""

from __future__ import annotations

import pluggy

from pygraph.engines.manifest import EngineFamily

__all__ = ["ENTRY_POINT_GROUP", "PROJECT", "hookimpl", "hookspec", "pygraph_families"]

PROJECT = "pygraph"
ENTRY_POINT_GROUP = "pygraph.families"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def pygraph_families() -> list[EngineFamily]:  # type: ignore[empty-body]
    """Return the engine families this package declares."""
