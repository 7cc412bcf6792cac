"""Declaration of the ``gemm`` family (read by the manifest generator at build time)."""

from __future__ import annotations

from pygraph.engines.hookspec import hookimpl
from pygraph.engines.manifest import EngineFamily, EngineSlot


@hookimpl
def pygraph_families() -> list[EngineFamily]:
    return [
        EngineFamily(
            name="gemm",
            engine_id=20400,
            package="pygraph_gemm",
            slots={
                # CuTe DSL, TMA + wgmma
                "gemm_sm90": EngineSlot(0, impl=("pygraph_gemm.engines.sm90", "GemmSm90Engine")),
                # CuTe DSL, portable cp.async + mma.sync
                "gemm_sm80": EngineSlot(1, impl=("pygraph_gemm.engines.sm80", "GemmSm80Engine"), opt_in=True),
            },
            anchors=("MATMUL",),
            analyzer=("pygraph_gemm.analyzer", "analyze"),
            heuristics=("pygraph_gemm.heuristics", "recommend"),
        )
    ]
